package diskstore

import (
	"bytes"
	"errors"
	"sync/atomic"
	"testing"

	"conquest/pram"
)

// stage stages data for owner, copying it in as the core's fill does.
func (e *env) stage(owner uint64, data []byte) *Staged {
	e.t.Helper()
	st, err := e.s.Stage(owner, uint64(len(data)), func(dst []byte) { copy(dst, data) })
	if err != nil {
		e.t.Fatal(err)
	}
	return st
}

// adopt gives st's blocks to a new segment list in a transaction of its
// own, and ends the reservation.
func (e *env) adopt(st *Staged) pram.Off {
	e.t.Helper()
	var seg pram.Off
	e.must(func(tx *pram.Tx) (err error) {
		seg, err = e.s.Adopt(tx, st)
		return err
	})
	e.s.Unstage(st)
	return seg
}

// stagedOverlap reports whether a file's mapped blocks include any of xs.
func stagedOverlap(t *testing.T, s *Store, seg pram.Off, xs []extent) bool {
	t.Helper()
	var hit bool
	err := s.segs(seg).walk(func(r rec) bool {
		b, n := Block(r[1]), r[2]
		for _, x := range xs {
			if b < x.e && x.b < b+Block(n) {
				hit = true
			}
		}
		return !hit
	})
	if err != nil {
		t.Fatal(err)
	}
	return hit
}

// TestStagedWriteAdopt: staged files are written and synced once by
// WriteStaged, without a transaction, and a segment list adopts the
// blocks with their checksums; what is written meanwhile never takes a
// staged block; all-zero blocks stay holes; and the files read back after a
// crash that loses every unsynced write.
func TestStagedWriteAdopt(t *testing.T) {
	cd := NewCrashDevice(32 << 20)
	var syncs atomic.Int64
	fd := NewFaultDevice(cd, InjectorFunc(func(op Op, _ int64, _ int) FaultKind {
		if op == OpSync {
			syncs.Add(1)
		}
		return FaultNone
	}))
	e := newEnv(t, envOpts{blockSize: 16 << 10, dev: fd})
	free0 := e.s.Stats().FreeBlocks
	sparse := pattern(3, 0, 200<<10)
	clear(sparse[32<<10 : 96<<10]) // file blocks 2..5 all zeros
	datas := [][]byte{pattern(1, 0, 1<<20+1), pattern(2, 0, 1500<<10), sparse}
	var sts []*Staged
	for i, d := range datas {
		sts = append(sts, e.stage(uint64(i+1), d))
	}
	if got, want := e.s.StagedBlocks(), uint64(65+94+13-4); got != want {
		t.Fatalf("%d blocks staged, want %d (the holes take none)", got, want)
	}
	if got := e.s.Stats().FreeBlocks; got != free0 {
		t.Fatalf("staging changed the free count: %d, want %d", got, free0)
	}
	// A write meanwhile allocates around the reservation.
	other := e.newFile(9)
	if err := e.write(other, 0, pattern(9, 0, 3<<20)); err != nil {
		t.Fatal(err)
	}
	for _, st := range sts {
		if stagedOverlap(t, e.s, other, st.xs) {
			t.Fatal("a write took a staged block")
		}
	}
	before := syncs.Load()
	if err := e.s.WriteStaged(sts); err != nil {
		t.Fatal(err)
	}
	if n := syncs.Load() - before; n != 1 {
		t.Fatalf("WriteStaged of 3 files: %d device syncs, want 1", n)
	}
	used := e.s.Stats().UsedBlocks
	files := map[pram.Off]int64{other: 3 << 20}
	var segs []pram.Off
	for i, st := range sts {
		seg := e.adopt(st)
		segs = append(segs, seg)
		files[seg] = int64(len(datas[i]))
	}
	if n := e.s.StagedBlocks(); n != 0 {
		t.Fatalf("%d blocks still staged after Unstage", n)
	}
	if got := e.s.Stats().UsedBlocks - used; got != 65+94+13-4 {
		t.Fatalf("adoption took %d blocks, want %d", got, 65+94+13-4)
	}
	if db, err := e.s.DiskBytes(segs[2]); err != nil || db != (13-4)*16<<10 {
		t.Fatalf("sparse file: %d bytes on disk (%v), want %d", db, err, (13-4)*16<<10)
	}
	e.check(files)
	if err := e.flush(other); err != nil {
		t.Fatal(err)
	}
	e.crash(cd.Crash(CrashLoseAll, 1))
	for i, seg := range segs {
		got, err := e.read(seg, 0, len(datas[i]))
		if err != nil || string(got) != string(datas[i]) {
			t.Fatalf("file %d after the crash: %v, same %v", i, err, string(got) == string(datas[i]))
		}
	}
	e.check(files)
}

