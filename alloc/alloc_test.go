package alloc

import (
	"bytes"
	"errors"
	"path/filepath"
	"sync"
	"testing"

	"conquest/pram"
)

// metaSnapshot copies all allocator state: the header page, the page map
// and the tail bitmaps of 16-byte slabs. Equal snapshots mean an identical
// heap.
func metaSnapshot(h *Heap) []byte {
	a := h.Arena()
	out := append([]byte(nil), a.Bytes(h.g.hdr, uint64(h.g.dataOff-h.g.hdr))...)
	top := min(a.U64(h.g.hdr+hdrTop), h.g.npages)
	for pg := range top {
		if e := h.readEnt(pg); e.kind == kindSlab && e.order == 0 {
			out = append(out, a.Bytes(h.bitmapWord(pg, 0, 0), tailBitmap)...)
		}
	}
	return out
}

func TestAllocEveryClass(t *testing.T) {
	a, h, _ := newArena(t, 16<<20)
	m := newModel()
	sizes := []uint64{}
	for _, s := range classSizes {
		sizes = append(sizes, uint64(s)-1, uint64(s))
	}
	sizes = append(sizes, 2049, 4096, 4097, 12288, 25*4096-5, 64<<10, 100<<10, 512<<10, MaxAlloc-1, MaxAlloc)
	for i, n := range sizes {
		// Three of each so slabs hold more than one object.
		for k := range 3 {
			off := mustAlloc(t, h, n)
			o := obj{n: n, size: ClassSize(n), fill: byte(3*i + k + 1)}
			if s, err := h.SizeOf(off); err != nil || s != o.size || s < n {
				t.Fatalf("Alloc(%d): SizeOf = %d, %v; want %d", n, s, err, o.size)
			}
			fillObj(a, off, o)
			m.live[off] = o
		}
	}
	if err := m.verify(h); err != nil {
		t.Fatal(err)
	}
	for off := range m.live {
		mustFree(t, h, off)
		delete(m.live, off)
	}
	if err := m.verify(h); err != nil {
		t.Fatal(err)
	}
	// Everything merged back: only the kept empty slabs (one per class used)
	// are not free, and the largest block is available again.
	st := h.Stats()
	if st.FreePages+st.SlabPages != st.Pages || st.SlabPages > uint64(NumClasses) {
		t.Fatalf("after freeing everything: %+v", st)
	}
}

