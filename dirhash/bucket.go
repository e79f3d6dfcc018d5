package dirhash

import (
	"conquest/pram"
)

// loadPage validates the header of the bucket page at off and returns a view.
func (d Dir) loadPage(off pram.Off) (page, error) {
	if off == 0 || off%8 != 0 || !d.a.InHeap(off, pageHdr) {
		return page{}, corruptf("directory %d: bucket page at bad offset %d", d.root, off)
	}
	size := uint64(le.Uint16(d.a.View(off+pageOffSize, 2)))
	if size < minPage || size > maxPage || size&(size-1) != 0 || !d.a.InHeap(off, size) {
		return page{}, corruptf("directory %d: bucket page %d: bad size %d", d.root, off, size)
	}
	p := page{off: off, b: d.a.View(off, size)} // changed only through the Tx
	if m := le.Uint32(p.b[pageOffMagic:]); m != pageMagic {
		return page{}, corruptf("directory %d: bucket page %d: bad magic %#x", d.root, off, m)
	}
	n, lo, live := p.n(), p.nameLo(), p.nameLive()
	if pageHdr+slotSize*n > lo || lo > int(size) || live > int(size)-lo {
		return page{}, corruptf("directory %d: bucket page %d: n=%d nameLo=%d nameLive=%d size=%d",
			d.root, off, n, lo, live, size)
	}
	return p, nil
}

// bucket is a located bucket: its table slot range, depth, prefix and pages
// (primary first, then the overflow chain).
type bucket struct {
	lo, hi uint64
	depth  uint
	prefix uint64
	pages  []page
}

// maxChain bounds a walk along an overflow chain (a damaged arena may hold
// a cycle): overflow pages are maxPage bytes, so no real chain is longer.
func (d Dir) maxChain() int { return int(d.a.Size()/maxPage) + 1 }

// locate finds and validates the bucket that owns key (key < keyLimit).
func (d Dir) locate(r *rootHdr, key uint64) (bucket, error) {
	off, err := d.bucketAt(r, slotIndex(r.depth, key))
	if err != nil {
		return bucket{}, err
	}
	p, err := d.loadPage(off)
	if err != nil {
		return bucket{}, err
	}
	ld := p.depth()
	if ld > r.depth || p.flags()&flagOverflow != 0 || p.prefix() != key>>(keyBits-ld) {
		return bucket{}, corruptf("directory %d: bucket %d (depth %d, prefix %#x, flags %#x) does not own key %#x at global depth %d",
			d.root, off, ld, p.prefix(), p.flags(), key, r.depth)
	}
	b := bucket{depth: ld, prefix: p.prefix(), pages: []page{p}}
	b.lo = b.prefix << (r.depth - ld)
	b.hi = (b.prefix + 1) << (r.depth - ld)
	for next := p.next(); next != 0; next = p.next() {
		if len(b.pages) > d.maxChain() {
			return b, corruptf("directory %d: overflow chain of bucket %d loops", d.root, off)
		}
		if p, err = d.loadPage(next); err != nil {
			return b, err
		}
		if p.depth() != ld || p.prefix() != b.prefix || p.flags()&flagOverflow == 0 || p.size() != maxPage {
			return b, corruptf("directory %d: overflow page %d does not match bucket %d", d.root, next, off)
		}
		b.pages = append(b.pages, p)
	}
	return b, nil
}

// gather copies the entries of b's pages into Go memory.
func (d Dir) gather(b *bucket) ([]ent, error) {
	var ents []ent
	for _, p := range b.pages {
		for i := range p.n() {
			nm, ok := p.name(i)
			if !ok {
				return nil, corruptf("directory %d: page %d slot %d: bad name offset", d.root, p.off, i)
			}
			ents = append(ents, ent{key: p.key(i), ino: p.ino(i), typ: p.typ(i), name: append([]byte(nil), nm...)})
		}
	}
	return ents, nil
}

