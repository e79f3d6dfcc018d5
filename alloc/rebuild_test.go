package alloc

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	"conquest/pram"
)

// rebuildHeap is a heap with every kind of block: full and partial slabs of
// several classes, whole-page allocations, and free blocks of several
// orders (made by freeing every other allocation).
func rebuildHeap(t *testing.T) (*pram.Arena, *Heap, map[pram.Off]uint64) {
	a, h, _ := newArena(t, 32<<20)
	rng := rand.New(rand.NewPCG(7, 7))
	live := make(map[pram.Off]uint64)
	var all []pram.Off
	for i := range 600 {
		n := uint64(16 + rng.IntN(2048))
		if i%20 == 0 {
			n = uint64(1+rng.IntN(9)) * pageSize
		}
		off := mustAlloc(t, h, n)
		live[off] = n
		all = append(all, off)
	}
	for i, off := range all {
		if i%3 == 0 {
			mustFree(t, h, off)
			delete(live, off)
		}
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("fresh heap: %v", errs)
	}
	return a, h, live
}

// checkRebuilt opens the heap, verifies it and every live allocation, and
// allocates and frees once more.
func checkRebuilt(t *testing.T, a *pram.Arena, live map[pram.Off]uint64) {
	t.Helper()
	h, err := Open(a)
	if err != nil {
		t.Fatalf("Open after RebuildLists: %v", err)
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("Verify after RebuildLists: %v", errs)
	}
	for off, n := range live {
		if sz, err := h.SizeOf(off); err != nil || sz < n {
			t.Fatalf("allocation %#x of %d bytes: %d, %v", off, n, sz, err)
		}
	}
	mustFree(t, h, mustAlloc(t, h, 100))
	mustFree(t, h, mustAlloc(t, h, 3*pageSize))
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("Verify after using the rebuilt heap: %v", errs)
	}
}