// TestStagedNotAdopted: a crash after WriteStaged, before any Adopt, leaves
// the blocks free and the store consistent; Unstage without Adopt gives
// them back to allocation at once.
func TestStagedNotAdopted(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 16 << 10, dev: cd})
	free0 := e.s.Stats().FreeBlocks
	st := e.stage(1, pattern(1, 0, 4<<20))
	if err := e.s.WriteStaged([]*Staged{st}); err != nil {
		t.Fatal(err)
	}
	e.crash(cd.Crash(CrashLoseAll, 1))
	if n := e.s.StagedBlocks(); n != 0 || e.s.Stats().FreeBlocks != free0 {
		t.Fatalf("after the crash: %d staged, %d free, want 0 and %d", n, e.s.Stats().FreeBlocks, free0)
	}
	e.check(nil)

	// Staged then dropped: the blocks are allocatable again. A stage
	// adds to the disk's use, so it leaves the overwrite reserve.
	avail0 := e.s.Stats().AvailBlocks
	if _, err := e.s.Stage(2, (avail0+1)*16<<10, func(dst []byte) { copy(dst, pattern(2, 0, len(dst))) }); !isErr(err, ErrNoSpace) {
		t.Fatalf("staging one block more than is available: %v, want ErrNoSpace", err)
	}
	st = e.stage(2, pattern(2, 0, int(avail0-1)*16<<10))
	seg := e.newFile(3)
	if err := e.write(seg, 0, pattern(3, 0, 64<<10)); !isErr(err, ErrNoSpace) {
		t.Fatalf("write with all but one available block staged: %v, want ErrNoSpace", err)
	}
	e.s.Unstage(st)
	if err := e.write(seg, 0, pattern(3, 0, 64<<10)); err != nil {
		t.Fatalf("write after Unstage: %v", err)
	}
	e.check(map[pram.Off]int64{seg: 64 << 10})
}

// TestStagedWriteFails: a device error or a failed sync fails WriteStaged
// (ErrIO, ErrNoSpace for ENOSPC) and nothing in the arena changed; Unstage
// counts it among the I/O errors.
func TestStagedWriteFails(t *testing.T) {
	for _, tc := range []struct {
		name string
		op   Op
		kind FaultKind
		want error
	}{
		{"write EIO", OpWrite, FaultEIO, ErrIO},
		{"short write", OpWrite, FaultShort, ErrIO},
		{"write ENOSPC", OpWrite, FaultNoSpace, ErrNoSpace},
		{"sync EIO", OpSync, FaultEIO, ErrIO},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var arm atomic.Bool
			fd := NewFaultDevice(NewMemDevice(16<<20), InjectorFunc(func(op Op, _ int64, _ int) FaultKind {
				if arm.Load() && op == tc.op {
					return tc.kind
				}
				return FaultNone
			}))
			e := newEnv(t, envOpts{blockSize: 16 << 10, dev: fd})
			free0, ioErrs := e.s.Stats().FreeBlocks, e.s.Stats().IOErrors
			st := e.stage(1, pattern(1, 0, 2<<20))
			st2 := e.stage(2, pattern(2, 0, 1<<20))
			arm.Store(true)
			err := e.s.WriteStaged([]*Staged{st, st2})
			arm.Store(false)
			e.s.Unstage(st2)
			e.s.Unstage(st2) // twice: a no-op
			if !errors.Is(err, tc.want) {
				t.Fatalf("WriteStaged: %v, want %v", err, tc.want)
			}
			if err := e.do(func(tx *pram.Tx) error { _, err := e.s.Adopt(tx, st); return err }); !isErr(err, ErrCorrupt) {
				t.Fatalf("Adopt after a failed WriteStaged: %v, want a refusal", err)
			}
			e.s.Unstage(st)
			if got := e.s.Stats(); got.FreeBlocks != free0 || got.IOErrors != ioErrs+1 || e.s.StagedBlocks() != 0 {
				t.Fatalf("free %d (want %d), I/O errors %d (want %d), staged %d", got.FreeBlocks, free0, got.IOErrors, ioErrs+1, e.s.StagedBlocks())
			}
			e.check(nil)
		})
	}
}

