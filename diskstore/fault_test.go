package diskstore

import (
	"bytes"
	"errors"
	"testing"

	"conquest/pram"
)

// TestFaultEveryOp fails the Nth device operation of a workload, for every
// N, with each kind of fault: the error reaches the caller as ErrIO or
// ErrNoSpace, the transaction rolls back, the store passes the consistency
// walk, and once the device behaves again the data written so far (buffered
// or on disk) is all there. Both durability modes.
func TestFaultEveryOp(t *testing.T) {
	for _, d := range []Durability{DurableOnProcessCrash, GatherInMemory} {
		t.Run(d.String(), func(t *testing.T) {
			skipGatherUnderRace(t, d)
			testFaultEveryOp(t, d)
		})
	}
}

func testFaultEveryOp(t *testing.T, d Durability) {
	kinds := []struct {
		kind FaultKind
		want error
		ops  Op
	}{
		{FaultEIO, ErrIO, OpWrite},
		{FaultShort, ErrIO, OpWrite},
		{FaultNoSpace, ErrNoSpace, OpWrite},
		{FaultEIO, ErrIO, OpSync},
		{FaultEIO, ErrIO, OpRead},
	}
	for _, k := range kinds {
		for nth := int64(1); ; nth++ {
			fd := NewFaultDevice(NewMemDevice(32<<20), nil)
			e := newEnv(t, envOpts{arenaSize: 4 << 20, blockSize: 4096, dev: fd, o: Options{Durability: d, FileBuffer: 256 << 10}})
			seg := e.newFile(1)
			other := e.newFile(2)
			if err := e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, other, 0, pattern(9, 0, 1<<20)) }); err != nil {
				t.Fatal(err)
			}
			fd.SetInjector(OnNth(k.ops, nth, k.kind))
			model := make([]byte, 0, 4<<20)
			var failed error
			// step runs an operation; a failed one must change nothing.
			step := func(f func(tx *pram.Tx) error) bool {
				err := e.do(f)
				if err != nil && failed == nil {
					failed = err
				}
				return err == nil
			}
			for i := 0; i < 12; i++ {
				off := int64(len(model))
				data := pattern(uint32(i+1), off, 200<<10)
				if step(func(tx *pram.Tx) error { return e.s.Write(tx, seg, off, data) }) {
					model = append(model, data...)
				}
			}
			if step(func(tx *pram.Tx) error { return e.s.Write(tx, seg, 1000, pattern(50, 1000, 70000)) }) {
				copy(model[1000:], pattern(50, 1000, 70000))
			}
			step(func(tx *pram.Tx) error { return e.s.Fsync(tx, seg) })
			buf := make([]byte, len(model))
			if _, err := e.s.ReadAt(seg, buf, 0, nil); err != nil && failed == nil {
				failed = err
			}
			if fd.Injected() == 0 {
				if nth == 1 {
					t.Fatalf("kind %d ops %d: no operation to fail", k.kind, k.ops)
				}
				break // past the last operation
			}
			if failed == nil {
				t.Fatalf("kind %d ops %d nth %d: fault injected, no error returned", k.kind, k.ops, nth)
			}
			if !errors.Is(failed, k.want) {
				t.Fatalf("kind %d ops %d nth %d: error %v, want %v", k.kind, k.ops, nth, failed, k.want)
			}
			// The device recovers; nothing was lost.
			fd.SetInjector(nil)
			e.must(func(tx *pram.Tx) error { return e.s.Fsync(tx, seg) })
			files := map[pram.Off]int64{seg: int64(len(model)), other: 1 << 20}
			e.check(files)
			got, err := e.read(seg, 0, len(model))
			if err != nil || !bytes.Equal(got, model) {
				t.Fatalf("kind %d ops %d nth %d: after recovery: err %v, equal %v", k.kind, k.ops, nth, err, bytes.Equal(got, model))
			}
			if got, err := e.read(other, 0, 1<<20); err != nil || !bytes.Equal(got, pattern(9, 0, 1<<20)) {
				t.Fatalf("kind %d ops %d nth %d: other file: err %v", k.kind, k.ops, nth, err)
			}
			e.restart()
			e.check(files)
			if nth > 40 {
				t.Fatalf("kind %d ops %d: more than 40 operations?", k.kind, k.ops)
			}
		}
	}
}

