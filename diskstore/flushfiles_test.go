package diskstore

import (
	"errors"
	"sync/atomic"
	"testing"

	"conquest/pram"
)

// TestFlushFilesOneSync: files written with WriteFitted in one transaction
// take only the blocks their data needs (no preallocation) and are made
// durable by FlushFiles with one device sync; a crash after the commit
// keeps all of them.
func TestFlushFilesOneSync(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	var syncs atomic.Int64
	fd := NewFaultDevice(cd, InjectorFunc(func(op Op, _ int64, _ int) FaultKind {
		if op == OpSync {
			syncs.Add(1)
		}
		return FaultNone
	}))
	e := newEnv(t, envOpts{blockSize: 4096, dev: fd})
	files := map[pram.Off]int64{}
	var segs []pram.Off
	for i := range 6 {
		segs = append(segs, e.newFile(uint64(i+1)))
	}
	e.must(func(tx *pram.Tx) error {
		for i, seg := range segs {
			n := int64(100<<10 + i*1000)
			if err := e.s.WriteFitted(tx, seg, 0, pattern(uint32(i+1), 0, int(n))); err != nil {
				return err
			}
			files[seg] = n
		}
		before := syncs.Load()
		if err := e.s.FlushFiles(tx, segs); err != nil {
			return err
		}
		if n := syncs.Load() - before; n != 1 {
			t.Errorf("FlushFiles of %d files: %d device syncs, want 1", len(segs), n)
		}
		return nil
	})
	var want uint64
	for _, n := range files {
		want += uint64((n + 4095) / 4096)
	}
	if st := e.s.Stats(); st.UsedBlocks != want {
		t.Fatalf("%d blocks used, want %d (the data's own: no preallocation)", st.UsedBlocks, want)
	}
	e.crash(cd.Crash(CrashLoseAll, 1))
	for i, seg := range segs {
		got, err := e.read(seg, 0, int(files[seg]))
		if err != nil || !isPattern(got, uint32(i+1), 0) {
			t.Fatalf("file %d after the crash: %v", i, err)
		}
	}
	e.check(files)

	// Plain Write preallocates: the contrast that makes the count above mean something.
	seg := e.newFile(10)
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, seg, 0, pattern(10, 0, 100<<10)) })
	if st := e.s.Stats(); st.UsedBlocks <= want+25 {
		t.Fatalf("Write took %d blocks for 25 blocks of data: no preallocation to compare with", st.UsedBlocks-want)
	}
}

// TestFlushFilesLeavesSyncErr: the failure of an earlier background sync
// is left for the next Flush to report, not taken by FlushFiles, whose
// caller (the core's periodic move) has no one to report it to.
func TestFlushFilesLeavesSyncErr(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	a, b := e.newFile(1), e.newFile(2)
	failed := e.s.ioErr("syncing disk", errors.New("injected"))
	e.s.syncErr = failed
	e.must(func(tx *pram.Tx) error {
		if err := e.s.WriteFitted(tx, a, 0, pattern(1, 0, 50<<10)); err != nil {
			return err
		}
		return e.s.FlushFiles(tx, []pram.Off{a})
	})
	if err := e.write(b, 0, pattern(2, 0, 8<<10)); err != nil {
		t.Fatal(err)
	}
	if err := e.flush(b); !errors.Is(err, ErrIO) {
		t.Fatalf("the next Flush returned %v, want the background sync's failure", err)
	}
	if err := e.flush(b); err != nil {
		t.Fatalf("reported twice: %v", err)
	}
}