// TestStagedFragmented: on free space cut into single blocks a staged file
// takes many extents; Adopt takes them from the free map with one shift
// per leaf, within a small journal, and the file reads back.
func TestStagedFragmented(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096, dev: NewMemDevice(32 << 20)})
	// Fill, then free every other block.
	hold := e.newFile(1)
	for off := int64(0); off < 24<<20; off += 1 << 20 {
		if err := e.write(hold, off, pattern(1, off, 1<<20)); err != nil {
			t.Fatal(err)
		}
	}
	for start := int64(0); start < 24<<20; start += 1 << 20 {
		e.must(func(tx *pram.Tx) error {
			for off := start; off < start+1<<20; off += 8192 {
				if err := e.s.PunchHole(tx, hold, off, 4096); err != nil {
					return err
				}
			}
			return nil
		})
	}
	if err := e.flush(hold); err != nil {
		t.Fatal(err)
	}
	data := pattern(2, 0, 1<<20)
	st := e.stage(2, data)
	if len(st.xs) < 200 {
		t.Fatalf("staged in %d extents: the free space is not fragmented", len(st.xs))
	}
	if err := e.s.WriteStaged([]*Staged{st}); err != nil {
		t.Fatal(err)
	}
	room0 := 0
	var seg pram.Off
	e.must(func(tx *pram.Tx) (err error) {
		room0 = int(tx.Room())
		seg, err = e.s.Adopt(tx, st)
		if used := room0 - int(tx.Room()); used > 64<<10 {
			t.Errorf("adopting %d extents took %d bytes of journal", len(st.xs), used)
		}
		return err
	})
	e.s.Unstage(st)
	got, err := e.read(seg, 0, len(data))
	if err != nil || string(got) != string(data) {
		t.Fatalf("read back: %v", err)
	}
	e.check(map[pram.Off]int64{hold: 24 << 20, seg: 1 << 20})
}

// TestStagedBufferReuse: a staging buffer is reused after Unstage, and the
// part of a file's last block past its size is zeros even when the buffer
// held a larger file before: the core reads that part back when the file
// grows (a truncate up, a write past the end), where it must find zeros,
// never another file's bytes.
func TestStagedBufferReuse(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 16 << 10, dev: NewMemDevice(16 << 20)})
	reused := 0
	// sync.Pool may drop a buffer (at a collection; at random under the
	// race detector): try a few times, and check the tail every time.
	for try := 0; try < 20 && reused < 3; try++ {
		st := e.stage(1, pattern(1, 0, 48<<10))
		first := &st.buf[0]
		if err := e.s.WriteStaged([]*Staged{st}); err != nil {
			t.Fatal(err)
		}
		e.s.Unstage(st) // not adopted: changed meanwhile
		st = e.stage(2, pattern(2, 0, 24<<10))
		if &st.buf[0] == first {
			reused++
		}
		if err := e.s.WriteStaged([]*Staged{st}); err != nil {
			t.Fatal(err)
		}
		seg := e.adopt(st)
		got, err := e.read(seg, 16<<10, 16<<10) // the whole last block
		if err != nil {
			t.Fatal(err)
		}
		if !isPattern(got[:8<<10], 2, 16<<10) || !bytes.Equal(got[8<<10:], make([]byte, 8<<10)) {
			t.Fatal("the last block past the file's size is not zeros")
		}
		e.must(func(tx *pram.Tx) error { return e.s.Destroy(tx, seg) })
	}
	if reused == 0 {
		t.Fatal("no staging buffer was reused")
	}
}