// insertInPage adds e to p if it fits, compacting the names if needed.
// It reports whether e was stored.
func (d Dir) insertInPage(tx *pram.Tx, p page, e ent) (bool, error) {
	need := recSize(len(e.name))
	if p.free() < need {
		return false, nil
	}
	if p.gap() < need {
		// Rewrite the page with its names packed, logged as a whole.
		ents, err := d.gather(&bucket{pages: []page{p}})
		if err != nil {
			return false, err
		}
		img := make([]byte, p.size())
		buildPage(img, p.depth(), p.flags(), p.prefix(), p.next(), append(ents, e))
		tx.SetBytes(p.off, img)
		return true, nil
	}
	n, lo := p.n(), p.nameLo()-len(e.name)
	tx.SetBytes(p.off+pram.Off(lo), e.name)
	var s [slotSize]byte
	putSlot(s[:], e, lo)
	tx.SetBytes(p.off+pram.Off(pageHdr+slotSize*n), s[:])
	var c [pageCountersHi - pageCountersLo]byte
	copy(c[:], p.b[pageCountersLo:pageCountersHi])
	le.PutUint16(c[pageOffN-pageCountersLo:], uint16(n+1))
	le.PutUint16(c[pageOffNameLo-pageCountersLo:], uint16(lo))
	le.PutUint16(c[pageOffNameLive-pageCountersLo:], uint16(p.nameLive()+len(e.name)))
	tx.SetBytes(p.off+pageCountersLo, c[:])
	return true, nil
}

// removeFromPage deletes slot i of p: the last slot moves into its place.
func (d Dir) removeFromPage(tx *pram.Tx, p page, i int) {
	n := p.n()
	s := p.b[pageHdr+slotSize*i:]
	nameOff, nameLen := int(le.Uint16(s[slotOffName:])), int(s[slotOffLen])
	if last := n - 1; i != last {
		tx.SetBytes(p.off+pram.Off(pageHdr+slotSize*i), p.b[pageHdr+slotSize*last:pageHdr+slotSize*(last+1)])
	}
	lo := p.nameLo()
	if nameOff == lo {
		lo += nameLen // the lowest name: give its bytes back to the gap
	}
	if n == 1 {
		lo = p.size() // empty: the whole page is gap again
	}
	var c [pageCountersHi - pageCountersLo]byte
	copy(c[:], p.b[pageCountersLo:pageCountersHi])
	le.PutUint16(c[pageOffN-pageCountersLo:], uint16(n-1))
	le.PutUint16(c[pageOffNameLo-pageCountersLo:], uint16(lo))
	le.PutUint16(c[pageOffNameLive-pageCountersLo:], uint16(p.nameLive()-nameLen))
	tx.SetBytes(p.off+pageCountersLo, c[:])
}

// chainPlan splits ents into pages: one page of pageFor(...) bytes if they
// fit in a maxPage page, else maxPage pages packed greedily.
func chainPlan(ents []ent) (groups [][]ent, sizes []int) {
	if used := pageHdr + contentBytes(ents); used <= maxPage {
		return [][]ent{ents}, []int{pageFor(used)}
	}
	start, used := 0, pageHdr
	for i, e := range ents {
		if used+recSize(len(e.name)) > maxPage {
			groups = append(groups, ents[start:i])
			sizes = append(sizes, maxPage)
			start, used = i, pageHdr
		}
		used += recSize(len(e.name))
	}
	groups = append(groups, ents[start:])
	sizes = append(sizes, maxPage)
	return groups, sizes
}

// allocPages allocates one page per size. On error nothing stays allocated.
func (d Dir) allocPages(tx *pram.Tx, sizes []int) ([]pram.Off, error) {
	offs := make([]pram.Off, 0, len(sizes))
	for _, s := range sizes {
		off, err := d.h.Alloc(tx, uint64(s))
		if err != nil {
			if ferr := d.freeAll(tx, offs); ferr != nil {
				return nil, ferr
			}
			return nil, err
		}
		offs = append(offs, off)
	}
	return offs, nil
}

// writeChain writes a freshly allocated chain (unlogged: the transaction
// allocated it) holding groups, and returns its primary page.
func (d Dir) writeChain(offs []pram.Off, sizes []int, groups [][]ent, depth uint, prefix uint64) pram.Off {
	for k, g := range groups {
		var next pram.Off
		if k+1 < len(offs) {
			next = offs[k+1]
		}
		var flags uint8
		if k > 0 {
			flags = flagOverflow
		}
		buildPage(d.a.Bytes(offs[k], uint64(sizes[k])), depth, flags, prefix, next, g)
	}
	return offs[0]
}

// pageOffs lists the offsets of b's pages.
func (b *bucket) pageOffs() []pram.Off {
	offs := make([]pram.Off, len(b.pages))
	for i, p := range b.pages {
		offs[i] = p.off
	}
	return offs
}