func TestAlignment(t *testing.T) {
	_, h, _ := newArena(t, 8<<20)
	for _, n := range []uint64{16, 32, 64, 128, 256, 512, 1024, 2048, 4096} {
		for range 40 {
			off := mustAlloc(t, h, n)
			if uint64(off)%n != 0 {
				t.Fatalf("Alloc(%d) = %#x, not aligned to %d", n, off, n)
			}
		}
	}
	for _, n := range []uint64{48, 80, 1360, 5000, 1 << 20} {
		if off := mustAlloc(t, h, n); off%16 != 0 {
			t.Fatalf("Alloc(%d) = %#x, not 16-byte aligned", n, off)
		}
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestBadRequests checks every rejected Free, SizeOf and Alloc: the right
// sentinel, and the heap unchanged.
func TestBadRequests(t *testing.T) {
	a, h, _ := newArena(t, 4<<20)
	small := mustAlloc(t, h, 100)    // class 112
	small2 := mustAlloc(t, h, 100)   // same slab
	large := mustAlloc(t, h, 3*4096) // 3 pages
	freed := mustAlloc(t, h, 5*4096) // freed below, becomes a free block
	freedS := mustAlloc(t, h, 100)   // freed slot
	tiny := mustAlloc(t, h, 16)      // 16-byte slab
	mustFree(t, h, freed)
	mustFree(t, h, freedS)
	start, end := h.DataRange()
	before := metaSnapshot(h)
	cases := []struct {
		name string
		off  pram.Off
		want error
	}{
		{"nil", 0, ErrOutOfRange},
		{"superblock", 512, ErrOutOfRange},
		{"header", h.g.hdr, ErrOutOfRange},
		{"before data", start - 16, ErrOutOfRange},
		{"end", end, ErrOutOfRange},
		{"past arena", pram.Off(a.Size() + 4096), ErrOutOfRange},
		{"huge", ^pram.Off(0), ErrOutOfRange},
		{"inside slot", small + 8, ErrNotAllocated},
		{"inside slot 16", small + 16, ErrNotAllocated},
		{"slab tail", h.g.page(uint64(small-start)>>pageShift) + 36*112, ErrNotAllocated},
		{"tiny bitmap", (tiny &^ 4095) + 4096 - 32, ErrNotAllocated},
		{"inside large", large + 4096, ErrNotAllocated},
		{"inside large odd", large + 100, ErrNotAllocated},
		{"free slot", freedS, ErrDoubleFree},
		{"free block", freed, ErrDoubleFree},
		{"free block page 2", freed + 2*4096, ErrDoubleFree},
		{"inside free page", freed + 16, ErrNotAllocated},
		{"never used", end - 4096, ErrNotAllocated},
	}
	for _, tc := range cases {
		tx := a.Begin()
		err := h.Free(tx, tc.off)
		if tx.Used() != 0 {
			t.Errorf("%s: rejected Free logged %d bytes", tc.name, tx.Used())
		}
		tx.Commit()
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Free(%#x) = %v, want %v", tc.name, tc.off, err, tc.want)
		}
		if _, err := h.SizeOf(tc.off); err == nil {
			t.Errorf("%s: SizeOf(%#x) succeeded", tc.name, tc.off)
		}
	}
	for _, n := range []uint64{0, MaxAlloc + 1, 1 << 40, ^uint64(0)} {
		tx := a.Begin()
		if _, err := h.Alloc(tx, n); !errors.Is(err, ErrTooLarge) {
			t.Errorf("Alloc(%d) = %v, want ErrTooLarge", n, err)
		}
		tx.Commit()
	}
	if !bytes.Equal(before, metaSnapshot(h)) {
		t.Fatal("rejected requests changed the heap")
	}
	// Double free right after a free, and after the block merged.
	mustFree(t, h, small2)
	inTx(t, a, func(tx *pram.Tx) error {
		if err := h.Free(tx, small2); !errors.Is(err, ErrDoubleFree) {
			t.Errorf("second Free of a slot = %v", err)
		}
		return nil
	})
	mustFree(t, h, large)
	inTx(t, a, func(tx *pram.Tx) error {
		if err := h.Free(tx, large); !errors.Is(err, ErrDoubleFree) {
			t.Errorf("second Free of pages = %v", err)
		}
		return nil
	})
	m := newModel()
	m.live[small] = obj{n: 100, size: 112}
	m.live[tiny] = obj{n: 16, size: 16}
	fillObj(a, small, m.live[small])
	fillObj(a, tiny, m.live[tiny])
	if err := m.verify(h); err != nil {
		t.Fatal(err)
	}
}

// TestNoSpace fills the heap with every size until ErrNoSpace: no panic,
// the heap unchanged by the failing call, and everything reusable after
// freeing (buddies merge back into 1 MiB blocks).
func TestNoSpace(t *testing.T) {
	a, h, _ := newArena(t, 6<<20)
	var offs []pram.Off
	fill := func(n uint64) int {
		k := 0
		for {
			before := metaSnapshot(h)
			tx := a.Begin()
			off, err := h.Alloc(tx, n)
			if errors.Is(err, ErrNoSpace) {
				if tx.Used() != 0 {
					t.Fatalf("Alloc(%d) failing with ErrNoSpace logged %d bytes", n, tx.Used())
				}
				tx.Abort()
				if !bytes.Equal(before, metaSnapshot(h)) {
					t.Fatalf("Alloc(%d) failing with ErrNoSpace changed the heap", n)
				}
				return k
			}
			if err != nil {
				tx.Abort()
				t.Fatal(err)
			}
			tx.Commit()
			offs = append(offs, off)
			k++
		}
	}
	big := fill(MaxAlloc)
	if big == 0 {
		t.Fatal("no 1 MiB block in a 6 MiB arena")
	}
	for _, n := range []uint64{512 << 10, 64 << 10, 4096, 2048, 1024, 100, 16} {
		fill(n)
	}
	st := h.Stats()
	if st.FreePages != ReservePages(st.Pages) || st.ReservePages == 0 || st.AvailBytes != 0 {
		t.Fatalf("heap full for ordinary allocations but %+v", st)
	}
	// Rewrites (UsingHalfReserve) may take half of it, never more.
	var half int
	_ = h.UsingHalfReserve(func() error {
		for _, n := range []uint64{64 << 10, 4096, 16} {
			half += fill(n)
		}
		return nil
	})
	r := ReservePages(st.Pages)
	if st := h.Stats(); half == 0 || st.FreePages != r-r/2 {
		t.Fatalf("after %d allocations on half the reserve of %d pages: %+v", half, r, st)
	}
	// Only frees may take the rest of the reserve, and they can take all of it.
	var extra int
	_ = h.UsingReserve(func() error {
		for _, n := range []uint64{64 << 10, 4096, 16} {
			extra += fill(n)
		}
		return nil
	})
	if st := h.Stats(); st.FreePages != 0 || st.NeverUsed != 0 || extra == 0 {
		t.Fatalf("heap full but %+v after %d allocations from the reserve", st, extra)
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatal(errs)
	}
	for _, off := range offs {
		mustFree(t, h, off)
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatal(errs)
	}
	offs = nil
	if again := fill(MaxAlloc); again < big {
		t.Fatalf("after freeing everything %d MiB blocks fit, first time %d", again, big)
	}
}

// TestRewriteReserve: with a rewrite reserve set, ordinary allocations
// leave it and the free reserve; UsingHalfReserve takes all of it and half
// the free reserve; UsingReserve the rest.
func TestRewriteReserve(t *testing.T) {
	a, h, _ := newArena(t, 6<<20)
	const rw = 40
	h.SetRewriteReserve(rw)
	fill := func() int {
		k := 0
		for {
			tx := a.Begin()
			if _, err := h.Alloc(tx, 4096); err != nil {
				tx.Abort()
				return k
			}
			tx.Commit()
			k++
		}
	}
	fill()
	st := h.Stats()
	r := ReservePages(st.Pages)
	if st.FreePages != r+rw || st.ReservePages != r+rw || st.AvailBytes != 0 {
		t.Fatalf("after ordinary allocations: %+v, want %d free pages (reserve %d, rewrite reserve %d)", st, r+rw, r, rw)
	}
	var half int
	_ = h.UsingHalfReserve(func() error { half = fill(); return nil })
	if st := h.Stats(); uint64(half) != rw+r/2 || st.FreePages != r-r/2 {
		t.Fatalf("UsingHalfReserve took %d pages, want %d; %+v", half, rw+r/2, st)
	}
	var all int
	_ = h.UsingReserve(func() error { all = fill(); return nil })
	if st := h.Stats(); st.FreePages != 0 || all != int(r-r/2) {
		t.Fatalf("UsingReserve took %d pages, want %d; %+v", all, r-r/2, st)
	}
}

// TestSpace10kFiles: 10,000 objects of 1 KB take close to 10 MB.
func TestSpace10kFiles(t *testing.T) {
	for _, n := range []uint64{1000, 1024} {
		_, h, _ := newArena(t, 24<<20)
		s0 := h.Stats()
		for range 10000 {
			mustAlloc(t, h, n)
		}
		s := h.Stats()
		held := (s.Pages-s.FreePages)*pageSize - (s0.Pages-s0.FreePages)*pageSize
		withMap := held + held/pageSize*EntrySize
		t.Logf("10,000 x %d B: %d pages = %.2f MB (+ page map %.2f MB)", n, held/pageSize,
			float64(held)/1e6, float64(withMap)/1e6)
		if withMap > 10_400_000 {
			t.Errorf("10,000 x %d B take %d bytes", n, withMap)
		}
	}
}

// TestEmptySlabKept: a class keeps one empty slab, so alternating Alloc and
// Free of one size does not split and merge pages; further empty slabs go
// back to the page allocator.
func TestEmptySlabKept(t *testing.T) {
	_, h, _ := newArena(t, 4<<20)
	off := mustAlloc(t, h, 300)
	mustFree(t, h, off)
	if s := h.Stats(); s.SlabPages != 1 {
		t.Fatalf("%d slab pages after one alloc/free, want 1 kept", s.SlabPages)
	}
	per := slotsOf(classOf(300))
	var offs []pram.Off
	for range 3 * per {
		offs = append(offs, mustAlloc(t, h, 300))
	}
	if s := h.Stats(); s.SlabPages != 3 {
		t.Fatalf("%d slab pages for %d objects, want 3", s.SlabPages, 3*per)
	}
	for _, off := range offs {
		mustFree(t, h, off)
	}
	if s := h.Stats(); s.SlabPages != 1 || s.Objects != 0 {
		t.Fatalf("after freeing all: %+v, want 1 slab page kept", s)
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatal(errs)
	}
}

// TestLargeTrim: a 25-page allocation holds 25 pages, not 32, and the 7
// returned pages serve other requests.
func TestLargeTrim(t *testing.T) {
	_, h, _ := newArena(t, 4<<20)
	off := mustAlloc(t, h, 25*4096)
	s := h.Stats()
	if s.LargePages != 25 || s.UsedBytes != 25*4096 {
		t.Fatalf("%+v", s)
	}
	next := mustAlloc(t, h, 4096)
	if next != off+25*4096 {
		t.Errorf("next page at %#x, want the first trimmed page %#x", next, off+25*4096)
	}
	mustFree(t, h, off)
	mustFree(t, h, next)
	s = h.Stats()
	if s.LargePages != 0 || s.FreePages != s.Pages {
		t.Fatalf("after free: %+v", s)
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatal(errs)
	}
}

func TestFormatAndOpenErrors(t *testing.T) {
	a, _, _ := newArena(t, 2<<20)
	tx := a.Begin()
	if _, err := Format(tx); !errors.Is(err, ErrFormatted) {
		t.Errorf("second Format = %v, want ErrFormatted", err)
	}
	tx.Abort()

	b, err := pram.Format(filepath.Join(t.TempDir(), "noheap"), pram.Options{Size: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if _, err := Open(b); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Open without a heap = %v, want ErrCorrupt", err)
	}
	// An arena whose journal leaves no room for a heap.
	c, err := pram.Format(filepath.Join(t.TempDir(), "tiny"), pram.Options{Size: 1 << 20, JournalLen: 1<<20 - 3*4096})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Close()
	tx = c.Begin()
	if _, err := Format(tx); !errors.Is(err, ErrNoSpace) {
		t.Errorf("Format of a 2-page heap = %v, want ErrNoSpace", err)
	}
	tx.Abort()
	if c.Root(0) != 0 {
		t.Error("failed Format set root slot 0")
	}
}

// TestAllocZero: AllocZero returns zeroed memory even where a freed object
// left bytes behind.
func TestAllocZero(t *testing.T) {
	a, h, _ := newArena(t, 4<<20)
	for _, n := range []uint64{200, 8192} {
		off := mustAlloc(t, h, n)
		fillObj(a, off, obj{size: ClassSize(n), fill: 0xAB})
		mustFree(t, h, off)
		var z pram.Off
		inTx(t, a, func(tx *pram.Tx) (err error) { z, err = h.AllocZero(tx, n); return })
		if z != off {
			t.Fatalf("AllocZero(%d) did not reuse the freed object (%#x vs %#x)", n, z, off)
		}
		for i, c := range a.Bytes(z, ClassSize(n)) {
			if c != 0 {
				t.Fatalf("AllocZero(%d): byte %d = %#x", n, i, c)
			}
		}
	}
}

// TestConcurrentReaders: SizeOf and Stats from many goroutines (run with
// -race) while no writer runs.
func TestConcurrentReaders(t *testing.T) {
	_, h, _ := newArena(t, 4<<20)
	var offs []pram.Off
	for i := range 200 {
		offs = append(offs, mustAlloc(t, h, uint64(1+i*37)))
	}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for _, off := range offs {
				if _, err := h.SizeOf(off); err != nil {
					t.Error(err)
				}
				_ = h.Stats()
			}
		})
	}
	wg.Wait()
}

