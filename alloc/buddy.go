package alloc

import (
	"fmt"
	"math/bits"
)

// The page allocator is a binary buddy system over data pages, with free
// lists per order linked through the page map (never through the free pages
// themselves, so handing a block out needs no Touch of its contents).
// Pages at or past top have never been used: a request no free list can
// serve is carved from there, which keeps Format O(1) and a sparse image
// file sparse. Blocks are aligned to their size in page numbers.
//
// Invariants (checked by the Checker): the head page of every block has a
// non-zero entry and every other carved page a zero one; two free buddies
// of the same order are never both on free lists (they are merged).

// maxCandidates bounds the free-list members takeBlock inspects per order
// when it avoids memory the current Tx freed.
const maxCandidates = 8

// takeBlock removes a free block of 2^k pages and returns its first page.
// The block's head entry still holds stale content: the caller writes it.
// On ErrNoSpace nothing has changed.
//
// Preference: a free block that does not overlap memory this Tx freed, then
// never-used pages, then any free block (whose reused part Alloc then logs,
// see reuse.go). Without frees in this Tx that is simply: the lowest order
// free list, then never-used pages.
func (o *op) takeBlock(k uint) (uint64, error) {
	if err := o.checkReserve(1 << k); err != nil {
		return 0, err
	}
	avoid := o.h.reuse.active(o.tx)
	for pass := 0; pass < 2; pass++ {
		for j := k; j <= MaxOrder; j++ {
			pg, e, ok, err := o.candidate(j, 1<<k, avoid && pass == 0)
			if err != nil {
				return 0, err
			}
			if ok {
				return pg, o.takeFree(pg, e, j, k)
			}
		}
		if pg, ok, err := o.carve(k); ok || err != nil {
			return pg, err
		}
		if !avoid {
			break
		}
	}
	if o.noBacking != nil {
		return 0, o.noBacking
	}
	return 0, fmt.Errorf("%w: no free block of %d pages", ErrNoSpace, 1<<k)
}

// candidate picks a member of free list j: the head, or with avoid the
// first of the first maxCandidates members whose first n pages this Tx did
// not free.
func (o *op) candidate(j uint, n uint64, avoid bool) (uint64, entry, bool, error) {
	h := o.h
	v, err := o.link(h.a.U64(h.freeHead(int(j))), "free list head")
	for i := 0; err == nil && v != 0 && i < maxCandidates; i++ {
		pg := v - 1
		e := h.readEnt(pg)
		if e.kind != kindFree || uint(e.order) != j || pg&(1<<j-1) != 0 || pg+1<<j > o.top {
			return 0, e, false, fmt.Errorf("%w: page %d on free list %d has kind %d order %d",
				ErrCorrupt, pg, j, e.kind, e.order)
		}
		if !avoid || !h.reuse.overlaps(h.g.page(pg), n<<pageShift) {
			return pg, e, true, nil
		}
		v, err = o.link(uint64(e.next), "free list next")
	}
	return 0, entry{}, false, err
}

// takeFree unlinks the free block pg (entry e) of order j and splits it
// down to order k, returning the upper halves to the free lists.
func (o *op) takeFree(pg uint64, e entry, j, k uint) error {
	if err := o.listRemove(o.h.freeHead(int(j)), pg, e); err != nil {
		return err
	}
	o.dFree -= 1 << j
	for j > k {
		j--
		if err := o.pushFree(pg+1<<j, j); err != nil {
			return err
		}
	}
	return nil
}

// carve takes a block of 2^k pages from the never-used pages: it first
// frees the pieces that align top to the block size. It reports false,
// changing nothing, if the block does not fit in the heap or the image
// file's file system has no room for it (noted in o.noBacking).
func (o *op) carve(k uint) (uint64, bool, error) {
	blk := uint64(1) << k
	pg := (o.top + blk - 1) &^ (blk - 1)
	if pg+blk > o.h.g.npages {
		return 0, false, nil
	}
	if err := o.h.reserve(o.backTo(pg + blk)); err != nil {
		o.noBacking = err // as if the block did not fit
		return 0, false, nil
	}
	for o.top < pg {
		j := uint(bits.TrailingZeros64(o.top))
		piece := o.top
		o.top += 1 << j
		o.topDirty = true
		if err := o.freeBlock(piece, j); err != nil {
			return 0, false, err
		}
	}
	o.top = pg + blk
	o.topDirty = true
	return pg, true, nil
}

// pushFree writes pg as the head of a free block of order j and puts it on
// that order's free list, without merging.
func (o *op) pushFree(pg uint64, j uint) error {
	o.setEnt(pg, entry{kind: kindFree, order: uint8(j)})
	if err := o.listPush(o.h.freeHead(int(j)), pg); err != nil {
		return err
	}
	o.dFree += 1 << j
	return nil
}

// freeBlock frees the block of 2^j pages at pg, merging it with its free
// buddy as long as there is one.
func (o *op) freeBlock(pg uint64, j uint) error {
	h := o.h
	for j < MaxOrder {
		q := pg ^ 1<<j
		if q+1<<j > o.top {
			break
		}
		e := h.readEnt(q)
		if e.kind != kindFree || uint(e.order) != j {
			break
		}
		if err := o.listRemove(h.freeHead(int(j)), q, e); err != nil {
			return err
		}
		o.dFree -= 1 << j
		hi := max(pg, q)
		if !h.entZero(hi) {
			o.tx.Zero(h.g.ent(hi), EntrySize) // no longer a head
		}
		pg = min(pg, q)
		j++
	}
	return o.pushFree(pg, j)
}

// freeRange frees [pg, pg+n) as the largest aligned buddy blocks that tile
// it, each merged with its buddies.
func (o *op) freeRange(pg, n uint64) error {
	for end := pg + n; pg < end; {
		j := uint(min(bits.TrailingZeros64(pg|1<<MaxOrder), bits.Len64(end-pg)-1))
		if err := o.freeBlock(pg, j); err != nil {
			return err
		}
		pg += 1 << j
	}
	return nil
}

// allocPages takes np (1..256) contiguous pages, writes head as the entry
// of the first page and returns the tail beyond np to the free lists.
func (o *op) allocPages(np uint64, head entry) (uint64, error) {
	k := orderFor(np)
	pg, err := o.takeBlock(k)
	if err != nil {
		return 0, err
	}
	o.setEnt(pg, head)
	if np < 1<<k {
		if err := o.freeRange(pg+np, 1<<k-np); err != nil {
			return 0, err
		}
	}
	return pg, nil
}
