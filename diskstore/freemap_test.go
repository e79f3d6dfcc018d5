package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"

	"conquest/pram"
)

// TestFreeMapModel allocates and frees random extents against a bitmap
// model until the free map has thousands of extents (leaf growth, splits,
// directory growth, merges), checking after every batch that the extents
// are exactly the maximal free runs of the model.
func TestFreeMapModel(t *testing.T) {
	const blocks = 1 << 16
	e := newEnv(t, envOpts{arenaSize: 32 << 20, blockSize: 4096, dev: NewMemDevice(blocks * 4096)})
	s := e.s
	used0 := e.h.Stats().UsedBytes // the free map: one extent
	free := make([]bool, blocks)
	for b := 1; b < blocks; b++ {
		free[b] = true
	}
	seed := uint64(20261130)
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewPCG(seed, 3))
	var owned []extent
	// runs are the model's free extents.
	runs := func() []extent {
		var xs []extent
		for b := 1; b < blocks; {
			if !free[b] {
				b++
				continue
			}
			c := b
			for c < blocks && free[c] {
				c++
			}
			xs = append(xs, extent{Block(b), Block(c)})
			b = c
		}
		return xs
	}
	verify := func(step int) {
		t.Helper()
		runs := runs()
		var got []extent
		if err := s.freeList().walk(func(r rec) bool { got = append(got, extent{Block(r[0]), Block(r[1])}); return true }); err != nil {
			t.Fatal(err)
		}
		if len(got) != len(runs) {
			t.Fatalf("step %d: %d extents, model has %d runs", step, len(got), len(runs))
		}
		var n uint64
		for i := range runs {
			if got[i] != runs[i] {
				t.Fatalf("step %d: extent %d is %v, model %v", step, i, got[i], runs[i])
			}
			n += runs[i].len()
		}
		if s.freeBlocks() != n {
			t.Fatalf("step %d: free count %d, model %d", step, s.freeBlocks(), n)
		}
		c := e.h.NewChecker()
		for _, err := range append(s.freeList().check(c), c.Errors()...) {
			t.Fatalf("step %d: %v", step, err)
		}
	}
	maxExtents := uint64(0)
	takes := 0
	for step := 0; step < 4000; step++ {
		if len(owned) > 0 && r.IntN(100) < 10 {
			// takeRun: the whole free runs from a point on, in order,
			// while their total stays within need.
			from, need := Block(1+r.IntN(blocks-1)), uint64(1+r.IntN(64))
			var want []extent
			total := uint64(0)
			for _, x := range runs() {
				if x.b < from {
					continue
				}
				if total+x.len() > need {
					break
				}
				want = append(want, x)
				total += x.len()
			}
			var got []extent
			e.must(func(tx *pram.Tx) (err error) { got, err = s.takeRun(tx, from, need); return err })
			if fmt.Sprint(got) != fmt.Sprint(want) {
				t.Fatalf("step %d: takeRun(%d, %d) took %v, model %v", step, from, need, got, want)
			}
			for _, x := range got {
				for b := x.b; b < x.e; b++ {
					free[b] = false
				}
				owned = append(owned, x)
			}
			takes += len(got)
			continue
		}
		if len(owned) == 0 || r.IntN(100) < 55 {
			want := uint64(1 + r.IntN(8))
			goal := Block(r.IntN(blocks))
			var x extent
			err := e.do(func(tx *pram.Tx) (err error) { x, err = s.allocExtent(tx, want, goal); return err })
			if errors.Is(err, ErrNoSpace) {
				continue
			}
			if err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			if x.len() == 0 || x.len() > want {
				t.Fatalf("step %d: asked %d, got %v", step, want, x)
			}
			for b := x.b; b < x.e; b++ {
				if !free[b] {
					t.Fatalf("step %d: allocated block %d twice", step, b)
				}
				free[b] = false
			}
			owned = append(owned, x)
		} else {
			i := r.IntN(len(owned))
			x := owned[i]
			// Free a random part of it.
			b := x.b + Block(r.IntN(int(x.len())))
			en := b + 1 + Block(r.IntN(int(x.e-b)))
			if err := e.do(func(tx *pram.Tx) error { return s.freeExtent(tx, extent{b, en}) }); err != nil {
				t.Fatalf("step %d: %v", step, err)
			}
			for c := b; c < en; c++ {
				free[c] = true
			}
			owned = append(owned[:i], owned[i+1:]...)
			if b > x.b {
				owned = append(owned, extent{x.b, b})
			}
			if en < x.e {
				owned = append(owned, extent{en, x.e})
			}
		}
		if n, _ := s.freeList().length(); n > maxExtents {
			maxExtents = n
		}
		if step%200 == 0 {
			verify(step)
		}
	}
	verify(-1)
	// Double frees are refused and change nothing.
	for _, x := range owned[:min(len(owned), 20)] {
		if x.b > 1 && free[x.b-1] {
			err := e.do(func(tx *pram.Tx) error { return s.freeExtent(tx, extent{x.b - 1, x.e}) })
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("double free of %v: %v", extent{x.b - 1, x.e}, err)
			}
		}
	}
	verify(-2)
	// Free everything: one extent again, every leaf but one gone.
	for _, x := range owned {
		e.must(func(tx *pram.Tx) error { return s.freeExtent(tx, x) })
		for c := x.b; c < x.e; c++ {
			free[c] = true
		}
	}
	verify(-3)
	if n, _ := s.freeList().length(); n != 1 {
		t.Fatalf("%d extents after freeing all", n)
	}
	h, _ := s.freeList().head()
	if h.nleaves != 1 {
		t.Fatalf("%d leaves for one extent", h.nleaves)
	}
	// And the leaf and the directory have shrunk back (shrinkLeaf,
	// shrinkDir): the free map takes the arena what it took at the start.
	lf, err := s.freeList().leaf(h, 0)
	if err != nil {
		t.Fatal(err)
	}
	if size, _ := e.h.SizeOf(lf.off); size != minLeafBytes || h.dirCap != minDirEntries {
		t.Fatalf("one extent in a leaf of %d bytes and a directory of %d entries; want %d and %d", size, h.dirCap, minLeafBytes, minDirEntries)
	}
	if used := e.h.Stats().UsedBytes; used != used0 {
		t.Fatalf("the arena holds %d bytes after freeing all, %d at the start", used, used0)
	}
	t.Logf("up to %d free extents; takeRun took %d", maxExtents, takes)
	if takes < 100 {
		t.Fatalf("takeRun took only %d extents", takes)
	}
	if maxExtents < 1000 {
		t.Fatalf("only %d extents: the directory was not exercised", maxExtents)
	}
}