// TestFreeSlots: FreeSlots counts the slots of slabs already in use that
// an allocation of a size could take (no page), over as many slabs as it
// is allowed: none for a large size, none before the class has a slab,
// none while its slabs are full.
func TestFreeSlots(t *testing.T) {
	_, h, _ := newArena(t, 4<<20)
	const n = 256
	if h.FreeSlots(n, 1) != 0 || h.FreeSlots(0, 10) != 0 || h.FreeSlots(MaxSmall+1, 10) != 0 || h.FreeSlots(n, 10) != 0 {
		t.Fatal("a fresh heap reports a free slot")
	}
	slots := slotsOf(classOf(n))
	var offs []pram.Off
	for i := uint64(0); i < slots; i++ {
		offs = append(offs, mustAlloc(t, h, n))
		if got, want := h.FreeSlots(n, 1) > 0, i+1 < slots; got != want {
			t.Fatalf("after %d of %d slots: a free slot within one slab = %v", i+1, slots, got)
		}
		if got := h.FreeSlots(n, 10); got != slots-i-1 {
			t.Fatalf("after %d of %d slots: FreeSlots = %d", i+1, slots, got)
		}
	}
	// A second slab, then a slot freed in the full first one: both count,
	// and the bound stops the walk after the first slab on the list.
	mustAlloc(t, h, n)
	pages := h.Stats().FreePages
	mustFree(t, h, offs[3])
	if h.FreeSlots(n, 1) == 0 || h.FreeSlots(n, 10) != slots || h.FreeSlots(n, 1) == slots {
		t.Fatalf("two slabs with %d free slots: FreeSlots %d, %d within one slab", slots, h.FreeSlots(n, 10), h.FreeSlots(n, 1))
	}
	mustAlloc(t, h, n)
	if h.Stats().FreePages != pages || h.FreeSlots(n, 10) != slots-1 {
		t.Fatalf("an allocation took a page (%d free, was %d) or no slot (FreeSlots %d)", h.Stats().FreePages, pages, h.FreeSlots(n, 10))
	}
}
