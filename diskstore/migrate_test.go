package diskstore

import (
	"bytes"
	"testing"

	"conquest/pram"
)

func TestPolicy(t *testing.T) {
	const th = 1 << 20
	for _, c := range []struct {
		size          int64
		toDisk, toMem bool
	}{{0, false, true}, {th / 2, false, true}, {th/2 + 1, false, false}, {th, false, false}, {th + 1, true, false}} {
		if ToDisk(c.size, th) != c.toDisk || ToArena(c.size, th) != c.toMem {
			t.Errorf("size %d: ToDisk %v ToArena %v", c.size, ToDisk(c.size, th), ToArena(c.size, th))
		}
	}
}

// TestMoveBackAtomic moves a large file back into the arena the way the
// core does (read it, copy into an arena allocation, destroy the segment
// list, all in one transaction) and crashes before the commit: the file is
// still on disk, intact, nothing leaked. Committed, the disk is empty.
func TestMoveBackAtomic(t *testing.T) {
	cd := NewCrashDevice(16 << 20)
	e := newEnv(t, envOpts{blockSize: 4096, dev: cd})
	seg := e.newFile(1)
	const size = 400 << 10
	data := pattern(1, 0, 2<<20)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 0, data) })
	e.must(func(tx *pram.Tx) error { return e.s.Truncate(tx, seg, size) })
	moveBack := func(tx *pram.Tx) (pram.Off, error) {
		buf := make([]byte, size)
		if _, err := e.s.ReadAt(seg, buf, 0, nil); err != nil {
			return 0, err
		}
		off, err := e.h.Alloc(tx, size)
		if err != nil {
			return 0, err
		}
		copy(e.a.Bytes(off, size), buf) // fresh allocation: unlogged
		return off, e.s.Destroy(tx, seg)
	}
	tx := e.a.Begin()
	if _, err := moveBack(tx); err != nil {
		t.Fatal(err)
	}
	e.crash(cd.Crash(CrashRandom, 1)) // the transaction never committed
	if got, err := e.read(seg, 0, size); err != nil || !bytes.Equal(got, data[:size]) {
		t.Fatalf("after crash mid-move: %v", err)
	}
	e.check(map[pram.Off]int64{seg: size})
	var off pram.Off
	e.must(func(tx *pram.Tx) (err error) { off, err = moveBack(tx); return err })
	if !bytes.Equal(e.a.Bytes(off, size), data[:size]) {
		t.Fatal("arena copy differs")
	}
	if st := e.s.Stats(); st.UsedBlocks != 0 || st.Files != 0 {
		t.Fatalf("after move back: %+v", st)
	}
	c := e.h.NewChecker()
	c.Mark(off, "moved file")
	k := e.s.NewChecker(c, CheckOptions{VerifyData: true})
	for _, err := range append(k.Finish(), c.Finish()...) {
		t.Error(err)
	}
}
