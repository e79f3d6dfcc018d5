package alloc

import (
	"encoding/binary"
	"fmt"
	"math/bits"
	"slices"

	"conquest/pram"
)

// Repairs of a page-map entry whose kind or order is damaged: each infers
// the field from the entry's other fields and the entries around it, and
// refuses when they do not prove it (see RepairKind). RebuildLists uses the
// same inference (inferKind, inferOrder) before the heap can open.

// RepairKind repairs an *UnknownKindError: it sets the kind of page pg's
// entry to the one its other fields prove, and returns its name, or
// changes nothing (ErrCorrupt) when they prove none. A wrong guess would
// hand a live block to the allocator (or the other way round), so each
// kind needs evidence that damage to one field could not fake:
//
//   - a slab: a size class, a count of objects in use that equals the
//     number of bits set in its slot bitmap (and none past the last slot),
//     no page count;
//   - a free block: a buddy order whose block fits where it sits, nothing
//     in use, no page count or bitmap, and a place on its order's free list
//     (the list head, or a neighbour's link, points at it);
//   - a whole-page allocation: a page count that fills exactly the pages up
//     to the next block (whose entries are all zero), no order, nothing in
//     use, no links or bitmap.
func (h *Heap) RepairKind(tx *pram.Tx, pg uint64) (string, error) {
	top := h.a.U64(h.g.hdr + hdrTop)
	if top > h.g.npages || pg >= top {
		return "", fmt.Errorf("%w: page %d is not below top %d", ErrCorrupt, pg, top)
	}
	kind, name, err := h.inferKind(pg, top)
	if err != nil {
		return "", err
	}
	tx.Set8(h.g.ent(pg)+entKind, kind)
	return name, nil
}

// inferKind is the kind the entry of page pg (below top), whose own kind
// is unknown, proves (see RepairKind), and its description.
func (h *Heap) inferKind(pg, top uint64) (uint8, string, error) {
	e := h.readEnt(pg)
	// A kind byte damaged to zero (kindNone) leaves the other fields to
	// prove the kind as any other unknown one; an all-zero entry proves none.
	if e.kind != kindNone && e.kind <= kindSlab || h.entZero(pg) {
		return 0, "", fmt.Errorf("%w: page %d: kind %d is a known one", ErrCorrupt, pg, e.kind)
	}
	o := h.g.ent(pg)
	bitmap0 := h.a.U64(o+entBitmap)|h.a.U64(o+entBitmap+8) == 0
	// The run of all-zero entries after pg: the rest of its block.
	end := pg + 1
	for end < top && end-pg < maxBlockPages && h.entZero(end) {
		end++
	}
	gap := end - pg
	var kind uint8
	var name string
	switch {
	case e.npages == 0 && e.used > 0 && int(e.order) < NumClasses && gap == 1 && h.slotsSet(pg, int(e.order)) == uint64(e.used):
		kind, name = kindSlab, fmt.Sprintf("a slab of class %d with %d objects in use", e.order, e.used)
	case e.npages == 0 && e.used == 0 && bitmap0 && uint(e.order) <= MaxOrder &&
		pg&(1<<e.order-1) == 0 && gap == 1<<e.order && h.onFreeList(pg, e):
		kind, name = kindFree, fmt.Sprintf("a free block of %d pages", 1<<e.order)
	case e.npages != 0 && uint64(e.npages) <= gap && gap <= 1<<orderFor(uint64(e.npages)) &&
		pg&(1<<orderFor(uint64(e.npages))-1) == 0 && e.order == 0 && e.used == 0 && e.next == 0 && e.prev == 0 && bitmap0:
		kind, name = kindLarge, fmt.Sprintf("an allocation of %d pages", e.npages)
	default:
		return 0, "", fmt.Errorf("%w: page %d: its entry (order %d, %d in use, %d pages, links %d/%d) proves no kind",
			ErrCorrupt, pg, e.order, e.used, e.npages, e.next, e.prev)
	}
	return kind, name, nil
}