// TestAllocSkipsHeldNearGoal: with many blocks held for the next checkpoint
// beside a file (each random rewrite of a shadowed arena's file frees one),
// an allocation examines at most firstFitNear free extents near its goal,
// then continues where the last long search ended, instead of walking
// every held extent each time.
func TestAllocSkipsHeldNearGoal(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096, dev: NewMemDevice(64 << 20)})
	e.s.shadowed = true // nothing releases the hold: no checkpoint is ever made here
	seg := e.newFile(1)
	const blocks = 2048
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, seg, 0, pattern(1, 0, blocks*4096)) })
	// Rewrite every other block of the first half: each leaves its old
	// block free but held.
	for b := int64(0); b < blocks/2; b += 2 {
		if err := e.write(seg, b*4096, pattern(2, b*4096, 4096)); err != nil {
			t.Fatal(err)
		}
	}
	e.s.mu.Lock()
	held := len(e.s.hold)
	e.s.mu.Unlock()
	if held < 400 {
		t.Fatalf("only %d extents held", held)
	}
	// The first search past them walks them all and leaves the rover at
	// what it found; the next ones do not.
	if err := e.write(seg, 1*4096, pattern(3, 1*4096, 4096)); err != nil {
		t.Fatal(err)
	}
	for _, b := range []int64{3, 5, 7} {
		before := e.s.scanned
		if err := e.write(seg, b*4096, pattern(3, b*4096, 4096)); err != nil {
			t.Fatal(err)
		}
		if n := e.s.scanned - before; n > firstFitNear+2 {
			t.Fatalf("rewriting block %d examined %d free extents (%d held)", b, n, held)
		}
	}
	if got, err := e.read(seg, 3*4096, 4096); err != nil || !bytes.Equal(got, pattern(3, 3*4096, 4096)) {
		t.Fatalf("read back: %v", err)
	}
	e.check(map[pram.Off]int64{seg: blocks * 4096})
}

// TestUnallocKeepsJournalRoom: allocFor's undo after a failed allocation
// (unalloc) gives back what it took; on free space cut into single blocks
// that is one free-map insertion, a leaf shifted, per block, and after
// takeRun took hundreds of them at once the undo overflowed the journal (a
// panic: EIO for what was ENOSPC). The undo is best effort, as the caller
// aborts the transaction, and stops while the journal has room.
func TestUnallocKeepsJournalRoom(t *testing.T) {
	const blocks = 1 << 14
	e := newEnv(t, envOpts{arenaSize: 16 << 20, blockSize: 4096, dev: NewMemDevice(blocks * 4096)})
	s := e.s
	// Every other block free: 8,191 single-block extents.
	e.must(func(tx *pram.Tx) error {
		x, err := s.allocExtent(tx, blocks-1, 1)
		if err != nil || x.len() != blocks-1 {
			return fmt.Errorf("allocating the disk: %v, %v", x, err)
		}
		return nil
	})
	for b := Block(1); b < blocks; b += 2 {
		e.must(func(tx *pram.Tx) error { return s.freeExtent(tx, extent{b, b + 1}) })
	}
	free0 := s.freeBlocks()
	var room uint64
	err := e.do(func(tx *pram.Tx) error {
		xs, err := s.takeRun(tx, 1, 3000)
		if err != nil {
			return err
		}
		if len(xs) != 3000 {
			return fmt.Errorf("takeRun took %d extents, want 3000", len(xs))
		}
		var allocs []allocation
		for i, x := range xs {
			allocs = append(allocs, allocation{uint64(i), x})
		}
		s.unalloc(tx, allocs)
		room = tx.Room()
		return ErrNoSpace // as the failed allocation would
	})
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("the transaction ended with %v, want the allocation's ErrNoSpace", err)
	}
	if room < unallocRoom/2 {
		t.Fatalf("the undo left %d bytes of journal", room)
	}
	if got := s.freeBlocks(); got != free0 {
		t.Fatalf("%d free blocks after the abort, %d before", got, free0)
	}
	if n, _ := s.freeList().length(); n != free0 {
		t.Fatalf("%d free extents after the abort, want %d", n, free0)
	}
	c := e.h.NewChecker()
	for _, err := range append(s.freeList().check(c), c.Errors()...) {
		t.Fatal(err)
	}
}
