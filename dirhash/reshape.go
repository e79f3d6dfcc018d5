package dirhash

import (
	"errors"
	"math/bits"

	"conquest/alloc"
	"conquest/pram"
)

// Reshaping. Every step here moves whole buckets into freshly allocated
// pages (written unlogged), repoints their table slots (logged) and frees
// the old pages. Allocation comes first, so a step that runs out of space
// changes nothing; a step that completes leaves the same entries under the
// same keys. Hence an Insert that fails with ErrNoSpace may leave the
// directory reshaped (say, split) but never with different contents.
//
// Splits, doublings, merges and halvings each go as many levels as needed
// in one step. Level-by-level steps would allocate memory the same
// transaction just freed, which the allocator must log in full, and a
// cascade of them could overflow the journal.

// makeRoom performs one step that makes room in bucket b for an entry of
// need bytes with key. The caller locates the bucket again and retries.
func (d Dir) makeRoom(tx *pram.Tx, r *rootHdr, b *bucket, key uint64, need int) error {
	span := b.hi - b.lo
	if prim := b.pages[0]; len(b.pages) == 1 && prim.size() < maxPage && span <= maxRepoint {
		return d.rebuild(tx, r, b, pageFor(prim.used()+need)) // grow the page
	}
	sep, ok := d.splitDepth(r, b, key)
	switch {
	case !ok:
		return d.addOverflow(tx, r, b)
	case sep > r.depth:
		return d.double(tx, r, sep)
	}
	return d.split(tx, r, b, key, sep)
}

// splitDepth is the depth at which the keys of b plus key first differ,
// and whether splitting b to that depth is allowed: within MaxDepth, within
// the table size cap, and repointing at most maxRepoint slots.
func (d Dir) splitDepth(r *rootHdr, b *bucket, key uint64) (uint, bool) {
	var diff uint64
	for _, p := range b.pages {
		for i := range p.n() {
			diff |= p.key(i) ^ key
		}
	}
	if diff == 0 {
		return 0, false // only key itself: nothing to separate
	}
	sep := uint(bits.LeadingZeros64(diff<<(64-keyBits))) + 1
	if sep <= b.depth || sep > MaxDepth {
		return 0, false
	}
	g := max(r.depth, sep)
	if g > r.depth && uint64(1)<<g > tableCap(r.count+1) {
		return 0, false
	}
	return sep, uint64(1)<<(g-b.depth) <= maxRepoint
}

// split replaces bucket b (depth ld) by buckets down to depth sep <= G: the
// two halves of the keys' common (sep-1)-bit prefix at depth sep, and an
// empty bucket for the other half at each depth in between. key is any key
// with the bucket's common prefix (the one being inserted).
func (d Dir) split(tx *pram.Tx, r *rootHdr, b *bucket, key uint64, sep uint) error {
	if sep <= b.depth || sep > r.depth {
		return corruptf("directory %d: split of bucket at depth %d to %d with global depth %d", d.root, b.depth, sep, r.depth)
	}
	ents, err := d.gather(b)
	if err != nil {
		return err
	}
	type part struct {
		depth  uint
		prefix uint64
		groups [][]ent
		sizes  []int
	}
	var parts []part
	for j := b.depth + 1; j < sep; j++ {
		parts = append(parts, part{depth: j, prefix: key>>(keyBits-j) ^ 1, groups: [][]ent{nil}, sizes: []int{minPage}})
	}
	var sides [2][]ent
	for _, e := range ents {
		s := e.key >> (keyBits - sep) & 1
		sides[s] = append(sides[s], e)
	}
	for s, es := range sides {
		g, sz := chainPlan(es)
		parts = append(parts, part{depth: sep, prefix: key>>(keyBits-sep+1)<<1 | uint64(s), groups: g, sizes: sz})
	}
	var sizes []int
	for _, p := range parts {
		sizes = append(sizes, p.sizes...)
	}
	offs, err := d.allocPages(tx, sizes)
	if err != nil {
		return err
	}
	k := 0
	for _, p := range parts {
		prim := d.writeChain(offs[k:k+len(p.sizes)], p.sizes, p.groups, p.depth, p.prefix)
		k += len(p.sizes)
		sh := r.depth - p.depth
		if err := d.repoint(tx, r, p.prefix<<sh, (p.prefix+1)<<sh, prim); err != nil {
			return err
		}
	}
	r.buckets += uint64(len(parts)) - 1
	r.pages += uint64(len(offs)) - uint64(len(b.pages))
	if sep == r.depth {
		r.atDepth += 2
	}
	d.storeRoot(tx, r)
	return d.freeAll(tx, b.pageOffs())
}

// rebuild replaces bucket b by a single page of size bytes holding the same
// entries (grow, shrink, or collapse of an overflow chain).
func (d Dir) rebuild(tx *pram.Tx, r *rootHdr, b *bucket, size int) error {
	ents, err := d.gather(b)
	if err != nil {
		return err
	}
	if pageHdr+contentBytes(ents) > size {
		return corruptf("directory %d: rebuild of bucket into %d bytes cannot hold its entries", d.root, size)
	}
	offs, err := d.allocPages(tx, []int{size})
	if err != nil {
		return err
	}
	prim := d.writeChain(offs, []int{size}, [][]ent{ents}, b.depth, b.prefix)
	if err := d.repoint(tx, r, b.lo, b.hi, prim); err != nil {
		return err
	}
	r.pages -= uint64(len(b.pages)) - 1
	d.storeRoot(tx, r)
	return d.freeAll(tx, b.pageOffs())
}

