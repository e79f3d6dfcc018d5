package alloc

import (
	"errors"
	"strings"
	"testing"

	"conquest/pram"
)

// An entry whose kind byte is damaged is reported as an *UnknownKindError,
// and RepairKind gives back the kind its other fields prove: for a slab, a
// free block and a whole-page allocation. Every allocation is intact after.
func TestRepairKind(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	small := []pram.Off{mustAlloc(t, h, 100), mustAlloc(t, h, 100), mustAlloc(t, h, 10)}
	large := mustAlloc(t, h, 3*pageSize)
	other := mustAlloc(t, h, 8*pageSize)
	keep := mustAlloc(t, h, 5*pageSize)
	mustFree(t, h, other) // a free block (linked into its order's list)
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("fresh heap: %v", errs)
	}
	pageOf := func(off pram.Off) uint64 { return uint64(off-h.g.dataOff) >> pageShift }
	for _, c := range []struct {
		name string
		pg   uint64
		kind uint8
		want string
	}{
		{"slab", pageOf(small[0]), kindSlab, "a slab of class"},
		{"slab of class 0", pageOf(small[2]), kindSlab, "a slab of class 0 with 1 objects in use"},
		{"large", pageOf(large), kindLarge, "an allocation of 3 pages"},
		{"free", pageOf(other), kindFree, "a free block of"},
	} {
		t.Run(c.name, func(t *testing.T) {
			if k := h.readEnt(c.pg).kind; k != c.kind {
				t.Fatalf("page %d has kind %d, want %d", c.pg, k, c.kind)
			}
			inTx(t, a, func(tx *pram.Tx) error { tx.Set8(h.g.ent(c.pg)+entKind, 0x57); return nil })
			var uk *UnknownKindError
			if errs := h.Verify(); len(errs) == 0 || !errors.As(errs[0], &uk) || uk.Page != c.pg || uk.Kind != 0x57 {
				t.Fatalf("Verify: %v; want an UnknownKindError for page %d first", errs, c.pg)
			}
			var what string
			inTx(t, a, func(tx *pram.Tx) (err error) { what, err = h.RepairKind(tx, c.pg); return err })
			if !strings.Contains(what, c.want) {
				t.Errorf("RepairKind: %q, want %q", what, c.want)
			}
			if errs := h.Verify(); len(errs) > 0 {
				t.Fatalf("after RepairKind: %v", errs)
			}
		})
	}
	for _, off := range append(small, large, keep) {
		if _, err := h.SizeOf(off); err != nil {
			t.Fatalf("allocation at %#x: %v", off, err)
		}
	}
}

// RepairKind refuses an entry whose other fields do not prove its kind.
func TestRepairKindRefuses(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	s := mustAlloc(t, h, 100)
	mustAlloc(t, h, 100)
	large := mustAlloc(t, h, 3*pageSize)
	mustAlloc(t, h, pageSize)
	other := mustAlloc(t, h, 8*pageSize)
	mustAlloc(t, h, pageSize)
	mustFree(t, h, other)
	pageOf := func(off pram.Off) uint64 { return uint64(off-h.g.dataOff) >> pageShift }
	for _, c := range []struct {
		name   string
		pg     uint64
		damage func(tx *pram.Tx, o pram.Off)
	}{
		{"slab with a wrong count", pageOf(s), func(tx *pram.Tx, o pram.Off) { tx.Set16(o+entUsed, 7) }},
		{"large with a count past its block", pageOf(large), func(tx *pram.Tx, o pram.Off) { tx.Set32(o+entNPages, 9) }},
		{"large with a link", pageOf(large), func(tx *pram.Tx, o pram.Off) { tx.Set32(o+entNext, 3) }},
		{"free block off its list", pageOf(other), func(tx *pram.Tx, o pram.Off) {
			tx.Set64(o+entNext, 0)
			tx.Set64(h.g.hdr+hdrFreeHeads+pram.Off(8*int(h.readEnt(pageOf(other)).order)), 0)
		}},
		{"all zero", pageOf(large), func(tx *pram.Tx, o pram.Off) { tx.Set32(o+entNPages, 0) }},
	} {
		t.Run(c.name, func(t *testing.T) {
			tx := a.Begin()
			defer tx.Abort()
			o := h.g.ent(c.pg)
			c.damage(tx, o)
			tx.Set8(o+entKind, 0x57)
			if _, err := h.RepairKind(tx, c.pg); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("RepairKind: %v, want ErrCorrupt", err)
			}
			if k := h.readEnt(c.pg).kind; k != 0x57 {
				t.Fatalf("kind changed to %d", k)
			}
		})
	}
}

