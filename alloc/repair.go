package alloc

import (
	"fmt"

	"conquest/pram"
)

// ClearReserved repairs what a *ReservedWordError reports: it zeroes the
// unused word at off of the header page (and refuses any other offset).
func (h *Heap) ClearReserved(tx *pram.Tx, off int) error {
	if !reservedWord(off) {
		return fmt.Errorf("%w: offset %d of the heap header is not a reserved word", ErrCorrupt, off)
	}
	tx.Set64(h.g.hdr+pram.Off(off), 0)
	return nil
}

// ClearStrayFields repairs what a *StrayFieldsError reports: it zeroes the
// fields of page pg's map entry that its kind leaves unused (for a free
// block the object count, page count and bitmap; for a whole-page
// allocation also the order and the list links; for a slab the page count,
// and bitmap bits past its last slot), keeping what the block is. It refuses (ErrCorrupt) an entry whose kind, order or size is not
// sane, since then the stray fields may be the true ones.
//
// With inside, pg is a page inside the block at head, whose entry must be
// all zero: it is zeroed if the block's entry is sane and covers pg.
func (h *Heap) ClearStrayFields(tx *pram.Tx, pg uint64, inside bool, head uint64) error {
	top := h.a.U64(h.g.hdr + hdrTop)
	if top > h.g.npages || pg >= top {
		return fmt.Errorf("%w: page %d is not below top %d", ErrCorrupt, pg, top)
	}
	if inside {
		n, err := h.blockPages(head, top)
		if err != nil || head >= pg || pg >= head+n {
			return fmt.Errorf("%w: page %d is not inside a sane block at page %d (%v)", ErrCorrupt, pg, head, err)
		}
		tx.Zero(h.g.ent(pg), EntrySize)
		return nil
	}
	e := h.readEnt(pg)
	if e.kind == kindSlab {
		return h.clearSlabStray(tx, pg, e)
	}
	if _, err := h.blockPages(pg, top); err != nil {
		return err
	}
	o := h.g.ent(pg)
	if e.kind == kindFree {
		tx.Set16(o+entUsed, 0)
		tx.Set32(o+entNPages, 0)
	} else {
		tx.Set8(o+entOrder, 0)
		tx.Set16(o+entUsed, 0)
		tx.Set64(o+entNext, 0) // next and prev
	}
	tx.Set64(o+entBitmap, 0)
	tx.Set64(o+entBitmap+8, 0)
	return nil
}

// clearSlabStray clears the page count of slab page pg's entry, the
// entry's bitmap words when the bitmap lives in the page (class 0), and
// bitmap bits past the last slot. The objects in use stay as they are.
func (h *Heap) clearSlabStray(tx *pram.Tx, pg uint64, e entry) error {
	cl := int(e.order)
	if cl >= NumClasses {
		return fmt.Errorf("%w: page %d: slab of unknown class %d", ErrCorrupt, pg, cl)
	}
	o := h.g.ent(pg)
	tx.Set32(o+entNPages, 0)
	if cl == 0 {
		tx.Set64(o+entBitmap, 0)
		tx.Set64(o+entBitmap+8, 0)
	}
	for i := range bitmapWords(cl) {
		w := h.bitmapWord(pg, cl, i)
		if v := h.a.U64(w); v&^slotMask(cl, i) != 0 {
			tx.Set64(w, v&slotMask(cl, i))
		}
	}
	return nil
}

// blockPages is the size in pages of the free block or whole-page
// allocation whose entry is at page pg, if that entry's kind and order or
// size are sane.
func (h *Heap) blockPages(pg, top uint64) (uint64, error) {
	e := h.readEnt(pg)
	switch e.kind {
	case kindFree:
		j := uint(e.order)
		if j > MaxOrder || pg&(1<<j-1) != 0 || pg+1<<j > top {
			return 0, fmt.Errorf("%w: page %d: free block of order %d does not fit", ErrCorrupt, pg, j)
		}
		return 1 << j, nil
	case kindLarge:
		np := uint64(e.npages)
		if np == 0 || np > maxBlockPages || pg+np > top || pg&(1<<orderFor(np)-1) != 0 {
			return 0, fmt.Errorf("%w: page %d: allocation of %d pages does not fit", ErrCorrupt, pg, np)
		}
		return np, nil
	}
	return 0, fmt.Errorf("%w: page %d: entry of kind %d has no stray fields to clear", ErrCorrupt, pg, e.kind)
}