// TestRebuildLists: damage to the heap's derived state (list heads, links,
// counters, a slab's count) that makes Open refuse the heap or the walk
// complain is undone by RebuildLists from the page map, with every
// allocation kept. (Found by corrupting random bytes of an image: a partial
// list head past top made the arena unmountable and fsck could not start.)
func TestRebuildLists(t *testing.T) {
	var slab, partial, free, large uint64
	cases := []struct {
		name     string
		openFail bool
		damage   func(a *pram.Arena, h *Heap)
	}{
		{"partial list head past top", true, func(a *pram.Arena, h *Heap) { a.PutU64(h.partialHead(10), 3439329279) }},
		{"free list head past top", true, func(a *pram.Arena, h *Heap) { a.PutU64(h.freeHead(0), 1<<40) }},
		{"counters", true, func(a *pram.Arena, h *Heap) {
			a.PutU64(h.g.hdr+hdrFreePages, a.U64(h.g.hdr+hdrFreePages)+5)
			a.PutU64(h.g.hdr+hdrObjects, 7)
		}},
		// Open sees it: the page at the new top heads a block.
		{"top", true, func(a *pram.Arena, h *Heap) {
			a.PutU64(h.g.hdr+hdrTop, a.U64(h.g.hdr+hdrTop)-1)
			a.PutU64(h.g.hdr+hdrFreePages, a.U64(h.g.hdr+hdrFreePages)-1)
		}},
		// A corruption review zeroed the header page: counters of 0 add
		// up, and the heap looked empty to every open and repair.
		{"dynamic part zeroed", true, func(a *pram.Arena, h *Heap) {
			copy(a.Bytes(h.g.hdr+hdrTop, HeaderSize-hdrTop), make([]byte, HeaderSize-hdrTop))
		}},
		{"list links", false, func(a *pram.Arena, h *Heap) {
			a.PutU64(h.g.ent(partial)+entNext, 0)
			a.PutU64(h.g.ent(free)+entNext, uint64(slab+1)<<32)
		}},
		{"list heads swapped", false, func(a *pram.Arena, h *Heap) {
			x, y := a.U64(h.partialHead(0)), a.U64(h.freeHead(0))
			a.PutU64(h.partialHead(0), y)
			a.PutU64(h.freeHead(0), x)
		}},
		{"garbage entries past top", true, func(a *pram.Arena, h *Heap) {
			// What random damage did in the image that led here.
			top := a.U64(h.g.hdr + hdrTop)
			a.PutU64(h.partialHead(17), 214404767416319)
			a.PutU64(h.g.ent(top+17), 0xdeadbeef)
		}},
		{"unwalkable entry at top", true, func(a *pram.Arena, h *Heap) {
			top := a.U64(h.g.hdr + hdrTop)
			a.PutU64(h.freeHead(3), 1<<40)
			a.PutU64(h.g.ent(top), 0x77) // kind 0x77
		}},
		{"kind byte of an allocation, and a list head", true, func(a *pram.Arena, h *Heap) {
			// Found by random damage (10,000 bytes): the rebuild that
			// must run before the image opens refused the map.
			a.PutU64(h.partialHead(4), 1<<50)
			a.PutU64(h.g.ent(large), a.U64(h.g.ent(large))&^0xff|0x57)
		}},
		{"junk inside an allocation, and a list head", true, func(a *pram.Arena, h *Heap) {
			a.PutU64(h.freeHead(2), 1<<45)
			a.PutU64(h.g.ent(large+1)+8, 0xdead_beef_0000)
			a.PutU64(h.g.ent(large+1), 0x4a00) // kind 0: no head's kind
		}},
		{"page count of an allocation, and a list head", true, func(a *pram.Arena, h *Heap) {
			a.PutU64(h.freeHead(1), 1<<44)
			a.PutU64(h.g.ent(large), a.U64(h.g.ent(large))|0x40<<56) // high byte of its count
		}},
		{"order of a free block, and a list head", true, func(a *pram.Arena, h *Heap) {
			a.PutU64(h.partialHead(2), 1<<47)
			a.PutU64(h.g.ent(free), a.U64(h.g.ent(free))&^0xff00|45<<8)
		}},
		{"kind byte of an allocation zeroed", false, func(a *pram.Arena, h *Heap) {
			// Random damage: the page then looked like no block at all.
			a.PutU64(h.g.ent(large), a.U64(h.g.ent(large))&^0xff)
		}},
		{"kind byte of a full slab zeroed", false, func(a *pram.Arena, h *Heap) {
			a.PutU64(h.g.ent(slab), a.U64(h.g.ent(slab))&^0xff)
		}},
		{"slab count", false, func(a *pram.Arena, h *Heap) {
			w := a.U64(h.g.ent(slab))
			a.PutU64(h.g.ent(slab), w&^(0xffff<<(8*entUsed))|1<<(8*entUsed)) // used = 1
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			a, h, live := rebuildHeap(t)
			slab, partial, free, large = 0, 0, 0, 0
			for pg := uint64(0); pg < a.U64(h.g.hdr+hdrTop); pg++ {
				e := h.readEnt(pg)
				switch {
				case e.kind == kindLarge && e.npages >= 2 && large == 0:
					large = pg
				case e.kind == kindSlab && uint64(e.used) == slotsOf(int(e.order)) && e.used > 1 && slab == 0:
					slab = pg
				case e.kind == kindSlab && uint64(e.used) < slotsOf(int(e.order)) && e.next != 0 && partial == 0:
					partial = pg
				case e.kind == kindFree && e.next != 0 && free == 0:
					free = pg
				}
			}
			if slab == 0 || partial == 0 || free == 0 || large == 0 {
				t.Fatalf("no full slab, linked partial slab or linked free block: %d %d %d", slab, partial, free)
			}
			tc.damage(a, h)
			_, err := Open(a)
			if (err != nil) != tc.openFail {
				t.Fatalf("Open of the damaged heap: %v", err)
			}
			errs := []error{err}
			if !tc.openFail {
				if errs = h.Verify(); len(errs) == 0 {
					t.Fatal("the walk does not see the damage")
				}
			}
			for _, err := range errs { // what tells Repair to rebuild
				if _, ok := errors.AsType[*DerivedStateError](err); !ok || !errors.Is(err, ErrCorrupt) {
					t.Fatalf("%v is not a DerivedStateError", err)
				}
			}
			h2, err := OpenForRepair(a)
			if err != nil {
				t.Fatal(err)
			}
			rep, err := h2.RebuildLists()
			if err != nil || rep.Words == 0 {
				t.Fatalf("RebuildLists: %+v, %v", rep, err)
			}
			checkRebuilt(t, a, live)
			if rep, err := h2.RebuildLists(); err != nil || rep.Words != 0 {
				t.Fatalf("second RebuildLists: %+v, %v; want nothing to do", rep, err)
			}
		})
	}
}

// TestRebuildListsRefuses: a page map that cannot be walked is refused with
// nothing written, as is a header whose static part is damaged.
func TestRebuildListsRefuses(t *testing.T) {
	a, h, _ := rebuildHeap(t)
	var large uint64
	for pg := uint64(0); pg < a.U64(h.g.hdr+hdrTop); pg++ {
		if e := h.readEnt(pg); e.kind == kindLarge && e.npages >= 2 {
			large = pg
			break
		}
	}
	for _, tc := range []struct {
		name   string
		off    pram.Off
		xor    uint64
		static bool
	}{
		{"unknown kind that proves none", h.g.ent(large), 9 | 1<<40, false},
		{"allocation covering a head", h.g.ent(large + 1), uint64(kindLarge) | 1<<32, false},
		// With the header's counters intact they would prove the count
		// (inferSize); damaged too, nothing does.
		{"allocation covering other blocks", h.g.ent(large), (1 | 64) << 32, false},
		{"heap magic", h.g.hdr + hdrMagic, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a.PutU64(tc.off, a.U64(tc.off)^tc.xor)
			defer a.PutU64(tc.off, a.U64(tc.off)^tc.xor)
			if tc.name == "allocation covering other blocks" {
				a.PutU64(h.g.hdr+hdrLargePgs, a.U64(h.g.hdr+hdrLargePgs)^4)
				defer a.PutU64(h.g.hdr+hdrLargePgs, a.U64(h.g.hdr+hdrLargePgs)^4)
			}
			before := bytes.Clone(a.Bytes(h.g.hdr, uint64(h.g.dataOff-h.g.hdr)))
			h2, err := OpenForRepair(a)
			if tc.static {
				if !errors.Is(err, ErrCorrupt) {
					t.Fatalf("OpenForRepair: %v; want ErrCorrupt", err)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h2.RebuildLists(); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("RebuildLists: %v; want ErrCorrupt", err)
			}
			if !bytes.Equal(before, a.Bytes(h.g.hdr, uint64(h.g.dataOff-h.g.hdr))) {
				t.Fatal("a refused rebuild changed the heap's metadata")
			}
		})
	}
}

