package alloc

import (
	"encoding/binary"
	"fmt"

	"conquest/pram"
)

// entry is a decoded page map entry (without the slab bitmap).
type entry struct {
	kind   uint8
	order  uint8 // buddy order (kindFree) or size class (kindSlab)
	used   uint16
	npages uint32
	next   uint32 // page+1 of the next list member, 0 = none
	prev   uint32 // page+1 of the previous list member, 0 = none
}

// readEnt decodes the entry of page pg. Precondition: pg < npages.
func (h *Heap) readEnt(pg uint64) entry {
	b := h.a.Bytes(h.g.ent(pg), 16)
	le := binary.LittleEndian
	return entry{kind: b[entKind], order: b[entOrder], used: le.Uint16(b[entUsed:]),
		npages: le.Uint32(b[entNPages:]), next: le.Uint32(b[entNext:]), prev: le.Uint32(b[entPrev:])}
}

// entZero reports whether the whole entry of pg is zero.
func (h *Heap) entZero(pg uint64) bool {
	o := h.g.ent(pg)
	return h.a.U64(o)|h.a.U64(o+8)|h.a.U64(o+16)|h.a.U64(o+24) == 0
}

// bitmapWords is the number of 64-bit bitmap words of a slab of class c.
func bitmapWords(c int) int {
	if c == 0 {
		return tailBitmap / 8
	}
	return 2
}

// bitmapWord is the offset of word w of the slot bitmap of slab page pg of
// class c: in the page's tail for class 0, in the entry otherwise.
func (h *Heap) bitmapWord(pg uint64, c, w int) pram.Off {
	if c == 0 {
		return h.g.page(pg) + pageSize - tailBitmap + pram.Off(8*w)
	}
	return h.g.ent(pg) + entBitmap + pram.Off(8*w)
}

// slotMask is the mask of the bits of word w that stand for slots.
func slotMask(c, w int) uint64 {
	n := int(slotsOf(c)) - 64*w
	switch {
	case n >= 64:
		return ^uint64(0)
	case n <= 0:
		return 0
	}
	return 1<<uint(n) - 1
}

// slotUsed reports whether slot s of slab pg (class c) is allocated.
func (h *Heap) slotUsed(pg uint64, c int, s uint64) bool {
	return h.a.U64(h.bitmapWord(pg, c, int(s/64)))&(1<<(s%64)) != 0
}

// op is one Alloc or Free: the Tx, the top of the carved pages, and counter
// deltas written once by flush.
type op struct {
	h   *Heap
	tx  *pram.Tx
	top uint64 // pages carved; entries of pages >= top are never read

	topDirty             bool
	noBacking            error // why carve found no room in the image file (see Heap.reserve)
	dFree, dSlab, dLarge int64
	dObjects, dUsed      int64
}

func (h *Heap) begin(tx *pram.Tx) (*op, error) {
	top := h.a.U64(h.g.hdr + hdrTop)
	if top > h.g.npages {
		return nil, fmt.Errorf("%w: top %d beyond %d pages", ErrCorrupt, top, h.g.npages)
	}
	return &op{h: h, tx: tx, top: top}, nil
}

// flush writes the changed counters to the header.
func (o *op) flush() {
	a, hdr := o.h.a, o.h.g.hdr
	if o.topDirty {
		o.tx.Set64(hdr+hdrTop, o.top)
	}
	for _, d := range [...]struct {
		off pram.Off
		d   int64
	}{{hdrFreePages, o.dFree}, {hdrSlabPages, o.dSlab}, {hdrLargePgs, o.dLarge},
		{hdrObjects, o.dObjects}, {hdrUsedBytes, o.dUsed}} {
		if d.d != 0 {
			o.tx.Set64(hdr+d.off, a.U64(hdr+d.off)+uint64(d.d))
		}
	}
}

// link checks a list link (page+1, 0 = none) read from the arena.
func (o *op) link(v uint64, what string) (uint64, error) {
	if v > o.top {
		return 0, fmt.Errorf("%w: %s points to page %d, only %d carved", ErrCorrupt, what, v-1, o.top)
	}
	return v, nil
}

// setEnt writes the whole entry of pg (bitmap zero).
func (o *op) setEnt(pg uint64, e entry) {
	var b [EntrySize]byte
	le := binary.LittleEndian
	b[entKind], b[entOrder] = e.kind, e.order
	le.PutUint16(b[entUsed:], e.used)
	le.PutUint32(b[entNPages:], e.npages)
	le.PutUint32(b[entNext:], e.next)
	le.PutUint32(b[entPrev:], e.prev)
	o.tx.SetBytes(o.h.g.ent(pg), b[:])
}

// setLinks writes the list links of pg.
func (o *op) setLinks(pg uint64, next, prev uint32) {
	o.tx.Set64(o.h.g.ent(pg)+entNext, uint64(next)|uint64(prev)<<32)
}

// listPush puts pg at the head of the list whose head word is at head; pg's
// entry is already written (its links are overwritten here).
func (o *op) listPush(head pram.Off, pg uint64) error {
	first, err := o.link(o.h.a.U64(head), "list head")
	if err != nil {
		return err
	}
	o.setLinks(pg, uint32(first), 0)
	if first != 0 {
		o.tx.Set32(o.h.g.ent(first-1)+entPrev, uint32(pg+1))
	}
	o.tx.Set64(head, pg+1)
	return nil
}

// listRemove unlinks pg (whose decoded entry is e) from the list whose head
// word is at head, and clears pg's links.
func (o *op) listRemove(head pram.Off, pg uint64, e entry) error {
	next, err := o.link(uint64(e.next), "list next")
	if err != nil {
		return err
	}
	prev, err := o.link(uint64(e.prev), "list prev")
	if err != nil {
		return err
	}
	if prev != 0 && o.h.readEnt(prev-1).next != uint32(pg+1) ||
		next != 0 && o.h.readEnt(next-1).prev != uint32(pg+1) {
		return fmt.Errorf("%w: list links around page %d disagree", ErrCorrupt, pg)
	}
	if prev == 0 {
		if o.h.a.U64(head) != pg+1 {
			return fmt.Errorf("%w: page %d has no predecessor but is not its list's head", ErrCorrupt, pg)
		}
		o.tx.Set64(head, next)
	} else {
		o.tx.Set32(o.h.g.ent(prev-1)+entNext, uint32(next))
	}
	if next != 0 {
		o.tx.Set32(o.h.g.ent(next-1)+entPrev, uint32(prev))
	}
	o.setLinks(pg, 0, 0)
	return nil
}