// EntryOffset is the arena offset of the page-map entry of the page that
// holds off, for tests that damage the map.
func (h *Heap) EntryOffset(off pram.Off) pram.Off {
	return h.g.ent(uint64(off-h.g.dataOff) >> pageShift)
}

// RepairSize repairs a *BadSizeError: the page count of the whole-page
// allocation at pg, as inferSize takes it back; anything it cannot prove
// is ErrCorrupt, with nothing changed. It returns the count it set.
func (h *Heap) RepairSize(tx *pram.Tx, pg uint64) (uint64, error) {
	top := h.a.U64(h.g.hdr + hdrTop)
	if top > h.g.npages || pg >= top {
		return 0, fmt.Errorf("%w: page %d is not below top %d", ErrCorrupt, pg, top)
	}
	if e := h.readEnt(pg); e.kind != kindLarge {
		return 0, fmt.Errorf("%w: page %d: not a whole-page allocation", ErrCorrupt, pg)
	}
	np, err := h.inferSize(pg, top)
	if err != nil {
		return 0, err
	}
	tx.Set32(h.g.ent(pg)+entNPages, uint32(np))
	return np, nil
}

// inferSize is the page count of the whole-page allocation at pg (below
// top) whose recorded count is damaged. The pages from pg up to the next
// non-zero entry (or top), the gap, are the allocation: Alloc returns the
// rest of its aligned block to the free lists (allocPages), whose first
// entry then heads a block for good, since its buddy lies inside the
// allocation. Two witnesses prove the count:
//
//   - the header's counters of pages in whole-page allocations and of bytes
//     in use, less what the other entries account for, both equal the gap
//     (a count damaged anywhere: a corruption review saw 3914231238);
//   - or the damaged count's low bits fit the gap (a damaged high byte).
//
// Without either it is ErrCorrupt.
func (h *Heap) inferSize(pg, top uint64) (uint64, error) {
	e := h.readEnt(pg)
	end := pg + 1
	for end < top && end-pg < maxBlockPages && h.entZero(end) {
		end++
	}
	gap := end - pg
	if pg&(1<<orderFor(gap)-1) == 0 && h.countersWitness(pg, top, gap) {
		return gap, nil
	}
	np := uint64(e.npages) & (2<<orderFor(gap) - 1)
	if np == 0 || np > gap || gap > 1<<orderFor(np) || pg&(1<<orderFor(np)-1) != 0 {
		return 0, fmt.Errorf("%w: page %d: a count of %d pages does not fit the %d pages up to the next block, and the header's counters do not tell it", ErrCorrupt, pg, np, gap)
	}
	return np, nil
}

// countersWitness reports whether the header's counters of pages in
// whole-page allocations and of bytes in use, less what every entry but
// pg's accounts for, are both np pages. Every other entry below top must be
// sane for that (a second damaged count would make the difference the sum
// of two).
func (h *Heap) countersWitness(pg, top, np uint64) bool {
	s := h.counters()
	var large, used uint64
	for q := uint64(0); q < top; q++ {
		if q == pg {
			continue
		}
		e := h.readEnt(q)
		switch e.kind {
		case kindNone, kindFree:
		case kindLarge:
			n := uint64(e.npages)
			if n == 0 || n > maxBlockPages || q+n > top {
				return false
			}
			large += n
			used += n << pageShift
		case kindSlab:
			if int(e.order) >= NumClasses || uint64(e.used) > slotsOf(int(e.order)) {
				return false
			}
			used += uint64(e.used) * uint64(classSizes[e.order])
		default:
			return false
		}
	}
	return s.large == large+np && s.used == used+np<<pageShift
}