// slotsSet counts the bits set in the slot bitmap of pg as a slab of class
// c, or returns MaxUint64 if any is set past the last slot.
func (h *Heap) slotsSet(pg uint64, c int) uint64 {
	var n uint64
	for w := range bitmapWords(c) {
		v := h.a.U64(h.bitmapWord(pg, c, w))
		if v&^slotMask(c, w) != 0 {
			return ^uint64(0)
		}
		n += uint64(bits.OnesCount64(v))
	}
	return n
}

// onFreeList reports whether free block pg of entry e is linked into the
// free list of its order: the list's head, or a neighbour it links to,
// points back at it.
func (h *Heap) onFreeList(pg uint64, e entry) bool {
	me := uint32(pg + 1)
	if h.a.U64(h.g.hdr+hdrFreeHeads+pram.Off(8*int(e.order))) == uint64(me) && e.prev == 0 {
		return true
	}
	link := func(p uint32, back func(entry) uint32) bool {
		if p == 0 || uint64(p-1) >= h.g.npages {
			return false
		}
		n := h.readEnt(uint64(p - 1))
		return n.kind == kindFree && n.order == e.order && back(n) == me
	}
	return link(e.prev, func(n entry) uint32 { return n.next }) || link(e.next, func(n entry) uint32 { return n.prev })
}

// RepairOrder repairs a *BadOrderError: it sets the order of free block pg
// to the one the block it sits in tells (inferOrder), or changes nothing
// (ErrCorrupt).
func (h *Heap) RepairOrder(tx *pram.Tx, pg uint64) (uint, error) {
	top := h.a.U64(h.g.hdr + hdrTop)
	if top > h.g.npages || pg >= top {
		return 0, fmt.Errorf("%w: page %d is not below top %d", ErrCorrupt, pg, top)
	}
	if e := h.readEnt(pg); e.kind != kindFree {
		return 0, fmt.Errorf("%w: page %d: not a free block", ErrCorrupt, pg)
	}
	j, err := h.inferOrder(pg, top)
	if err != nil {
		return 0, err
	}
	tx.Set8(h.g.ent(pg)+entOrder, uint8(j))
	return j, nil
}

// inferOrder is the order of the free block at pg (below top) whose
// recorded order is impossible: the run of zero entries up to the next
// block (or top) must be a power of two the page is aligned to, and the
// entry must hold nothing a free block does not (no count, nothing in
// use, no bitmap).
func (h *Heap) inferOrder(pg, top uint64) (uint, error) {
	e := h.readEnt(pg)
	end := pg + 1
	for end < top && end-pg < maxBlockPages && h.entZero(end) {
		end++
	}
	gap := end - pg
	j := uint(bits.TrailingZeros64(gap))
	o := h.g.ent(pg)
	if gap&(gap-1) != 0 || pg&(gap-1) != 0 || e.npages != 0 || e.used != 0 || h.a.U64(o+entBitmap)|h.a.U64(o+entBitmap+8) != 0 {
		return 0, fmt.Errorf("%w: page %d: a free block cannot fill the %d pages up to the next block", ErrCorrupt, pg, gap)
	}
	return j, nil
}

// unknownKindPage reports whether off lies in a data page below top whose
// entry has a kind no block has, and which page.
func (h *Heap) unknownKindPage(off pram.Off) (uint64, bool) {
	g := &h.g
	if off < g.dataOff || off >= g.dataEnd() {
		return 0, false
	}
	pg := uint64(off-g.dataOff) >> pageShift
	top := h.a.U64(g.hdr + hdrTop)
	if pg >= min(top, g.npages) {
		return 0, false
	}
	return pg, h.readEnt(pg).kind > kindSlab
}

