package alloc

import (
	"fmt"
	"math/bits"

	"conquest/pram"
)

// Small objects (1..MaxSmall bytes) live in one-page slabs of one size
// class. A slab's slot bitmap is in its page map entry (class 0: in the
// page's last tailBitmap bytes), so free slots hold no bookkeeping. Each
// class keeps a doubly linked list of its slabs with free slots (partial
// list); a full slab is on no list. A slab that becomes empty is returned
// to the page allocator unless it is the only slab on its class's list, so
// alternating Alloc/Free of one size does not split and merge pages.

// allocSmall allocates one object of class c.
func (o *op) allocSmall(c int) (pram.Off, uint64, error) {
	h := o.h
	head := h.partialHead(c)
	v, err := o.link(h.a.U64(head), "partial list head")
	if err != nil {
		return 0, 0, err
	}
	var pg uint64
	if v == 0 {
		if pg, err = o.allocPages(1, entry{kind: kindSlab, order: uint8(c)}); err != nil {
			return 0, 0, err
		}
		if c == 0 {
			o.tx.Zero(h.bitmapWord(pg, 0, 0), tailBitmap)
		}
		if err := o.listPush(head, pg); err != nil {
			return 0, 0, err
		}
		o.dSlab++
	} else {
		pg = v - 1
	}
	e := h.readEnt(pg)
	slots := slotsOf(c)
	if e.kind != kindSlab || int(e.order) != c || uint64(e.used) >= slots {
		return 0, 0, fmt.Errorf("%w: page %d on partial list %d has kind %d class %d with %d used",
			ErrCorrupt, pg, c, e.kind, e.order, e.used)
	}
	slot := slots
	for w := range bitmapWords(c) {
		wo := h.bitmapWord(pg, c, w)
		word := h.a.U64(wo)
		if free := ^word & slotMask(c, w); free != 0 {
			b := bits.TrailingZeros64(free)
			o.tx.Set64(wo, word|1<<b)
			slot = uint64(64*w + b)
			break
		}
	}
	if slot == slots {
		return 0, 0, fmt.Errorf("%w: slab page %d counts %d used of %d but has no free slot", ErrCorrupt, pg, e.used, slots)
	}
	o.tx.Set16(h.g.ent(pg)+entUsed, e.used+1)
	if uint64(e.used)+1 == slots {
		if err := o.listRemove(head, pg, e); err != nil {
			return 0, 0, err
		}
	}
	size := uint64(classSizes[c])
	return h.g.page(pg) + pram.Off(slot*size), size, nil
}

// freeSmall frees the live object l (a slab slot).
func (o *op) freeSmall(l loc) error {
	h := o.h
	pg, c := l.pg, l.class
	e := h.readEnt(pg)
	slots := slotsOf(c)
	if e.used == 0 || uint64(e.used) > slots {
		return fmt.Errorf("%w: slab page %d counts %d used of %d", ErrCorrupt, pg, e.used, slots)
	}
	wo := h.bitmapWord(pg, c, int(l.slot/64))
	o.tx.Set64(wo, h.a.U64(wo)&^(1<<(l.slot%64)))
	o.tx.Set16(h.g.ent(pg)+entUsed, e.used-1)
	head := h.partialHead(c)
	if uint64(e.used) == slots { // was full: back on the partial list
		if err := o.listPush(head, pg); err != nil {
			return err
		}
	}
	if e.used > 1 {
		return nil
	}
	// Empty: give the page back unless it is the class's only partial slab.
	e = h.readEnt(pg)
	if h.a.U64(head) == pg+1 && e.next == 0 {
		return nil
	}
	if err := o.listRemove(head, pg, e); err != nil {
		return err
	}
	o.dSlab--
	if c == 0 {
		// The tail bitmap is bookkeeping inside the page being freed: a
		// reuse in this Tx must log it (see reuse.go).
		h.reuse.note(o.tx, h.bitmapWord(pg, 0, 0), tailBitmap)
	}
	return o.freeBlock(pg, 0)
}