// A free block whose order byte is damaged is reported as a
// *BadOrderError, and RepairOrder takes the order back from the block it
// sits in; one whose block is not a power of two is refused.
func TestRepairOrder(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	mustAlloc(t, h, pageSize)
	other := mustAlloc(t, h, 8*pageSize)
	keep := mustAlloc(t, h, pageSize)
	mustFree(t, h, other)
	pg := uint64(other-h.g.dataOff) >> pageShift
	e := h.readEnt(pg)
	if e.kind != kindFree {
		t.Fatalf("page %d is not a free block", pg)
	}
	inTx(t, a, func(tx *pram.Tx) error { tx.Set8(h.g.ent(pg)+entOrder, 45); return nil })
	var bo *BadOrderError
	if errs := h.Verify(); len(errs) == 0 || !errors.As(errs[0], &bo) || bo.Page != pg || bo.Order != 45 {
		t.Fatalf("Verify: %v; want a BadOrderError for page %d first", errs, pg)
	}
	var j uint
	inTx(t, a, func(tx *pram.Tx) (err error) { j, err = h.RepairOrder(tx, pg); return err })
	if j != uint(e.order) {
		t.Errorf("RepairOrder set order %d, want %d", j, e.order)
	}
	if errs := h.Verify(); len(errs) > 0 {
		t.Fatalf("after RepairOrder: %v", errs)
	}
	if _, err := h.SizeOf(keep); err != nil {
		t.Fatal(err)
	}
	// Junk in a page inside the block: the run up to it is 1 page, which a
	// free block of order 0 would fill, but the entry then holds a count.
	tx := a.Begin()
	defer tx.Abort()
	tx.Set8(h.g.ent(pg)+entOrder, 45)
	tx.Set32(h.g.ent(pg)+entNPages, 3)
	if _, err := h.RepairOrder(tx, pg); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("RepairOrder of an entry with a page count: %v", err)
	}
}

// TestRepairKindFrom: a slab's entry whose first word (kind, class, count,
// pages) is overwritten proves no kind (RepairKind refuses), and every
// object in the page was unreachable: one random word made a whole file
// system unmountable (its root directory's table was in such a page).
// RepairKindFrom takes the class from the live objects the walk found in
// the page and the slot bitmap, or, with none found, from the partial list
// that holds the page; the heap verifies clean and the objects are whole.
func TestRepairKindFrom(t *testing.T) {
	a, h, _ := newArena(t, 32<<20)
	full := []pram.Off{}
	for range 16 { // a full slab of 256-byte objects
		full = append(full, mustAlloc(t, h, 256))
	}
	partial := []pram.Off{mustAlloc(t, h, 1024), mustAlloc(t, h, 1024)} // 2 of 4 slots
	tiny := []pram.Off{mustAlloc(t, h, 10), mustAlloc(t, h, 16)}        // class 0: bitmap in the page's tail
	pageOf := func(off pram.Off) uint64 { return uint64(off-h.g.dataOff) >> pageShift }
	for _, c := range []struct {
		name  string
		objs  []pram.Off
		marks []pram.Off // what the walk found (nil: none)
		want  string
	}{
		{"full slab, its objects found", full, full, "a slab of class 11 (256 bytes) with 16 objects in use, as its 16 live object(s)"},
		{"partial slab, none found", partial, nil, "a slab of class 20 (1024 bytes) with 2 objects in use, as its place on the partial list of class 20"},
		{"class 0", tiny, tiny, "a slab of class 0 (16 bytes) with 2 objects in use"},
	} {
		t.Run(c.name, func(t *testing.T) {
			pg := pageOf(c.objs[0])
			saved := h.a.U64(h.g.ent(pg))
			inTx(t, a, func(tx *pram.Tx) error { tx.Set64(h.g.ent(pg), 0x5a3c7e1f9d2b4a68); return nil })
			if err := h.Verify(); len(err) == 0 {
				t.Fatal("Verify found nothing")
			}
			if err := inTxErr(a, func(tx *pram.Tx) error { _, err := h.RepairKind(tx, pg); return err }); err == nil {
				t.Fatal("RepairKind proved a kind from a random word")
			}
			var what string
			inTx(t, a, func(tx *pram.Tx) error {
				var err error
				what, err = h.RepairKindFrom(tx, pg, c.marks)
				return err
			})
			if !strings.Contains(what, c.want) {
				t.Fatalf("RepairKindFrom: %q, want %q", what, c.want)
			}
			if got := h.a.U64(h.g.ent(pg)); got != saved {
				t.Errorf("entry's first word %#x, was %#x", got, saved)
			}
			if errs := h.Verify(); len(errs) > 0 {
				t.Fatalf("Verify after the repair: %v", errs)
			}
			for _, off := range c.objs {
				if _, err := h.SizeOf(off); err != nil {
					t.Fatalf("object %#x: %v", off, err)
				}
			}
		})
	}
	// Objects that fit no class's bitmap, or a few objects of a full slab
	// that fit the bitmaps of several classes (0, 256 and 512 are slots
	// of 64- and 128-byte slabs as well): nothing changes.
	pg := pageOf(full[0])
	saved := h.a.U64(h.g.ent(pg))
	inTx(t, a, func(tx *pram.Tx) error { tx.Set64(h.g.ent(pg), 0x5a3c7e1f9d2b4a68); return nil })
	for _, marks := range [][]pram.Off{{full[0] + 8}, full[:3]} {
		if err := inTxErr(a, func(tx *pram.Tx) error { _, err := h.RepairKindFrom(tx, pg, marks); return err }); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("RepairKindFrom with %d objects that prove no class: %v", len(marks), err)
		}
	}
	if got := h.a.U64(h.g.ent(pg)); got != 0x5a3c7e1f9d2b4a68 {
		t.Fatalf("a refused repair changed the entry to %#x", got)
	}
	inTx(t, a, func(tx *pram.Tx) error { tx.Set64(h.g.ent(pg), saved); return nil })
}
