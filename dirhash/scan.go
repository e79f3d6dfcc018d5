package dirhash

import (
	"cmp"
	"slices"
)

// Scan calls fn for each entry whose key is at least cursor, in key order,
// until fn returns false or the entries run out. Cursor 0 starts at the
// beginning; to resume after an entry, pass the next value fn received with
// it (0 < next < 1<<62). Keys are fixed when an entry is inserted and do not
// depend on the table's shape, so a cursor survives splits, merges, table
// doublings and halvings and restarts: a scan resumed across any inserts and
// deletes returns every entry present throughout exactly once. A name
// deleted and re-inserted during a scan gets the same key unless another
// name with the same 55-bit hash prefix took its ordinal meanwhile.
//
// e.Name is a fresh copy the caller may keep. fn must not change the
// directory. Scan returns ErrCorrupt for a damaged directory, possibly after
// returning some entries.
func (d Dir) Scan(cursor uint64, fn func(e Entry, next uint64) bool) error {
	if cursor >= keyLimit {
		return nil
	}
	r, err := d.loadRoot()
	if err != nil {
		return err
	}
	type item struct {
		key, ino uint64
		typ      uint8
		name     []byte
	}
	var items []item
	for c := cursor; ; {
		b, err := d.locate(&r, c)
		if err != nil {
			return err
		}
		start := b.prefix << (keyBits - b.depth)
		end := start + 1<<(keyBits-b.depth)
		size := 0
		for _, p := range b.pages {
			size += p.nameLive()
		}
		names := make([]byte, 0, size) // one allocation per bucket
		items = items[:0]
		for _, p := range b.pages {
			for i := range p.n() {
				k := p.key(i)
				if k < start || k >= end {
					return corruptf("directory %d: page %d slot %d: key %#x outside bucket [%#x, %#x)",
						d.root, p.off, i, k, start, end)
				}
				if k < c {
					continue
				}
				nm, ok := p.name(i)
				if !ok || len(names)+len(nm) > cap(names) {
					return corruptf("directory %d: page %d slot %d: bad name", d.root, p.off, i)
				}
				names = append(names, nm...)
				items = append(items, item{k, p.ino(i), p.typ(i), names[len(names)-len(nm) : len(names) : len(names)]})
			}
		}
		slices.SortFunc(items, func(x, y item) int { return cmp.Compare(x.key, y.key) })
		for j, it := range items {
			if j > 0 && it.key == items[j-1].key {
				return corruptf("directory %d: two entries with key %#x", d.root, it.key)
			}
			if !fn(Entry{Name: it.name, Ino: it.ino, Type: it.typ}, it.key+1) {
				return nil
			}
		}
		if end >= keyLimit {
			return nil
		}
		c = end
	}
}
