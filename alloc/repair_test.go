package alloc

import (
	"errors"
	"testing"

	"conquest/pram"
)

// Stray fields in the entry of a whole-page allocation or of a free block
// are reported as a *StrayFieldsError, and ClearStrayFields makes the heap
// consistent again without changing what the block is.
func TestClearStrayFields(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	large := mustAlloc(t, h, 3*pageSize) // 3 pages, in an order-2 block
	other := mustAlloc(t, h, 8*pageSize)
	mustFree(t, h, other) // a free block of order 3 (or merged into a larger one)
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("fresh heap: %v", errs)
	}
	lpg := uint64(large-h.g.dataOff) >> pageShift
	fpg := uint64(other-h.g.dataOff) >> pageShift
	if h.readEnt(fpg).kind != kindFree {
		t.Fatalf("page %d is not the head of a free block", fpg)
	}
	for _, c := range []struct {
		name string
		pg   uint64
		off  pram.Off // a byte of the entry to set
		free bool
	}{
		{"large: order", lpg, entOrder, false},
		{"large: used", lpg, entUsed + 1, false},
		{"large: next link", lpg, entNext + 2, false},
		{"large: bitmap", lpg, entBitmap + 13, false},
		{"free: used", fpg, entUsed, true},
		{"free: page count", fpg, entNPages + 3, true},
		{"free: bitmap", fpg, entBitmap + 1, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			inTx(t, a, func(tx *pram.Tx) error { tx.Set8(h.g.ent(c.pg)+c.off, 0x5a); return nil })
			errs := h.Verify()
			var sf *StrayFieldsError
			if len(errs) != 1 || !errors.As(errs[0], &sf) || sf.Page != c.pg || sf.Free != c.free || !errors.Is(errs[0], ErrCorrupt) {
				t.Fatalf("Verify: %v; want one StrayFieldsError for page %d", errs, c.pg)
			}
			inTx(t, a, func(tx *pram.Tx) error { return h.ClearStrayFields(tx, c.pg, false, 0) })
			if errs := h.Verify(); len(errs) > 0 {
				t.Fatalf("after ClearStrayFields: %v", errs)
			}
			if n, err := h.SizeOf(large); err != nil || n != 3*pageSize {
				t.Fatalf("the large allocation is now %d bytes, %v", n, err)
			}
		})
	}
	// A non-zero entry of a page inside the large block: zeroed.
	inTx(t, a, func(tx *pram.Tx) error { tx.Set8(h.g.ent(lpg+2)+entNext, 3); return nil })
	errs := h.Verify()
	var sf *StrayFieldsError
	if len(errs) != 1 || !errors.As(errs[0], &sf) || sf.Page != lpg+2 || !sf.Inside || sf.Head != lpg {
		t.Fatalf("Verify: %v; want one StrayFieldsError for page %d inside %d", errs, lpg+2, lpg)
	}
	tx := a.Begin()
	if err := h.ClearStrayFields(tx, lpg+2, true, fpg); !errors.Is(err, ErrCorrupt) {
		t.Errorf("zeroing page %d as if inside the block at %d: %v", lpg+2, fpg, err)
	}
	tx.Abort()
	inTx(t, a, func(tx *pram.Tx) error { return h.ClearStrayFields(tx, lpg+2, true, lpg) })
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("after zeroing the inner entry: %v", errs)
	}
	// An entry whose kind is not sane is refused.
	inTx(t, a, func(tx *pram.Tx) error { tx.Set8(h.g.ent(lpg)+entKind, 0x77); return nil })
	tx = a.Begin()
	if err := h.ClearStrayFields(tx, lpg, false, 0); !errors.Is(err, ErrCorrupt) {
		t.Errorf("ClearStrayFields of an entry of unknown kind: %v", err)
	}
	tx.Abort()
	if off := h.EntryOffset(large + 100); off != h.g.ent(lpg) {
		t.Errorf("EntryOffset: %#x, want %#x", off, h.g.ent(lpg))
	}
}

