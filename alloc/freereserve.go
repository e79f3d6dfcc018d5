package alloc

import "fmt"

// The free reserve. Freeing can need memory: returning a large file's disk
// extents to the free map adds records to it, and those live in this heap.
// If ordinary allocations could take the last page, a full arena could not
// free the very file whose deletion would make room: the file would stay on
// the orphan list until some other free succeeded. So ordinary allocations
// leave ReservePages pages free (and backed by the image file), and only
// code running inside UsingReserve may take them. Such code must free at
// least as much as it takes over its whole run (deletion and shrinking
// truncation do: a file's own records go with it), so the reserve refills.
//
// Slab slots in pages already held are not counted: only new pages are
// refused. The reserve is a threshold, not a set of pages, so nothing of it
// is stored in the arena.

// ReservePages is the number of pages kept for frees in a heap of npages
// data pages: 1/128 of the heap, at least 32 pages (128 KiB) and at most 256
// (1 MiB); a heap under 512 pages keeps 1/16.
func ReservePages(npages uint64) uint64 {
	if npages < 512 {
		return npages / 16
	}
	return min(max(npages/128, 32), 256)
}

// UsingReserve runs f with allocations allowed to take the reserved pages.
// Preconditions: the caller holds the writer's lock (as for Alloc).
func (h *Heap) UsingReserve(f func() error) error {
	h.useReserve++
	defer func() { h.useReserve-- }()
	return f()
}

// SetRewriteReserve keeps pages more than the free reserve from ordinary
// allocations, for UsingHalfReserve's alone: the extent records that
// rewriting data already stored cuts (a large file's copy-on-write
// overwrites), which nothing gives back and which a full heap must still
// find room for, as ext4 keeps blocks for its metadata. The owner of the
// heap sizes it (by its disk's blocks) when it opens it; it is not stored.
// Preconditions: the caller holds the writer's lock (as for Alloc).
func (h *Heap) SetRewriteReserve(pages uint64) {
	h.rewritePages = min(pages, h.g.npages/4)
}

// UsingHalfReserve runs f with allocations allowed to take the rewrite
// reserve (SetRewriteReserve) and half of the reserved pages, never the
// other half: for growth that rewriting data
// already stored cannot avoid and that is not given back by a free (a
// large file's copy-on-write overwrite cutting its extents in pieces), so
// that a full heap can still rewrite a while, and can always still free.
// Inside UsingReserve the whole reserve stays allowed.
// Preconditions: the caller holds the writer's lock (as for Alloc).
func (h *Heap) UsingHalfReserve(f func() error) error {
	h.halfReserve++
	defer func() { h.halfReserve-- }()
	return f()
}

// checkReserve refuses an ordinary request for n pages that would leave fewer
// than the reserve free (half of it inside UsingHalfReserve). free is the
// op's view of the free pages below top.
func (o *op) checkReserve(n uint64) error {
	h := o.h
	if h.useReserve > 0 {
		return nil
	}
	free := uint64(int64(h.a.U64(h.g.hdr+hdrFreePages))+o.dFree) + h.g.npages - min(o.top, h.g.npages)
	r := ReservePages(h.g.npages)
	if h.halfReserve > 0 {
		r -= r / 2 // and all of the rewrite reserve
	} else {
		r += h.rewritePages
	}
	if free < n+r {
		return fmt.Errorf("%w: %d pages free, %d kept for frees, %d wanted", ErrNoSpace, free, r, n)
	}
	return nil
}

// backTo is how far the image file must be backed before carving up to
// page end: ordinary allocations also keep the reserve's pages backed, so a
// free does not find the file system under the image full.
func (o *op) backTo(end uint64) uint64 {
	if o.h.useReserve > 0 {
		return end
	}
	return min(end+ReservePages(o.h.g.npages)+o.h.rewritePages, o.h.g.npages)
}
