package dirhash

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"conquest/alloc"
	"conquest/pram"
)

// Fill a small arena until Insert fails with ErrNoSpace, many times over
// (deleting some entries in between, with names of varied length, so the
// failure hits page growth, splits, doublings and chains). Each failure
// leaves the entries unchanged and the directory consistent whether the
// caller then commits or aborts; after Abort the heap is exactly as before
// the transaction.
func TestNoSpace(t *testing.T) {
	seed := uint64(1)
	rng := rand.New(rand.NewPCG(seed, 2))
	e := newEnv(t, pram.MinSize)
	model := map[string]val{}
	failures, commits := 0, 0
	next := 0
	for round := range 12 {
		for {
			next++
			nm := fmt.Sprintf("%d-%s", next, strings.Repeat("n", rng.IntN(60)))
			before, shape := e.h.Stats(), e.shape()
			tx := e.a.Begin()
			err := e.dir().Insert(tx, []byte(nm), uint64(next), 8)
			if err == nil {
				tx.Commit()
				model[nm] = val{uint64(next), 8}
				continue
			}
			if !errors.Is(err, alloc.ErrNoSpace) {
				tx.Abort()
				t.Fatalf("round %d: insert %d: %v, want ErrNoSpace", round, next, err)
			}
			failures++
			if _, _, ok := e.dir().Lookup([]byte(nm)); ok {
				t.Fatalf("round %d: failed insert left %q behind", round, nm)
			}
			if round%2 == 0 {
				// The caller commits whatever the failed insert did.
				tx.Commit()
				commits++
			} else {
				tx.Abort()
				if after := e.h.Stats(); after.UsedBytes != before.UsedBytes || after.Objects != before.Objects {
					t.Fatalf("round %d: after Abort the heap has %d bytes in %d objects, before %d in %d",
						round, after.UsedBytes, after.Objects, before.UsedBytes, before.Objects)
				}
				if got := e.shape(); got != shape {
					t.Fatalf("round %d: after Abort the root is %+v, before %+v", round, got, shape)
				}
			}
			e.sameAs(model)
			e.check()
			break
		}
		// Deleting never needs space; free a random third.
		for k := range model {
			if rng.IntN(3) == 0 {
				if _, _, err := e.delete(k); err != nil {
					t.Fatalf("round %d: delete with a full arena: %v", round, err)
				}
				delete(model, k)
			}
		}
		e.check()
	}
	t.Logf("%d ErrNoSpace failures (%d committed), %d entries at the end: %v", failures, commits, len(model), e.dir())
	e.restart()
	e.sameAs(model)
	e.check()
}

// Create in a full arena fails with ErrNoSpace and leaks nothing, whichever
// of its three allocations (page, table, root) fails.
func TestCreateNoSpace(t *testing.T) {
	e := newEnv(t, pram.MinSize)
	// Use up the heap with blocks of every size, keeping one of each small
	// size to free again.
	last := map[uint64]pram.Off{}
	for _, n := range []uint64{alloc.MaxAlloc, 1 << 16, 4096, minPage, rootSize, 16} {
		for {
			err := e.update(func(tx *pram.Tx) error {
				off, err := e.h.Alloc(tx, n)
				if err == nil {
					last[n] = off
				}
				return err
			})
			if err != nil {
				break
			}
		}
	}
	// Free room for the page, then also for the table: Create gets one and
	// two allocations further each time, then fails.
	for _, n := range []uint64{0, minPage, 16} {
		if n != 0 {
			if err := e.update(func(tx *pram.Tx) error { return e.h.Free(tx, last[n]) }); err != nil {
				t.Fatal(err)
			}
		}
		before := e.h.Stats()
		tx := e.a.Begin()
		_, err := Create(tx, e.h)
		if !errors.Is(err, alloc.ErrNoSpace) {
			t.Fatalf("Create in a full arena (freed %d): %v", n, err)
		}
		tx.Commit()
		if after := e.h.Stats(); after.Objects != before.Objects || after.UsedBytes != before.UsedBytes {
			t.Fatalf("failed Create left %d objects (before %d)", after.Objects, before.Objects)
		}
	}
}
