package alloc

import (
	"encoding/binary"
	"fmt"
	"math/bits"

	"conquest/pram"
)

// Rebuilding the heap's derived state (for `conquest fsck --repair`).
//
// The page map says what every block is: free (and its order), a slab (its
// class and slot bitmap) or a whole-page allocation (its size). Everything
// else in the heap follows from it: the free list of each order, the
// partial-slab list of each class, every entry's list links, a slab's count
// of objects in use, and the header's counters (top, pages by kind,
// objects, bytes in use). Damage there makes Open refuse the heap (a list
// head past top, counters that do not add up) or the walk report lists that
// disagree with the map; RebuildLists computes it all again from the map.

// OpenForRepair is Open for a heap whose derived state may be damaged: it
// validates the static part of the header (magic, version, checksum, shape
// and layout) but not the counters and list heads, which RebuildLists
// recomputes. Only for repair of an image no one else has open.
func OpenForRepair(a *pram.Arena) (*Heap, error) {
	h, err := locate(a)
	if err != nil {
		return nil, err
	}
	if err := h.checkStatic(); err != nil {
		return nil, err
	}
	// The header and the page map are rewritten; data pages are not.
	if err := h.reserve(0); err != nil {
		return nil, err
	}
	return h, nil
}

// RebuildReport says what RebuildLists changed.
type RebuildReport struct {
	Words int // header and entry words rewritten because they differed
}

// RebuildLists recomputes the heap's derived state from its page map (see
// above) and writes what differs. On the way it zeroes junk in the entries
// of pages inside a block (an entry that claims no head's kind), gives a
// head whose kind byte is damaged the kind its other fields prove
// (RepairKind), takes back an allocation's page count damaged in its high
// bits (RepairSize) and a free block's impossible order (RepairOrder). It refuses, with ErrCorrupt and nothing written, a map it
// cannot walk: an entry of unknown kind that proves none, a block covering
// an entry that claims to head another, a block that is misaligned or runs
// past the heap, or a slab of unknown class. A page in no block below pages
// in use (a lost page) becomes a one-page allocation (scanMap). Top is the
// end of the last block (pages past it have all-zero entries).
//
// The writes bypass the journal: a fragmented heap can need more of them
// than a transaction holds. If they are interrupted, the heap is left half
// rebuilt, and running RebuildLists again (fsck --repair) completes it; the
// page map itself, and so every allocation, is never changed, except a
// slab's count of objects in use, which is set to what its bitmap holds,
// and the kind bytes, page counts, orders and junk entries above.
func (h *Heap) RebuildLists() (RebuildReport, error) {
	var rep RebuildReport
	// Top is where the walk of the map meets a page in no block past the
	// last block below the header's top (if sane): pages in no block before
	// that are lost pages (scanMap). If the walk fails past the header's
	// top, on entries that were never carved but damaged, that top is used.
	headerTop := h.a.U64(h.g.hdr + hdrTop)
	valid := headerTop <= h.g.npages
	lostBelow := uint64(0)
	if valid {
		lostBelow = headerTop
	}
	st, err := h.scanMap(h.g.npages, lostBelow)
	if err != nil && valid {
		if st2, err2 := h.scanMap(headerTop, lostBelow); err2 == nil && st2.c.top == headerTop {
			st, err = st2, nil
		}
	}
	if err != nil {
		return rep, err
	}
	c := st.c
	put := func(off pram.Off, v uint64) {
		if h.a.U64(off) != v {
			h.a.PutU64(off, v)
			rep.Words++
		}
	}
	for _, f := range st.kinds {
		o := h.g.ent(f.pg)
		put(o, h.a.U64(o)&^0xff|uint64(f.kind)) // entKind is the low byte
	}
	for _, f := range st.sizes {
		o := h.g.ent(f.pg)
		put(o, h.a.U64(o)&0xffffffff|f.npages<<32) // entNPages is the high half
	}
	for _, f := range st.orders {
		o := h.g.ent(f.pg)
		put(o, h.a.U64(o)&^0xff00|f.npages<<8) // entOrder is the second byte
	}
	for _, q := range st.junk {
		for w := pram.Off(0); w < EntrySize; w += 8 {
			put(h.g.ent(q)+w, 0)
		}
	}
	for _, q := range st.lost {
		put(h.g.ent(q), uint64(kindLarge)|1<<32) // entNPages is the high half
		for w := pram.Off(8); w < EntrySize; w += 8 {
			put(h.g.ent(q)+w, 0)
		}
	}
	for _, f := range st.fixes {
		o := h.g.ent(f.pg)
		w := h.a.U64(o)
		var b [8]byte
		binary.LittleEndian.PutUint64(b[:], w)
		binary.LittleEndian.PutUint16(b[entUsed:], f.used)
		put(o, binary.LittleEndian.Uint64(b[:]))
	}
	// Links: each list in page order; every other block head has none.
	link := func(head pram.Off, list []uint64) {
		first := uint64(0)
		if len(list) > 0 {
			first = list[0] + 1
		}
		put(head, first)
		for i, p := range list {
			next, prev := uint64(0), uint64(0)
			if i+1 < len(list) {
				next = list[i+1] + 1
			}
			if i > 0 {
				prev = list[i-1] + 1
			}
			put(h.g.ent(p)+entNext, next|prev<<32)
		}
	}
	for j := range st.free {
		link(h.freeHead(j), st.free[j])
	}
	for cl := range st.partial {
		link(h.partialHead(cl), st.partial[cl])
	}
	for p := uint64(0); p < c.top; {
		e := h.readEnt(p)
		if !st.onList[p] && (e.next != 0 || e.prev != 0) {
			put(h.g.ent(p)+entNext, 0)
		}
		switch e.kind {
		case kindFree:
			p += 1 << e.order
		case kindLarge:
			p += uint64(e.npages)
		default:
			p++
		}
	}
	// Entries past top are never read, and a block carved there later
	// expects its pages' entries to be zero.
	for p := c.top; p < h.g.npages; p++ {
		for w := pram.Off(0); w < EntrySize; w += 8 {
			put(h.g.ent(p)+w, 0)
		}
	}
	o := h.g.hdr
	put(o+hdrTop, c.top)
	put(o+hdrFreePages, c.free)
	put(o+hdrSlabPages, c.slab)
	put(o+hdrLargePgs, c.large)
	put(o+hdrObjects, c.objects)
	put(o+hdrUsedBytes, c.used)
	return rep, nil
}

