package dirhash

import (
	"math/rand/v2"
	"testing"

	"conquest/pram"
)

// An intact directory salvages to exactly its entries.
func TestSalvageIntact(t *testing.T) {
	e := newEnv(t, 16<<20)
	for i := range 5000 {
		if err := e.insert(name(i), uint64(i+10), uint8(i%3)); err != nil {
			t.Fatal(err)
		}
	}
	got := map[string]val{}
	rep, err := e.dir().Salvage(func(nm []byte, ino uint64, typ uint8) {
		if _, dup := got[string(nm)]; dup {
			t.Errorf("%q salvaged twice", nm)
		}
		got[string(nm)] = val{ino, typ}
	})
	if err != nil || rep.Skipped != 0 || rep.BadSlot != 0 || rep.Entries != 5000 {
		t.Fatalf("salvage of an intact directory: %+v, %v", rep, err)
	}
	e.sameAs(got)
}

// Damage anywhere in a directory never makes Salvage panic, and it never
// hands over a name the directory did not hold (names are checked against
// their keys; an inode number has nothing to check it against, and the
// file system's walk judges it). Damage to one page loses at most the
// entries that page (and its chain) held.
func TestSalvageDamaged(t *testing.T) {
	e := newEnv(t, 16<<20)
	const n = 4000
	want := map[string]val{}
	for i := range n {
		want[name(i)] = val{uint64(i + 10), uint8(i % 3)}
		if err := e.insert(name(i), uint64(i+10), uint8(i%3)); err != nil {
			t.Fatal(err)
		}
	}
	root, _, _ := e.regions()
	regs := e.damageRegions(false)
	rng := rand.New(rand.NewPCG(11, 5))
	worst := n
	for round := range 200 {
		tx := e.a.Begin()
		damaged := 1 + rng.IntN(3)
		for range damaged {
			r := regs[rng.IntN(len(regs))]
			tx.Set8(r.off+pram.Off(rng.IntN(r.n)), uint8(rng.Uint32()))
		}
		got := 0
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("round %d: panic: %v", round, p)
				}
			}()
			_, err := e.dir().Salvage(func(nm []byte, ino uint64, typ uint8) {
				got++
				if _, ok := want[string(nm)]; !ok {
					t.Errorf("round %d: salvaged %q -> %d, a name never inserted", round, nm, ino)
				}
			})
			if err != nil {
				t.Fatalf("round %d: root undamaged, yet %v", round, err)
			}
		}()
		worst = min(worst, got)
		tx.Abort()
	}
	t.Logf("with 1-3 damaged bytes in table or pages, at least %d of %d entries salvaged", worst, n)
	// A bucket page holds at most 4096/(24+12) names; three damaged pages
	// (or table slots leading to them) lose no more than that each.
	if worst < n-3*(maxPage/(slotSize+12))*2 {
		t.Errorf("only %d of %d entries salvaged after at most 3 damaged bytes", worst, n)
	}
	// A damaged root yields nothing, with the error.
	tx := e.a.Begin()
	tx.Set32(root+rootOffMagic, 0)
	if rep, err := e.dir().Salvage(func([]byte, uint64, uint8) { t.Error("entry from a directory without a root") }); err == nil {
		t.Errorf("salvage with a damaged root: %+v, no error", rep)
	}
	tx.Abort()
	e.check()
}