// TestRebuildListsLostPages: pages below top in no block (the head entry of
// their block zeroed by damage) become one-page allocations. A one-page
// allocation is so restored as it was; the pages of a lost larger block are
// then allocations nothing owns, which the file system's repair frees as
// leaks. (Found by corrupting random bytes of an image: fsck --repair could
// not repair a heap with a lost page, which stayed refused for good.)
func TestRebuildListsLostPages(t *testing.T) {
	for _, tc := range []struct {
		name string
		pick func(h *Heap, ones, threes []pram.Off, free uint64) []uint64 // pages whose entries are zeroed
	}{
		{"one-page allocation", func(h *Heap, ones, _ []pram.Off, _ uint64) []uint64 {
			return []uint64{h.pageOf(ones[3])}
		}},
		{"three-page allocation", func(h *Heap, _, threes []pram.Off, _ uint64) []uint64 {
			return []uint64{h.pageOf(threes[1])}
		}},
		{"free block", func(h *Heap, _, _ []pram.Off, free uint64) []uint64 { return []uint64{free} }},
		{"last allocation", func(h *Heap, ones, _ []pram.Off, _ uint64) []uint64 {
			return []uint64{h.pageOf(ones[len(ones)-1])}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, h, _ := newArena(t, 8<<20)
			var ones, threes []pram.Off
			for i := range 40 {
				ones = append(ones, mustAlloc(t, h, pageSize))
				if i%10 == 0 {
					threes = append(threes, mustAlloc(t, h, 3*pageSize))
				}
			}
			mustFree(t, h, threes[2]) // a free block of 4 pages (with its tail)
			var free uint64
			for pg := uint64(0); pg < a.U64(h.g.hdr+hdrTop); pg++ {
				if e := h.readEnt(pg); e.kind == kindFree && e.order >= 1 {
					free = pg
					break
				}
			}
			if free == 0 {
				t.Fatal("no free block of two pages or more")
			}
			for i, off := range ones {
				copy(a.Bytes(off, 8), fmt.Sprintf("page%04d", i))
			}
			lost := tc.pick(h, ones, threes, free)
			for _, pg := range lost {
				clear(a.Bytes(h.g.ent(pg), EntrySize))
			}
			if errs := h.Verify(); len(errs) == 0 {
				t.Fatal("the walk does not see the damage")
			}
			h2, err := OpenForRepair(a)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := h2.RebuildLists(); err != nil {
				t.Fatalf("RebuildLists: %v", err)
			}
			h3, err := Open(a)
			if err != nil {
				t.Fatalf("Open after RebuildLists: %v", err)
			}
			if errs := h3.Verify(); len(errs) > 0 {
				t.Fatalf("Verify after RebuildLists: %v", errs)
			}
			for i, off := range ones {
				if sz, err := h3.SizeOf(off); err != nil || sz != pageSize {
					t.Fatalf("one-page allocation %d: %d, %v", i, sz, err)
				}
				if got, want := string(a.Bytes(off, 8)), fmt.Sprintf("page%04d", i); got != want {
					t.Fatalf("one-page allocation %d holds %q, want %q", i, got, want)
				}
			}
			// Every page of the lost block is now an allocation of its own;
			// freeing them (as the leak repair does) leaves a clean heap.
			for _, pg := range lost {
				for q := pg; q < pg+4 && q < a.U64(h3.g.hdr+hdrTop); q++ {
					if e := h3.readEnt(q); e.kind == kindLarge && e.npages == 1 && !slices.Contains(ones, h3.g.page(q)) {
						mustFree(t, h3, h3.g.page(q))
					}
				}
			}
			for i, off := range threes {
				if i != 2 && !slices.Contains(lost, h3.pageOf(off)) {
					mustFree(t, h3, off)
				}
			}
			for _, off := range ones {
				mustFree(t, h3, off)
			}
			if errs := h3.Verify(); len(errs) > 0 {
				t.Fatalf("Verify after freeing everything: %v", errs)
			}
			if st := h3.Stats(); st.Objects != 0 || st.UsedBytes != 0 {
				t.Fatalf("after freeing everything: %+v", st)
			}
		})
	}
}

// pageOf is the data page at off.
func (h *Heap) pageOf(off pram.Off) uint64 { return uint64(off-h.g.dataOff) >> pageShift }