// RepairKindFrom repairs an *UnknownKindError that RepairKind cannot (the
// entry's other fields are damaged too: one random word over it was
// enough to make every object in the page unreachable, the root
// directory's table among them, and the file system unmountable) from the
// objects the file system's walk found live in the page, offs (see
// Checker.MarkedInUnknown). A slab of class c is taken when c is the one
// class for which every offset is a slot boundary and the page's slot
// bitmap (kept apart from the damaged word) holds exactly those slots set;
// failing that, the one class for which it holds them all. The entry then
// becomes that slab, with its count of objects from the bitmap; its list
// links are left for the lists' rebuild to judge. Else nothing changes
// (ErrCorrupt).
func (h *Heap) RepairKindFrom(tx *pram.Tx, pg uint64, offs []pram.Off) (string, error) {
	top := h.a.U64(h.g.hdr + hdrTop)
	if top > h.g.npages || pg >= top {
		return "", fmt.Errorf("%w: page %d is not below top %d", ErrCorrupt, pg, top)
	}
	if e := h.readEnt(pg); e.kind <= kindSlab {
		return "", fmt.Errorf("%w: page %d: kind %d is a known one", ErrCorrupt, pg, e.kind)
	}
	base := h.g.page(pg)
	// fits reports whether every offset is a set slot of class c, and
	// whether the set slots are exactly those.
	fits := func(c int) (all, exact bool) {
		size := uint64(classSizes[c])
		var want [4]uint64
		for _, off := range offs {
			if off < base || uint64(off-base) >= pageSize {
				return false, false
			}
			w := uint64(off - base)
			if w%size != 0 || w/size >= slotsOf(c) {
				return false, false
			}
			want[w/size/64] |= 1 << (w / size % 64)
		}
		exact = true
		for i := range bitmapWords(c) {
			v := h.a.U64(h.bitmapWord(pg, c, i))
			if v&^slotMask(c, i) != 0 || want[i]&^v != 0 {
				return false, false
			}
			exact = exact && v == want[i]
		}
		return true, exact
	}
	var exact, all []int
	for c := range NumClasses {
		a, x := fits(c)
		if x {
			exact = append(exact, c)
		}
		if a {
			all = append(all, c)
		}
	}
	var c int
	why := fmt.Sprintf("as its %d live object(s) and its slot bitmap show", len(offs))
	listed, onList := h.onPartialList(pg)
	switch {
	case len(offs) > 0 && len(exact) == 1:
		c = exact[0]
	case len(offs) > 0 && len(exact) == 0 && len(all) == 1:
		c = all[0]
	case onList && slices.Contains(all, listed) && h.slotsSet(pg, listed) < slotsOf(listed):
		// The objects do not tell (none found: a walk may reach them
		// only through the kind), but the page sits on one class's list
		// of partial slabs and its bitmap fits that class.
		c, why = listed, fmt.Sprintf("as its place on the partial list of class %d and its slot bitmap show", listed)
	default:
		return "", fmt.Errorf("%w: page %d: its %d live object(s) fit %d slab classes' bitmaps exactly and %d in all, and no partial list holds it: no single class", ErrCorrupt, pg, len(offs), len(exact), len(all))
	}
	used := h.slotsSet(pg, c)
	var w [8]byte
	w[entKind] = kindSlab
	w[entOrder] = uint8(c)
	binary.LittleEndian.PutUint16(w[entUsed:], uint16(used))
	tx.SetBytes(h.g.ent(pg), w[:]) // entNPages 0
	return fmt.Sprintf("a slab of class %d (%d bytes) with %d objects in use, %s", c, classSizes[c], used, why), nil
}

// onPartialList reports the one class whose list of partial slabs holds
// page pg by its links (kept apart from the entry's kind): the list's
// head, or a neighbour pg's links name that links back to it.
func (h *Heap) onPartialList(pg uint64) (int, bool) {
	e := h.readEnt(pg)
	me := uint32(pg + 1)
	found, n := 0, 0
	for c := range NumClasses {
		on := h.a.U64(h.partialHead(c)) == uint64(me) && e.prev == 0
		link := func(p uint32, back func(entry) uint32) bool {
			if p == 0 || uint64(p-1) >= h.g.npages {
				return false
			}
			nb := h.readEnt(uint64(p - 1))
			return nb.kind == kindSlab && int(nb.order) == c && back(nb) == me
		}
		on = on || link(e.prev, func(nb entry) uint32 { return nb.next }) || link(e.next, func(nb entry) uint32 { return nb.prev })
		if on {
			found, n = c, n+1
		}
	}
	return found, n == 1
}
