package dirhash

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"conquest/alloc"
)

// With every name hashing alike, the directory holds 127 names (ordinals
// 0..126) in one overflow chain, refuses the 128th with ErrCollision (an
// alloc.ErrNoSpace), and still finds, scans and deletes each one.
func TestCollisionsConstantHash(t *testing.T) {
	setHash(t, func([]byte) uint64 { return 0xdeadbeefcafef00d })
	e := newEnv(t, 8<<20)
	model := map[string]val{}
	// Long names, so the 127 entries need an overflow chain.
	long := func(i int) string { return fmt.Sprintf("%03d-%s", i, strings.Repeat("x", 200)) }
	for i := range maxOrdinal + 1 {
		if err := e.insert(long(i), uint64(i), 8); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		model[long(i)] = val{uint64(i), 8}
	}
	err := e.insert(long(999), 1, 8)
	if !errors.Is(err, ErrCollision) || !errors.Is(err, alloc.ErrNoSpace) {
		t.Fatalf("128th colliding name: %v, want ErrCollision wrapping alloc.ErrNoSpace", err)
	}
	if err := e.insert(long(5), 1, 8); !errors.Is(err, ErrExists) {
		t.Fatalf("insert of a present colliding name: %v, want ErrExists", err)
	}
	r := e.shape()
	if r.pages < 2 {
		t.Errorf("127 long colliding names in %v: expected an overflow chain", e.dir())
	}
	e.sameAs(model)
	e.check()

	// Cursors: each key differs in its ordinal only; resuming after every
	// single entry still returns each name once.
	seen := map[string]int{}
	for cur := uint64(0); ; {
		n := 0
		e.dir().Scan(cur, func(en Entry, next uint64) bool {
			seen[string(en.Name)]++
			cur, n = next, 1
			return false
		})
		if n == 0 {
			break
		}
	}
	if len(seen) != len(model) {
		t.Fatalf("one-at-a-time scan saw %d names, want %d", len(seen), len(model))
	}
	for k, c := range seen {
		if c != 1 {
			t.Fatalf("%q returned %d times", k, c)
		}
	}

	// Freeing an ordinal lets a new name in, with the smallest free ordinal.
	if _, _, err := e.delete(long(40)); err != nil {
		t.Fatal(err)
	}
	delete(model, long(40))
	if err := e.insert(long(999), 999, 8); err != nil {
		t.Fatal(err)
	}
	model[long(999)] = val{999, 8}
	var key uint64
	e.dir().Scan(0, func(en Entry, next uint64) bool {
		if string(en.Name) == long(999) {
			key = next - 1
		}
		return true
	})
	if ord := key & (1<<ordBits - 1); ord != 40 {
		t.Errorf("new name got ordinal %d, want 40 (the one freed)", ord)
	}
	e.restart()
	e.sameAs(model)
	e.check()
	for k := range model {
		if _, _, err := e.delete(k); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.shape(); r.count != 0 || r.pages != 1 || r.depth != 0 {
		t.Errorf("after deleting everything: %v", e.dir())
	}
	e.check()
}

// Partial collisions: names agree in their top 55 bits in groups of 3, so
// keys share prefixes and differ in ordinals, spread over many buckets.
func TestCollisionsGroups(t *testing.T) {
	setHash(t, func(b []byte) uint64 {
		var n int
		fmt.Sscanf(string(b), "g%d-", &n)
		return uint64(n) * 0x9e3779b97f4a7c15 &^ (1<<9 - 1) // low 9 bits are not in the key
	})
	e := newEnv(t, 16<<20)
	model := map[string]val{}
	for g := range 3000 {
		for j := range 3 {
			nm := fmt.Sprintf("g%d-%d", g, j)
			if err := e.insert(nm, uint64(g*3+j), 1); err != nil {
				t.Fatal(err)
			}
			model[nm] = val{uint64(g*3 + j), 1}
		}
	}
	e.check()
	e.sameAs(model)
	for g := range 3000 {
		nm := fmt.Sprintf("g%d-1", g) // the middle ordinal of each group
		if _, _, err := e.delete(nm); err != nil {
			t.Fatal(err)
		}
		delete(model, nm)
	}
	e.check()
	e.sameAs(model)
}
