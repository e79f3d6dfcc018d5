package dirhash

import (
	"fmt"
	"slices"

	"conquest/alloc"
	"conquest/pram"
)

// maxCheckErrors caps the errors Check reports for one directory.
const maxCheckErrors = 100

// Check is the directory's part of the consistency walk. It marks every
// allocation of the directory in c (root, table, bucket pages) and verifies:
// the table gives every bucket one aligned run of 2^(G-ld) slots, so each
// bucket is reachable once; every page header is sane and overflow chains
// end; every entry has a valid name, lies in the bucket its key says, and
// has the key its hash says; no name or key appears twice in a bucket; the
// root's counts (entries, buckets, pages, buckets at full depth) are right.
// It never panics on a damaged arena. The errors wrap ErrCorrupt.
func (d Dir) Check(c *alloc.Checker) []error {
	k := checker{d: d, c: c}
	k.run()
	return k.errs
}

type checker struct {
	d    Dir
	c    *alloc.Checker
	errs []error
}

func (k *checker) errf(format string, args ...any) {
	if len(k.errs) < maxCheckErrors {
		k.errs = append(k.errs, corruptf("directory %d: "+format, append([]any{k.d.root}, args...)...))
	}
}

// mark marks an allocation and checks it holds at least n bytes.
func (k *checker) mark(off pram.Off, n uint64, what string) {
	k.c.Mark(off, what)
	if size, err := k.d.h.SizeOf(off); err != nil {
		k.errf("%s at %d: %v", what, off, err)
	} else if size < n {
		k.errf("%s at %d: allocation of %d bytes, need %d", what, off, size, n)
	}
}

func (k *checker) run() {
	d := k.d
	r, err := d.loadRoot()
	if err != nil {
		if d.a.InHeap(d.root, rootSize) {
			k.c.Mark(d.root, "dirhash root")
		}
		k.errs = append(k.errs, err)
		return
	}
	k.mark(d.root, rootSize, "dirhash root")
	allocs, err := d.tableAllocs(&r)
	for i, off := range allocs {
		switch {
		case i > 0:
			k.mark(off, leafBytes, "dirhash table leaf")
		case r.depth > leafBits:
			k.mark(off, tableBytes(r.depth), "dirhash table top")
		default:
			k.mark(off, tableBytes(r.depth), "dirhash table")
		}
	}
	if err != nil {
		k.errs = append(k.errs, err)
		return // slots in the bad leaf cannot be read
	}

	var count, buckets, pages, atDepth uint64
	n := uint64(1) << r.depth
	for i := uint64(0); i < n && len(k.errs) < maxCheckErrors; {
		off, err := d.bucketAt(&r, i)
		if err != nil {
			k.errs = append(k.errs, err)
			return
		}
		p, err := d.loadPage(off)
		if err != nil {
			k.errf("table slot %d: %v", i, err)
			i++
			continue
		}
		ld := p.depth()
		if ld > r.depth {
			k.errf("table slot %d: bucket %d has depth %d > global depth %d", i, off, ld, r.depth)
			i++
			continue
		}
		span := uint64(1) << (r.depth - ld)
		// The bucket's run of slots starts here: slot i must be aligned to
		// its span and every slot of the run must name it, else a bucket is
		// reachable twice or a slot is lost.
		if i%span != 0 {
			k.errf("table slot %d: bucket %d of depth %d starts a run not aligned to %d slots", i, off, ld, span)
		}
		if want := i >> (r.depth - ld); p.prefix() != want {
			k.errf("table slot %d: bucket %d has prefix %#x, its slots say %#x", i, off, p.prefix(), want)
		}
		if p.flags()&flagOverflow != 0 {
			k.errf("table slot %d: bucket %d is an overflow page", i, off)
		}
		end := min(i-i%span+span, n)
		j := i + 1
		for ; j < end; j++ {
			o, err := d.bucketAt(&r, j)
			if err != nil {
				k.errs = append(k.errs, err)
				return
			}
			if o != off {
				k.errf("table slot %d holds %d inside the run of bucket %d (slots %d..%d)", j, o, off, i, end-1)
				break
			}
		}
		buckets++
		if ld == r.depth {
			atDepth++
		}
		np, ne := k.bucket(p, ld)
		pages += np
		count += ne
		i = j
	}
	if len(k.errs) > 0 {
		return // the counts below would only repeat the damage
	}
	if count != r.count {
		k.errf("root counts %d entries, buckets hold %d", r.count, count)
	}
	if buckets != r.buckets {
		k.errf("root counts %d buckets, table holds %d", r.buckets, buckets)
	}
	if pages != r.pages {
		k.errf("root counts %d pages, buckets have %d", r.pages, pages)
	}
	if atDepth != r.atDepth {
		k.errf("root counts %d buckets at depth %d, table holds %d", r.atDepth, r.depth, atDepth)
	}
}