// addOverflow appends an empty maxPage page to b's chain.
func (d Dir) addOverflow(tx *pram.Tx, r *rootHdr, b *bucket) error {
	offs, err := d.allocPages(tx, []int{maxPage})
	if err != nil {
		return err
	}
	buildPage(d.a.Bytes(offs[0], maxPage), b.depth, flagOverflow, b.prefix, 0, nil)
	tx.SetOff(b.pages[len(b.pages)-1].off+pageOffNext, offs[0])
	r.pages++
	d.storeRoot(tx, r)
	return nil
}

// tidy runs after a delete from the bucket that owns key: it unlinks empty
// overflow pages, collapses short chains, merges sparse buddies, shrinks
// sparse pages and halves the table when no bucket needs its full depth.
// These steps are optional: running out of space skips them.
func (d Dir) tidy(tx *pram.Tx, key uint64) error {
	for range 8 {
		r, err := d.loadRoot()
		if err != nil {
			return err
		}
		b, err := d.locate(&r, key)
		if err != nil {
			return err
		}
		done, err := d.tidyStep(tx, &r, &b)
		if errors.Is(err, alloc.ErrNoSpace) {
			break
		}
		if err != nil {
			return err
		}
		if done {
			break
		}
	}
	r, err := d.loadRoot()
	if err != nil {
		return err
	}
	if r.depth == 0 || r.atDepth != 0 {
		return nil
	}
	if err := d.halve(tx, &r); err != nil && !errors.Is(err, alloc.ErrNoSpace) {
		return err
	}
	return nil
}

// tidyStep performs one tidying step on b and reports whether there was
// nothing left to do.
func (d Dir) tidyStep(tx *pram.Tx, r *rootHdr, b *bucket) (done bool, err error) {
	span := b.hi - b.lo
	if len(b.pages) > 1 {
		used := pageHdr
		for _, p := range b.pages {
			used += p.used() - pageHdr
		}
		if used <= maxPage/2 && span <= maxRepoint {
			return false, d.rebuild(tx, r, b, pageFor(used))
		}
		for k := 1; k < len(b.pages); k++ {
			if p := b.pages[k]; p.n() == 0 {
				tx.SetOff(b.pages[k-1].off+pageOffNext, p.next())
				r.pages--
				d.storeRoot(tx, r)
				return false, d.freeAll(tx, []pram.Off{p.off})
			}
		}
		return true, nil
	}
	if merged, err := d.merge(tx, r, b); merged || err != nil {
		return false, err
	}
	if prim := b.pages[0]; prim.size() > minPage && prim.used() <= prim.size()/4 && span <= maxRepoint {
		return false, d.rebuild(tx, r, b, pageFor(prim.used()))
	}
	return true, nil
}

// merge joins single-page bucket b with its buddy, and the result with its
// buddy and so on, while the buddies are single pages of the right depth and
// all their entries fit in half a maxPage page. It reports whether it merged.
func (d Dir) merge(tx *pram.Tx, r *rootHdr, b *bucket) (bool, error) {
	used := b.pages[0].used()
	depth, prefix := b.depth, b.prefix
	victims := []pram.Off{b.pages[0].off}
	buddies := []bucket{*b}
	for depth > 0 && uint64(1)<<(r.depth-depth+1) <= maxRepoint {
		c, err := d.locate(r, (prefix^1)<<(keyBits-depth))
		if err != nil {
			return false, err
		}
		if c.depth != depth || len(c.pages) != 1 || used+c.pages[0].used()-pageHdr > maxPage/2 {
			break
		}
		used += c.pages[0].used() - pageHdr
		victims = append(victims, c.pages[0].off)
		buddies = append(buddies, c)
		depth--
		prefix >>= 1
	}
	if len(victims) == 1 {
		return false, nil
	}
	var ents []ent
	for i := range buddies {
		es, err := d.gather(&buddies[i])
		if err != nil {
			return false, err
		}
		ents = append(ents, es...)
	}
	size := pageFor(used)
	offs, err := d.allocPages(tx, []int{size})
	if err != nil {
		return false, err
	}
	prim := d.writeChain(offs, []int{size}, [][]ent{ents}, depth, prefix)
	sh := r.depth - depth
	if err := d.repoint(tx, r, prefix<<sh, (prefix+1)<<sh, prim); err != nil {
		return false, err
	}
	if b.depth == r.depth {
		r.atDepth -= 2 // b and its first buddy; the others are shallower
	}
	r.buckets -= uint64(len(victims)) - 1
	r.pages -= uint64(len(victims)) - 1
	d.storeRoot(tx, r)
	return true, d.freeAll(tx, victims)
}
