package dirhash

import (
	"conquest/pram"
)

// SalvageReport says what Salvage could read of a damaged directory.
type SalvageReport struct {
	Entries int // entries handed to the callback
	Skipped int // slots whose name, key or bucket did not check out
	Pages   int // bucket pages read
	BadSlot int // table slots that led to no readable bucket page
}

// Salvage reads what it can trust of a directory whose Check failed and
// hands each entry to fn, for fsck to rebuild the directory from. It reads
// only; it changes nothing and never panics on a damaged arena.
//
// It follows the table (skipping a leaf or slot that does not check out)
// to every bucket page whose header is sane and whose prefix agrees with
// the slot it was reached from, and along overflow chains (bounded, each
// page read once). An entry is handed over only if its name is valid, its
// key matches the hash of its name and lies in the bucket's prefix, and its
// name was not handed over before, so a damaged slot never yields a wrong
// name, and a page reached by a damaged pointer from another directory is
// not mistaken for one of this one unless its prefix also fits. A root
// that does not check out yields nothing and the error.
func (d Dir) Salvage(fn func(name []byte, ino uint64, typ uint8)) (SalvageReport, error) {
	var rep SalvageReport
	r, err := d.loadRoot()
	if err != nil {
		return rep, err
	}
	seen := make(map[pram.Off]bool)
	names := make(map[string]bool)
	n := uint64(1) << r.depth
	for i := uint64(0); i < n; i++ {
		off, err := d.bucketAt(&r, i)
		if err != nil {
			rep.BadSlot++
			continue
		}
		if seen[off] {
			continue // the rest of a bucket's run of slots
		}
		p, err := d.loadPage(off)
		if err != nil || p.depth() > r.depth || p.prefix() != i>>(r.depth-p.depth()) || p.flags()&flagOverflow != 0 {
			rep.BadSlot++
			continue
		}
		seen[off] = true
		ld, prefix := p.depth(), p.prefix()
		for k := 0; k < d.maxChain(); k++ {
			rep.Pages++
			d.salvagePage(p, ld, prefix, names, fn, &rep)
			next := p.next()
			if next == 0 || seen[next] {
				break
			}
			np, err := d.loadPage(next)
			if err != nil || np.flags()&flagOverflow == 0 {
				break
			}
			seen[next] = true
			p = np
		}
	}
	return rep, nil
}

// salvagePage hands over the entries of page p (of a bucket of depth ld and
// the given prefix) that check out.
func (d Dir) salvagePage(p page, ld uint, prefix uint64, names map[string]bool,
	fn func(name []byte, ino uint64, typ uint8), rep *SalvageReport) {
	for i := range p.n() {
		nm, ok := p.name(i)
		key := p.key(i)
		switch {
		case !ok || checkName(nm) != nil,
			key >= keyLimit,
			ld > 0 && key>>(keyBits-ld) != prefix,
			key>>ordBits != hashPrefix(nm),
			names[string(nm)]:
			rep.Skipped++
			continue
		}
		names[string(nm)] = true
		rep.Entries++
		fn(nm, p.ino(i), p.typ(i))
	}
}