// mapScan is what scanMap found.
type mapScan struct {
	free    [MaxOrder + 1][]uint64 // heads of free blocks, by order
	partial [NumClasses][]uint64   // slabs with free slots, by class
	onList  map[uint64]bool
	fixes   []slabFix // slabs whose count of objects in use is wrong
	kinds   []kindFix // heads of unknown kind whose fields prove one
	sizes   []sizeFix // allocations whose page count is damaged
	orders  []sizeFix // free blocks whose order is damaged (npages: the order)
	junk    []uint64  // pages inside a block whose entries hold junk
	lost    []uint64  // pages in no block below top: made one-page allocations
	c       counters  // recomputed
}

type kindFix struct {
	pg   uint64
	kind uint8
}

type sizeFix struct{ pg, npages uint64 }

type slabFix struct {
	pg   uint64
	used uint16
}

// scanMap walks the page map block by block from page 0 until a page in
// no block (top) or limit; a block running past limit, an entry of unknown
// kind, a slab of unknown class or a block covering another's head is
// ErrCorrupt.
//
// A page below lostBelow (the header's top) that is in no block, its entry
// zero or with a kind byte of zero, while a block still follows below
// lostBelow, is lost: the head entry of the block it was in is damaged. An
// entry whose other fields prove a kind (inferKind) gets that kind back;
// otherwise each such page becomes a one-page allocation. That keeps the
// data of a one-page block something still points at, and a page nothing
// points at is then a leak, which the repair frees once the walk is clean.
// Pages in no block past the last block are above top, as after a damaged
// top: up to one largest block of them (the last block's head lost) are
// lost pages too; more means the header's top is what is damaged.
func (h *Heap) scanMap(limit, lostBelow uint64) (mapScan, error) {
	st := mapScan{onList: make(map[uint64]bool)}
	c := &st.c
	// interior: a block's other pages must have all-zero entries, or the
	// block's size is wrong and covers other blocks.
	// An interior entry that claims no kind a head has is junk (damage
	// inside the block): it is zeroed, as the walk's repair does
	// (ClearStrayFields). One that claims a head's kind may be a block the
	// damaged size covers: refused.
	interior := func(pg, n uint64) error {
		for q := pg + 1; q < pg+n; q++ {
			if h.entZero(q) {
				continue
			}
			if k := h.readEnt(q).kind; k == kindFree || k == kindLarge || k == kindSlab {
				return fmt.Errorf("%w: the block at page %d (%d pages) covers page %d, whose entry is in use", ErrCorrupt, pg, n, q)
			}
			st.junk = append(st.junk, q)
		}
		return nil
	}
	lostBelow = min(lostBelow, limit)
	pg := uint64(0)
	for pg < limit {
		e := h.readEnt(pg)
		if e.kind == kindNone && pg < lostBelow && !h.entZero(pg) {
			if k, _, err := h.inferKind(pg, limit); err == nil {
				st.kinds = append(st.kinds, kindFix{pg, k})
				e.kind = k
			}
		}
		if e.kind > kindSlab {
			// A head whose kind byte is damaged: its other fields may
			// prove the kind (as Heap.RepairKind).
			k, _, err := h.inferKind(pg, limit)
			if err != nil {
				return st, err
			}
			st.kinds = append(st.kinds, kindFix{pg, k})
			e.kind = k
		}
		switch e.kind {
		case kindFree:
			j := uint(e.order)
			if j > MaxOrder || pg&(1<<j-1) != 0 || pg+1<<j > limit {
				// An order damaged: the block it sits in tells it (as
				// RepairOrder).
				var err error
				if j, err = h.inferOrder(pg, limit); err != nil {
					return st, fmt.Errorf("%w: page %d: free block of order %d is misaligned or past page %d", ErrCorrupt, pg, e.order, limit)
				}
				st.orders = append(st.orders, sizeFix{pg, uint64(j)})
			}
			if err := interior(pg, 1<<j); err != nil {
				return st, err
			}
			st.free[j] = append(st.free[j], pg)
			st.onList[pg] = true
			c.free += 1 << j
			pg += 1 << j
		case kindLarge:
			np := uint64(e.npages)
			if np == 0 || np > maxBlockPages || pg+np > limit || pg&(1<<orderFor(np)-1) != 0 {
				// A count damaged in its high bits (as RepairSize).
				var err error
				if np, err = h.inferSize(pg, limit); err != nil {
					return st, fmt.Errorf("%w: page %d: allocation of %d pages is misaligned or past page %d", ErrCorrupt, pg, e.npages, limit)
				}
				st.sizes = append(st.sizes, sizeFix{pg, np})
			}
			if err := interior(pg, np); err != nil {
				return st, err
			}
			c.large += np
			c.objects++
			c.used += np << pageShift
			pg += np
		case kindSlab:
			cl := int(e.order)
			if cl >= NumClasses {
				return st, fmt.Errorf("%w: page %d: slab of unknown class %d", ErrCorrupt, pg, cl)
			}
			var n uint64
			for i := range bitmapWords(cl) {
				n += uint64(bits.OnesCount64(h.a.U64(h.bitmapWord(pg, cl, i)) & slotMask(cl, i)))
			}
			if n != uint64(e.used) {
				st.fixes = append(st.fixes, slabFix{pg, uint16(n)})
			}
			if n < slotsOf(cl) {
				st.partial[cl] = append(st.partial[cl], pg)
				st.onList[pg] = true
			}
			c.slab++
			c.objects += n
			c.used += n * uint64(classSizes[cl])
			pg++
		case kindNone:
			if pg >= lostBelow {
				c.top = pg
				return st, nil
			}
			q := pg + 1
			for q < lostBelow && h.readEnt(q).kind == kindNone {
				q++
			}
			if q == lostBelow && q-pg > maxBlockPages {
				c.top = pg // the header's top is damaged
				return st, nil
			}
			n := q - pg
			for ; pg < q; pg++ {
				st.lost = append(st.lost, pg)
			}
			c.large += n
			c.objects += n
			c.used += n << pageShift
		default:
			return st, fmt.Errorf("%w: page %d: unknown kind %d", ErrCorrupt, pg, e.kind)
		}
	}
	c.top = pg
	return st, nil
}