// bucket checks the chain starting at primary page p of depth ld and
// returns its page and entry counts.
func (k *checker) bucket(p page, ld uint) (npages, nents uint64) {
	d := k.d
	prefix := p.prefix()
	names := map[string]bool{}
	keys := map[uint64]bool{}
	seen := map[pram.Off]bool{}
	for {
		if seen[p.off] {
			k.errf("bucket page %d: overflow chain loops", p.off)
			return
		}
		seen[p.off] = true
		npages++
		what := "dirhash bucket page"
		if npages > 1 {
			what = "dirhash overflow page"
			if p.flags()&flagOverflow == 0 || p.depth() != ld || p.prefix() != prefix || p.size() != maxPage {
				k.errf("overflow page %d: flags %#x depth %d prefix %#x size %d, bucket has depth %d prefix %#x",
					p.off, p.flags(), p.depth(), p.prefix(), p.size(), ld, prefix)
				return // not this bucket's page: its entries would only add noise
			}
			if p.n() == 0 {
				k.errf("overflow page %d is empty", p.off)
			}
		}
		k.mark(p.off, uint64(p.size()), what)
		nents += uint64(k.entries(p, ld, prefix, names, keys))
		next := p.next()
		if next == 0 {
			return
		}
		var err error
		if p, err = d.loadPage(next); err != nil {
			k.errs = append(k.errs, err)
			return
		}
	}
}

// entries checks the slots and names of page p and returns their number.
func (k *checker) entries(p page, ld uint, prefix uint64, names map[string]bool, keys map[uint64]bool) int {
	type span struct{ lo, hi int }
	var spans []span
	live := 0
	for i := range p.n() {
		key := p.key(i)
		nm, ok := p.name(i)
		if !ok {
			k.errf("page %d slot %d: name offset or length out of range", p.off, i)
			continue
		}
		o := int(le.Uint16(p.b[pageHdr+slotSize*i+slotOffName:]))
		spans = append(spans, span{o, o + len(nm)})
		live += len(nm)
		if err := checkName(nm); err != nil {
			k.errf("page %d slot %d: name %q: %v", p.off, i, nm, err)
		}
		switch {
		case key >= keyLimit:
			k.errf("page %d slot %d: key %#x out of range", p.off, i, key)
		case ld > 0 && key>>(keyBits-ld) != prefix:
			k.errf("page %d slot %d: key %#x is not in bucket prefix %#x depth %d", p.off, i, key, prefix, ld)
		case key>>ordBits != hashPrefix(nm):
			k.errf("page %d slot %d: key %#x does not match the hash of %q", p.off, i, key, nm)
		case key&(1<<ordBits-1) > maxOrdinal:
			k.errf("page %d slot %d: key %#x has ordinal beyond %d", p.off, i, key, maxOrdinal)
		}
		if keys[key] {
			k.errf("page %d slot %d: key %#x appears twice in the bucket", p.off, i, key)
		}
		keys[key] = true
		if names[string(nm)] {
			k.errf("page %d slot %d: name %q appears twice", p.off, i, nm)
		}
		names[string(nm)] = true
	}
	if live != p.nameLive() {
		k.errf("page %d: names take %d bytes, header says %d", p.off, live, p.nameLive())
	}
	slices.SortFunc(spans, func(a, b span) int { return a.lo - b.lo })
	for i := 1; i < len(spans); i++ {
		if spans[i].lo < spans[i-1].hi {
			k.errf("page %d: names at %d and %d overlap", p.off, spans[i-1].lo, spans[i].lo)
		}
	}
	return p.n()
}

// String describes the directory's shape, for tests and debugging.
func (d Dir) String() string {
	r, err := d.loadRoot()
	if err != nil {
		return fmt.Sprintf("dirhash %d: %v", d.root, err)
	}
	return fmt.Sprintf("dirhash %d: %d entries, depth %d, %d buckets (%d at full depth), %d pages",
		d.root, r.count, r.depth, r.buckets, r.atDepth, r.pages)
}