// A whole-page allocation whose page count lost its high bytes gets it back
// from the block it sits in; a count that fits no block is refused.
func TestRepairSize(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	for _, n := range []uint64{1, 3, 4, 5, 60} {
		off := mustAlloc(t, h, n*pageSize)
		pg := uint64(off-h.g.dataOff) >> pageShift
		inTx(t, a, func(tx *pram.Tx) error { tx.Set8(h.g.ent(pg)+entNPages+2, 0x91); return nil })
		errs := h.Verify()
		var bs *BadSizeError
		if len(errs) == 0 || !errors.As(errs[0], &bs) || bs.Page != pg {
			t.Fatalf("%d pages: Verify: %v; want a BadSizeError for page %d first", n, errs, pg)
		}
		inTx(t, a, func(tx *pram.Tx) error { _, err := h.RepairSize(tx, pg); return err })
		if errs := h.Verify(); len(errs) > 0 {
			t.Fatalf("%d pages: after RepairSize: %v", n, errs)
		}
		if got, err := h.SizeOf(off); err != nil || got != n*pageSize {
			t.Fatalf("%d pages: SizeOf %d, %v", n, got, err)
		}
	}
	// A count damaged in every byte (a corruption review saw 3914231238):
	// the header's counters prove it.
	for _, n := range []uint64{1, 2, 3, 7, 16, 100} {
		off := mustAlloc(t, h, n*pageSize)
		pg := uint64(off-h.g.dataOff) >> pageShift
		inTx(t, a, func(tx *pram.Tx) error { tx.Set32(h.g.ent(pg)+entNPages, 3914231238); return nil })
		if errs := h.Verify(); len(errs) == 0 {
			t.Fatalf("%d pages: Verify found nothing", n)
		}
		inTx(t, a, func(tx *pram.Tx) error { _, err := h.RepairSize(tx, pg); return err })
		if errs := h.Verify(); len(errs) > 0 {
			t.Fatalf("%d pages: after RepairSize: %v", n, errs)
		}
		if got, err := h.SizeOf(off); err != nil || got != n*pageSize {
			t.Fatalf("%d pages: SizeOf %d, %v", n, got, err)
		}
	}
	// A count whose low bits were damaged too, and a header counter
	// damaged besides: nothing proves the count. Refused, nothing changed.
	off := mustAlloc(t, h, 3*pageSize)
	pg := uint64(off-h.g.dataOff) >> pageShift
	inTx(t, a, func(tx *pram.Tx) error { tx.Set32(h.g.ent(pg)+entNPages, 0x77000001); return nil })
	for _, c := range []pram.Off{hdrLargePgs, hdrUsedBytes} {
		inTx(t, a, func(tx *pram.Tx) error { tx.Set64(h.g.hdr+c, a.U64(h.g.hdr+c)+pageSize); return nil })
		tx := a.Begin()
		if _, err := h.RepairSize(tx, pg); !errors.Is(err, ErrCorrupt) {
			t.Errorf("RepairSize of a count that fits no block, header counter %d damaged: %v", c, err)
		}
		tx.Abort()
		inTx(t, a, func(tx *pram.Tx) error { tx.Set64(h.g.hdr+c, a.U64(h.g.hdr+c)-pageSize); return nil })
	}
	// A second damaged count: the counters' difference is the sum of two.
	off2 := mustAlloc(t, h, 2*pageSize)
	pg2 := uint64(off2-h.g.dataOff) >> pageShift
	inTx(t, a, func(tx *pram.Tx) error { tx.Set32(h.g.ent(pg2)+entNPages, 0x66000000); return nil })
	tx := a.Begin()
	if _, err := h.RepairSize(tx, pg); !errors.Is(err, ErrCorrupt) {
		t.Errorf("RepairSize with another count damaged: %v", err)
	}
	tx.Abort()
	inTx(t, a, func(tx *pram.Tx) error { tx.Set32(h.g.ent(pg2)+entNPages, 2); return nil })
	inTx(t, a, func(tx *pram.Tx) error { _, err := h.RepairSize(tx, pg); return err })
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if got, err := h.SizeOf(off); err != nil || got != 3*pageSize {
		t.Fatalf("SizeOf %d, %v", got, err)
	}
}

