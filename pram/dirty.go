package pram

import (
	"math/bits"
	"sync/atomic"
)

// dirtySet is the set of arena pages stored to since the last checkpoint
// (shadow.go): one bit per page, set with atomic ORs so that the one
// transaction and the few unlogged stores outside it (counters) can mark
// pages concurrently, and a count of the bits set, which decides when a
// checkpoint is due.
//
// Marking is conservative: Arena.Bytes marks the pages it returns, because
// its callers may write through them; only Arena.View, the read-only
// accessor, and the word readers do not mark. A page marked but not changed
// costs one page of checkpoint I/O; a page changed but not marked would be
// missing from the image after a power loss, which the verification mode
// (verify.go) exists to catch.
type dirtySet struct {
	words []atomic.Uint64
	n     atomic.Int64 // bits set
}

func newDirtySet(pages uint64) *dirtySet {
	return &dirtySet{words: make([]atomic.Uint64, (pages+63)/64)}
}

// mark sets the bits of pages [p0, p1] (inclusive) and reports how many
// were newly set.
func (d *dirtySet) mark(p0, p1 uint64) int64 {
	var added int64
	for p := p0; p <= p1; {
		w := p / 64
		lo := p % 64
		hi := min(p1-w*64, 63) // last bit of this word
		mask := ^uint64(0) >> (63 - (hi - lo)) << lo
		word := &d.words[w]
		if word.Load()&mask != mask {
			old := word.Or(mask)
			added += int64(bits.OnesCount64(mask &^ old))
		}
		p = (w + 1) * 64
	}
	if added != 0 {
		d.n.Add(added)
	}
	return added
}

// count is the number of pages marked.
func (d *dirtySet) count() int64 { return d.n.Load() }

// take returns the marked pages in increasing order and clears the set.
// Preconditions: no mark runs concurrently that must be seen (the caller
// has swapped the set out; a straggler's bit left behind only makes a later
// checkpoint write one page more).
func (d *dirtySet) take() []uint64 {
	var pages []uint64
	for w := range d.words {
		v := d.words[w].Swap(0)
		for v != 0 {
			b := uint64(bits.TrailingZeros64(v))
			pages = append(pages, uint64(w)*64+b)
			v &= v - 1
		}
	}
	d.n.Store(0)
	return pages
}
