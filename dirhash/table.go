package dirhash

import (
	"conquest/pram"
)

// The directory table maps the top G bits of a key to a bucket's primary
// page. A bucket of local depth ld <= G owns the 2^(G-ld) consecutive slots
// whose index starts with its ld-bit prefix. Up to leafSlots slots the table
// is one allocation; beyond, root.table is a top array of leaf offsets and
// slot i lives in leaf i>>leafBits. Doubling and halving build a whole new
// table in fresh memory (written unlogged, legal because the transaction
// allocated it) and swap it in with logged root stores; only repointing the
// slots of one bucket writes an existing table, and it is logged.

// maxRepoint bounds the slots one split, merge or page replacement rewrites,
// and so the journal bytes it needs (8 bytes of undo per slot). A bucket
// whose range is wider than this in the current table is chained or left
// unmerged instead; with a uniform hash that never happens in practice.
const maxRepoint = 4096

// slotIndex is the table slot of key at global depth g.
func slotIndex(g uint, key uint64) uint64 { return key >> (keyBits - g) }

// slotAddr is the arena offset of table slot i (i < 2^G).
func (d Dir) slotAddr(r *rootHdr, i uint64) (pram.Off, error) {
	if r.depth <= leafBits {
		return r.table + pram.Off(8*i), nil
	}
	leaf := pram.Off(le.Uint64(d.a.View(r.table+pram.Off(8*(i>>leafBits)), 8)))
	if leaf%8 != 0 || !d.a.InHeap(leaf, leafBytes) {
		return 0, corruptf("directory %d: table leaf %d at bad offset %d", r.off, i>>leafBits, leaf)
	}
	return leaf + pram.Off(8*(i&(leafSlots-1))), nil
}

// bucketAt is the primary page offset in table slot i.
func (d Dir) bucketAt(r *rootHdr, i uint64) (pram.Off, error) {
	addr, err := d.slotAddr(r, i)
	if err != nil {
		return 0, err
	}
	return pram.Off(le.Uint64(d.a.View(addr, 8))), nil
}

// tableAllocs lists the allocations of a table: the table itself or the top
// array first, then the leaves.
func (d Dir) tableAllocs(r *rootHdr) ([]pram.Off, error) {
	offs := []pram.Off{r.table}
	if r.depth <= leafBits {
		return offs, nil
	}
	top := d.a.View(r.table, tableBytes(r.depth))
	for j := 0; j < len(top); j += 8 {
		leaf := pram.Off(le.Uint64(top[j:]))
		if leaf%8 != 0 || !d.a.InHeap(leaf, leafBytes) {
			return offs, corruptf("directory %d: table leaf %d at bad offset %d", r.off, j/8, leaf)
		}
		offs = append(offs, leaf)
	}
	return offs, nil
}

// newTable allocates and fills a table of depth g whose slot i holds gen(i),
// returning its root.table offset. On error nothing stays allocated.
func (d Dir) newTable(tx *pram.Tx, g uint, gen func(i uint64) (pram.Off, error)) (pram.Off, error) {
	var offs []pram.Off
	fail := func(err error) (pram.Off, error) {
		if ferr := d.freeAll(tx, offs); ferr != nil {
			return 0, ferr
		}
		return 0, err
	}
	top, err := d.h.Alloc(tx, tableBytes(g))
	if err != nil {
		return 0, err
	}
	offs = append(offs, top)
	n := uint64(1) << g
	if g <= leafBits {
		b := d.a.Bytes(top, 8*n)
		for i := range n {
			v, err := gen(i)
			if err != nil {
				return fail(err)
			}
			le.PutUint64(b[8*i:], uint64(v))
		}
		return top, nil
	}
	nleaves := n >> leafBits
	tb := d.a.Bytes(top, 8*nleaves)
	for l := range nleaves {
		leaf, err := d.h.Alloc(tx, leafBytes)
		if err != nil {
			return fail(err)
		}
		offs = append(offs, leaf)
		le.PutUint64(tb[8*l:], uint64(leaf))
	}
	for l := range nleaves {
		b := d.a.Bytes(offs[1+l], leafBytes)
		for j := range uint64(leafSlots) {
			v, err := gen(l<<leafBits | j)
			if err != nil {
				return fail(err)
			}
			le.PutUint64(b[8*j:], uint64(v))
		}
	}
	return top, nil
}

// freeAll frees offs, stopping at the first error.
func (d Dir) freeAll(tx *pram.Tx, offs []pram.Off) error {
	for _, o := range offs {
		if err := d.h.Free(tx, o); err != nil {
			return corruptf("directory %d: freeing %d: %v", d.root, o, err)
		}
	}
	return nil
}

// repoint stores bucket off into table slots [lo, hi), logged.
func (d Dir) repoint(tx *pram.Tx, r *rootHdr, lo, hi uint64, off pram.Off) error {
	for i := lo; i < hi; {
		addr, err := d.slotAddr(r, i)
		if err != nil {
			return err
		}
		run := hi - i
		if r.depth > leafBits {
			run = min(run, leafSlots-i&(leafSlots-1))
		}
		tx.Touch(addr, 8*run)
		b := d.a.Bytes(addr, 8*run)
		for j := range run {
			le.PutUint64(b[8*j:], uint64(off))
		}
		i += run
	}
	return nil
}

// double grows the table to depth g > G: new slot i takes old slot
// i>>(g-G). Preconditions: g <= MaxDepth.
func (d Dir) double(tx *pram.Tx, r *rootHdr, g uint) error {
	old := *r
	oldAllocs, err := d.tableAllocs(&old)
	if err != nil {
		return err
	}
	sh := g - old.depth
	t, err := d.newTable(tx, g, func(i uint64) (pram.Off, error) { return d.bucketAt(&old, i>>sh) })
	if err != nil {
		return err
	}
	r.depth = g
	r.table = t
	r.atDepth = 0
	d.storeRoot(tx, r)
	return d.freeAll(tx, oldAllocs)
}

// halve shrinks the table to the largest local depth of its buckets: new
// slot i takes old slot i<<(G-g). Preconditions: no bucket has local depth
// G (r.atDepth == 0), so G > g.
func (d Dir) halve(tx *pram.Tx, r *rootHdr) error {
	old := *r
	oldAllocs, err := d.tableAllocs(&old)
	if err != nil {
		return err
	}
	// One pass over the buckets (not the slots) finds the depth needed.
	var g uint
	var at uint64
	n := uint64(1) << old.depth
	for i := uint64(0); i < n; {
		off, err := d.bucketAt(&old, i)
		if err != nil {
			return err
		}
		p, err := d.loadPage(off)
		if err != nil {
			return err
		}
		ld := p.depth()
		if ld >= old.depth {
			return corruptf("directory %d: bucket %d has depth %d, root says none reaches %d", d.root, off, ld, old.depth)
		}
		switch {
		case ld > g:
			g, at = ld, 1
		case ld == g:
			at++
		}
		i = (i>>(old.depth-ld) + 1) << (old.depth - ld)
	}
	sh := old.depth - g
	t, err := d.newTable(tx, g, func(i uint64) (pram.Off, error) { return d.bucketAt(&old, i<<sh) })
	if err != nil {
		return err
	}
	r.depth = g
	r.table = t
	r.atDepth = at
	d.storeRoot(tx, r)
	return d.freeAll(tx, oldAllocs)
}

// tableCap is the most table slots a directory of n entries may grow to.
// Beyond it a full bucket is chained rather than split, so names whose
// hashes cluster (by chance or by design) cannot blow the table up.
func tableCap(n uint64) uint64 { return max(64, 4*n) }