// A slab page's stray page count and bitmap bits past its last slot are
// cleared, and its objects stay allocated.
func TestClearStraySlab(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	for _, n := range []uint64{16, 100, 2000} { // class 0 keeps its bitmap in the page
		objs := []pram.Off{mustAlloc(t, h, n), mustAlloc(t, h, n)}
		pg := uint64(objs[0]-h.g.dataOff) >> pageShift
		e := h.readEnt(pg)
		if e.kind != kindSlab {
			t.Fatalf("%d bytes: page %d is not a slab", n, pg)
		}
		cl := int(e.order)
		last := bitmapWords(cl) - 1
		inTx(t, a, func(tx *pram.Tx) error {
			tx.Set32(h.g.ent(pg)+entNPages, 7)
			if mask := slotMask(cl, last); mask != ^uint64(0) {
				w := h.bitmapWord(pg, cl, last)
				tx.Set64(w, h.a.U64(w)|^mask)
			}
			return nil
		})
		errs := h.Verify()
		var sf *StrayFieldsError
		if len(errs) == 0 || !errors.As(errs[0], &sf) || sf.Page != pg || !sf.Slab {
			t.Fatalf("%d bytes: Verify: %v", n, errs)
		}
		inTx(t, a, func(tx *pram.Tx) error { return h.ClearStrayFields(tx, pg, false, 0) })
		if errs := h.Verify(); len(errs) > 0 {
			t.Fatalf("%d bytes: after ClearStrayFields: %v", n, errs)
		}
		for _, o := range objs {
			if got, err := h.SizeOf(o); err != nil || got < n {
				t.Fatalf("%d bytes: object %#x is now %d bytes, %v", n, o, got, err)
			}
		}
	}
}

// A non-zero unused word of the header page is a *ReservedWordError for
// each such word, and ClearReserved zeroes it; offsets that are not
// reserved words are refused. (Found by corrupting random bytes of an
// image: the leaks that damage hid could not be freed until it was fixed.)
func TestClearReserved(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	o := mustAlloc(t, h, 100)
	words := []int{hdrChecksum + 8, hdrPartial + 8*NumClasses, pageSize - 8}
	inTx(t, a, func(tx *pram.Tx) error {
		for i, w := range words {
			tx.Set64(h.g.hdr+pram.Off(w), uint64(i+1)<<20)
		}
		return nil
	})
	errs := h.Verify()
	if len(errs) != len(words) {
		t.Fatalf("Verify: %v; want %d ReservedWordErrors", errs, len(words))
	}
	for i, err := range errs {
		rw, ok := errors.AsType[*ReservedWordError](err)
		if !ok || rw.Off != words[i] || !errors.Is(err, ErrCorrupt) {
			t.Fatalf("error %d: %v; want a ReservedWordError at %d", i, err, words[i])
		}
	}
	for _, off := range []int{hdrTop, hdrChecksum, hdrChecksum + 12, pageSize} {
		var tx *pram.Tx
		if err := h.ClearReserved(tx, off); !errors.Is(err, ErrCorrupt) {
			t.Errorf("ClearReserved(%d): %v; want ErrCorrupt", off, err)
		}
	}
	inTx(t, a, func(tx *pram.Tx) error {
		for _, w := range words {
			if err := h.ClearReserved(tx, w); err != nil {
				return err
			}
		}
		return nil
	})
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("after ClearReserved: %v", errs)
	}
	if sz, err := h.SizeOf(o); err != nil || sz < 100 {
		t.Fatalf("object after repair: %d, %v", sz, err)
	}
}
