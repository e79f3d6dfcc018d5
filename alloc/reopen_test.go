package alloc

import (
	"bytes"
	"math/rand/v2"
	"testing"

	"conquest/pram"
)

// TestReopenIntact: structures written, arena closed and reopened from the
// same file are found intact, and the reopened heap then behaves exactly
// like a twin that was never closed (all allocator state is in the arena).
func TestReopenIntact(t *testing.T) {
	a1, h1, path := newArena(t, 32<<20)
	_, h2, _ := newArena(t, 32<<20)
	m := newModel()
	rng := rand.New(rand.NewPCG(7, 7))
	step := func(i int) {
		n := 1 + rng.Uint64N([]uint64{64, MaxSmall, 200 << 10}[i%3])
		free := rng.IntN(3) == 0 && len(m.live) > 0
		var victim pram.Off
		if free {
			for off := range m.live {
				victim = off
				break
			}
		}
		for k, h := range []*Heap{h1, h2} {
			if free {
				mustFree(t, h, victim)
				continue
			}
			off := mustAlloc(t, h, n)
			if k == 0 {
				m.live[off] = obj{n: n, size: ClassSize(n), fill: byte(i)}
				fillObj(a1, off, m.live[off])
			} else if _, ok := m.live[off]; !ok {
				t.Fatalf("step %d: twins diverge at Alloc(%d) = %#x", i, n, off)
			}
		}
		if free {
			delete(m.live, victim)
		}
	}
	for i := range 300 {
		step(i)
	}
	for round := range 3 {
		a1, h1 = reopen(t, a1, path, false)
		if a1.WasDirty() || a1.Recovered() != 0 {
			t.Fatalf("clean reopen: dirty %v, recovered %d", a1.WasDirty(), a1.Recovered())
		}
		if err := m.verify(h1); err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if !bytes.Equal(metaSnapshot(h1), metaSnapshot(h2)) {
			t.Fatalf("round %d: reopened heap differs from its twin", round)
		}
		for i := range 100 {
			step(300 + 100*round + i)
		}
	}
}