// TestFaultProbability runs a random workload on a device that fails 5% of
// its operations: errors surface, the store stays consistent.
func TestFaultProbability(t *testing.T) {
	fd := NewFaultDevice(NewMemDevice(32<<20), nil)
	e := newEnv(t, envOpts{blockSize: 4096, dev: fd, o: Options{FileBuffer: 128 << 10}})
	seg := e.newFile(1)
	fd.SetInjector(Any(WithProbability(OpWrite|OpSync, 0.05, 42, FaultEIO), WithProbability(OpWrite, 0.02, 43, FaultShort)))
	errs := 0
	size := int64(0)
	for i := 0; i < 200; i++ {
		off := int64(i*37%50) * 20000
		if err := e.write(seg, off, pattern(uint32(i), off, 30000)); err != nil {
			if !errors.Is(err, ErrIO) {
				t.Fatalf("write: %v", err)
			}
			errs++
		} else {
			size = max(size, off+30000)
		}
	}
	if errs == 0 {
		t.Fatal("no errors injected")
	}
	fd.SetInjector(nil)
	e.must(func(tx *pram.Tx) error { return e.s.Flush(tx, seg) })
	e.check(map[pram.Off]int64{seg: size})
	t.Logf("%d writes failed, %d faults injected", errs, fd.Injected())
}

// TestDiskFull fills the disk: ENOSPC surfaces, nothing leaks, deleting a
// file makes room again.
func TestDiskFull(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 64 << 10, dev: NewMemDevice(4 << 20)})
	a, b := e.newFile(1), e.newFile(2)
	var full error
	var size int64
	for i := 0; i < 100 && full == nil; i++ {
		off := int64(i) * 256 << 10
		if full = e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, off, pattern(1, off, 256<<10)) }); full == nil {
			size = off + 256<<10
		}
	}
	if !errors.Is(full, ErrNoSpace) {
		t.Fatalf("filling the disk: %v, want ErrNoSpace", full)
	}
	if st := e.s.Stats(); st.AvailBlocks != 0 || st.FreeBlocks > e.s.overwriteReserve()+4 {
		t.Fatalf("disk full but %d blocks free, %d available (%d kept for overwrites)", st.FreeBlocks, st.AvailBlocks, e.s.overwriteReserve())
	}
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, a, size) })
	e.check(map[pram.Off]int64{a: size, b: 0})
	if got, err := e.read(a, 0, int(size)); err != nil || !bytes.Equal(got, pattern(1, 0, int(size))) {
		t.Fatalf("full disk: file damaged: %v", err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Destroy(tx, a) })
	if err := e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, b, 0, pattern(2, 0, 1<<20)) }); err != nil {
		t.Fatalf("after delete: %v", err)
	}
	e.check(map[pram.Off]int64{b: 1 << 20})
}

// TestOverwriteFullDisk: a file that filled the disk is overwritten whole,
// in writes of 4 blocks and of a part of one block, which are copy-on-write:
// growth stops overwriteReserve blocks short of the end, the overwrites take
// those, and each sync gives the old copies back. Growing the file still
// fails with ErrNoSpace, and so does a second file. Without the reserve the
// first overwrite failed with ErrNoSpace.
func TestOverwriteFullDisk(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 64 << 10, dev: NewMemDevice(8 << 20)})
	a, b := e.newFile(1), e.newFile(2)
	keep := e.s.overwriteReserve()
	if keep < 2 {
		t.Fatalf("overwrite reserve of %d blocks", keep)
	}
	var size int64
	var full error
	for full == nil {
		if full = e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, size, pattern(1, size, 256<<10)) }); full == nil {
			size += 256 << 10
		}
	}
	if !errors.Is(full, ErrNoSpace) {
		t.Fatalf("filling the disk: %v, want ErrNoSpace", full)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, a, size) })
	e.must(func(tx *pram.Tx) error { return e.s.Flush(tx, a) })
	if st := e.s.Stats(); st.AvailBlocks != 0 || st.FreeBlocks < keep {
		t.Fatalf("full disk: %d blocks free, %d available, want at least %d free and none available", st.FreeBlocks, st.AvailBlocks, keep)
	}
	want := pattern(1, 0, int(size))
	for off := int64(0); off < size; off += 256 << 10 {
		n := min(256<<10, size-off)
		data := pattern(3, off, int(n))
		if err := e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, off, data) }); err != nil {
			t.Fatalf("overwriting [%d, +%d) of a file that filled the disk: %v", off, n, err)
		}
		copy(want[off:], data)
	}
	// Part of a block, in the middle of the file.
	mid := size/2 + 1000
	part := pattern(4, mid, 5000)
	if err := e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, mid, part) }); err != nil {
		t.Fatalf("overwriting 5000 bytes at %d: %v", mid, err)
	}
	copy(want[mid:], part)
	if err := e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, a, size, pattern(1, size, 64<<10)) }); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("growing the file on the full disk: %v, want ErrNoSpace", err)
	}
	if err := e.do(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, b, 0, pattern(2, 0, 64<<10)) }); !errors.Is(err, ErrNoSpace) {
		t.Fatalf("a new file on the full disk: %v, want ErrNoSpace", err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Flush(tx, a) })
	e.check(map[pram.Off]int64{a: size, b: 0})
	if got, err := e.read(a, 0, int(size)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the overwritten file reads back wrong: %v", err)
	}
}
