package alloc

import "conquest/pram"

// reuseTracker upholds the allocator rule for memory freed and allocated
// again within one Tx. A caller writes memory it allocated in the current
// Tx without logging, because after a rollback that memory is free again.
// That reasoning fails if the memory was freed earlier in the same Tx: after
// the rollback it is live again, and its old contents must come back. So the
// heap remembers (in Go memory, per Tx.Seq) what the current Tx freed, and
// Alloc logs (Touch) the part of a new allocation that overlaps it before
// handing it out. Only such reuse costs journal space, and the page
// allocator avoids it: it hands out pages the Tx freed only when no other
// free block fits (takeBlock). Slab slots are reused directly (at most
// MaxSmall bytes logged per object). So a Tx that frees 1 MiB and allocates
// 1 MiB logs nothing extra unless the heap is full; then it logs the reused
// part (and panics with pram.ErrTxFull if the journal is too small, like
// any oversized Tx).
type reuseTracker struct {
	seq   uint64                // Tx.Seq the sets below belong to
	pages map[uint64]*[4]uint64 // by 1 MiB chunk (arena page>>8): bitmap of whole pages freed
	spans map[uint64][]span     // by arena page: smaller ranges freed (slab slots, tail bitmaps)
	n     int                   // entries noted
}

type span struct {
	off pram.Off
	n   uint64
}

const chunkShift = 8 // pages per bitmap chunk: 256

// note records that tx freed (or released bookkeeping in) [off, off+n):
// either whole pages or a range inside one page.
func (r *reuseTracker) note(tx *pram.Tx, off pram.Off, n uint64) {
	if r.seq != tx.Seq() || r.pages == nil {
		r.seq = tx.Seq()
		if r.pages == nil {
			r.pages = make(map[uint64]*[4]uint64)
			r.spans = make(map[uint64][]span)
		}
		clear(r.pages)
		clear(r.spans)
		r.n = 0
	}
	r.n++
	pg := uint64(off) >> pageShift
	if off%pageSize != 0 || n%pageSize != 0 {
		r.spans[pg] = append(r.spans[pg], span{off, n})
		return
	}
	for end := pg + n/pageSize; pg < end; pg++ {
		c := r.pages[pg>>chunkShift]
		if c == nil {
			c = new([4]uint64)
			r.pages[pg>>chunkShift] = c
		}
		c[pg>>6&3] |= 1 << (pg & 63)
	}
}

// active reports whether tx has freed anything so far.
func (r *reuseTracker) active(tx *pram.Tx) bool { return r.seq == tx.Seq() && r.n > 0 }

func (r *reuseTracker) pageFreed(pg uint64) bool {
	c := r.pages[pg>>chunkShift]
	return c != nil && c[pg>>6&3]&(1<<(pg&63)) != 0
}

// each calls f for every part of [off, off+n) the current Tx freed, whole
// freed pages first merged into runs. It stops when f returns true.
func (r *reuseTracker) each(off pram.Off, n uint64, f func(lo, hi pram.Off) bool) {
	end := off.Add(n)
	for pg := uint64(off) >> pageShift; pram.Off(pg<<pageShift) < end; pg++ {
		if r.pageFreed(pg) {
			run := pg
			for pram.Off((pg+1)<<pageShift) < end && r.pageFreed(pg+1) {
				pg++
			}
			if f(max(off, pram.Off(run<<pageShift)), min(end, pram.Off((pg+1)<<pageShift))) {
				return
			}
			continue
		}
		for _, s := range r.spans[pg] {
			if lo, hi := max(s.off, off), min(s.off.Add(s.n), end); lo < hi && f(lo, hi) {
				return
			}
		}
	}
}

// overlaps reports whether [off, off+n) overlaps memory the current Tx
// freed. Precondition: active.
func (r *reuseTracker) overlaps(off pram.Off, n uint64) bool {
	found := false
	r.each(off, n, func(_, _ pram.Off) bool { found = true; return true })
	return found
}

// protect logs the parts of [off, off+n) that tx freed earlier.
func (r *reuseTracker) protect(tx *pram.Tx, off pram.Off, n uint64) {
	if !r.active(tx) {
		return
	}
	r.each(off, n, func(lo, hi pram.Off) bool { tx.Touch(lo, uint64(hi-lo)); return false })
}
