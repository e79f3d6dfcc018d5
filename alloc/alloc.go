package alloc

import (
	"fmt"

	"conquest/pram"
)

// Alloc allocates n bytes (1 <= n <= MaxAlloc) through tx and returns the
// offset of the allocation; its capacity is ClassSize(n) and its contents
// are unspecified. An allocation whose capacity is a power of two up to
// PageSize is aligned to its capacity; all are 16-byte aligned.
//
// Errors: ErrTooLarge and ErrNoSpace (nothing changed), ErrCorrupt (the
// caller aborts tx). Like every Tx user it panics with pram.ErrTxFull if
// the journal is full. The caller may write the returned memory without
// logging until tx ends (see the allocator rule in DESIGN.md).
//
// Preconditions: the caller holds the writer's lock.
func (h *Heap) Alloc(tx *pram.Tx, n uint64) (pram.Off, error) {
	if n == 0 || n > MaxAlloc {
		return 0, fmt.Errorf("%w: %d bytes (1..%d)", ErrTooLarge, n, MaxAlloc)
	}
	o, err := h.begin(tx)
	if err != nil {
		return 0, err
	}
	var off pram.Off
	var size uint64
	if n <= MaxSmall {
		off, size, err = o.allocSmall(classOf(n))
	} else {
		np := pagesFor(n)
		var pg uint64
		pg, err = o.allocPages(np, entry{kind: kindLarge, npages: uint32(np)})
		off, size = h.g.page(pg), np<<pageShift
		o.dLarge += int64(np)
	}
	if err != nil {
		return 0, err
	}
	o.dObjects++
	o.dUsed += int64(size)
	o.flush()
	h.reuse.protect(tx, off, size)
	return off, nil
}

// AllocZero is Alloc with the whole capacity zeroed. The zeroing is not
// logged: the memory is free again if tx rolls back.
func (h *Heap) AllocZero(tx *pram.Tx, n uint64) (pram.Off, error) {
	off, err := h.Alloc(tx, n)
	if err != nil {
		return 0, err
	}
	clear(h.a.Bytes(off, ClassSize(n)))
	return off, nil
}

// Free frees the allocation that starts at off through tx; its size comes
// from the allocator's own state. Errors wrap ErrOutOfRange, ErrNotAllocated
// or ErrDoubleFree (nothing changed), or ErrCorrupt (the caller aborts tx).
//
// Preconditions: the caller holds the writer's lock.
func (h *Heap) Free(tx *pram.Tx, off pram.Off) error {
	l, err := h.locate(off)
	if err != nil {
		return err
	}
	if l.free {
		return fmt.Errorf("%w: %#x is already free", ErrDoubleFree, off)
	}
	o, err := h.begin(tx)
	if err != nil {
		return err
	}
	if l.large {
		o.dLarge -= int64(l.size >> pageShift)
		err = o.freeRange(l.pg, l.size>>pageShift)
	} else {
		err = o.freeSmall(l)
	}
	if err != nil {
		return err
	}
	o.dObjects--
	o.dUsed -= int64(l.size)
	o.flush()
	h.reuse.note(tx, off, l.size)
	return nil
}

// loc describes what an offset points at.
type loc struct {
	pg    uint64
	large bool   // a page-sized allocation (else a slab slot)
	class int    // size class of a slab slot
	slot  uint64 // slot number in its slab
	size  uint64 // capacity
	free  bool   // off is the start of free memory (a free slot or a page of a free block)
}

// locate finds the allocation that starts at off. It returns an error if
// off is not the start of an allocation or of free memory, and l.free if it
// is the start of free memory. It never panics on a damaged heap.
func (h *Heap) locate(off pram.Off) (loc, error) {
	g := &h.g
	if off < g.dataOff || off >= g.dataEnd() {
		return loc{}, fmt.Errorf("%w: %#x not in [%#x, %#x)", ErrOutOfRange, off, g.dataOff, g.dataEnd())
	}
	top := h.a.U64(g.hdr + hdrTop)
	if top > g.npages {
		return loc{}, fmt.Errorf("%w: top %d beyond %d pages", ErrCorrupt, top, g.npages)
	}
	pg := uint64(off-g.dataOff) >> pageShift
	if pg >= top {
		return loc{}, fmt.Errorf("%w: %#x lies in never-used pages", ErrNotAllocated, off)
	}
	within := uint64(off - g.page(pg))
	e := h.readEnt(pg)
	switch e.kind {
	case kindSlab:
		c := int(e.order)
		if c >= NumClasses {
			return loc{}, fmt.Errorf("%w: slab page %d has class %d", ErrCorrupt, pg, c)
		}
		size := uint64(classSizes[c])
		if within%size != 0 || within/size >= slotsOf(c) {
			return loc{}, fmt.Errorf("%w: %#x is not a slot boundary of a %d-byte slab", ErrNotAllocated, off, size)
		}
		s := within / size
		return loc{pg: pg, class: c, slot: s, size: size, free: !h.slotUsed(pg, c, s)}, nil
	case kindLarge:
		np := uint64(e.npages)
		if np == 0 || np > maxBlockPages || pg+np > top || pg&(1<<orderFor(np)-1) != 0 {
			return loc{}, fmt.Errorf("%w: page %d heads an allocation of %d pages", ErrCorrupt, pg, np)
		}
		if within != 0 {
			return loc{}, fmt.Errorf("%w: %#x is inside the allocation at %#x", ErrNotAllocated, off, g.page(pg))
		}
		return loc{pg: pg, large: true, size: np << pageShift}, nil
	case kindFree:
		if within != 0 {
			return loc{}, fmt.Errorf("%w: %#x is inside a free page", ErrNotAllocated, off)
		}
		return loc{pg: pg, large: true, free: true}, nil
	case kindNone:
		// Inside a block: find its head, the nearest aligned non-zero entry.
	search:
		for j := uint(1); j <= MaxOrder; j++ {
			b := pg &^ (1<<j - 1)
			if b == pg {
				continue
			}
			eb := h.readEnt(b)
			switch {
			case eb.kind == kindNone:
				continue
			case eb.kind == kindFree && b+1<<min(eb.order, MaxOrder) > pg && within == 0:
				return loc{pg: pg, large: true, free: true}, nil
			case eb.kind == kindLarge && b+uint64(eb.npages) > pg:
				return loc{}, fmt.Errorf("%w: %#x is inside the allocation at %#x", ErrNotAllocated, off, g.page(b))
			}
			break search // the nearest head does not cover pg: damaged, or pg is orphaned
		}
		return loc{}, fmt.Errorf("%w: %#x is not the start of an allocation", ErrNotAllocated, off)
	}
	return loc{}, fmt.Errorf("%w: page %d has kind %d", ErrCorrupt, pg, e.kind)
}
