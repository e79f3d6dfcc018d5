package dirhash

import (
	"fmt"

	"conquest/pram"
)

// rootHdr is a decoded, validated root.
type rootHdr struct {
	off     pram.Off
	depth   uint // global depth G
	count   uint64
	table   pram.Off
	atDepth uint64 // primary buckets with local depth G
	buckets uint64
	pages   uint64
}

func corruptf(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// tableBytes is the size of the allocation root.table points at for depth g:
// the whole table while it fits one leaf, else the top array.
func tableBytes(g uint) uint64 {
	if g <= leafBits {
		return 8 << g
	}
	return 8 << (g - leafBits)
}

// loadRoot reads and validates the root.
func (d Dir) loadRoot() (rootHdr, error) {
	r := rootHdr{off: d.root}
	if d.root%8 != 0 || !d.a.InHeap(d.root, rootSize) {
		return r, corruptf("root offset %d outside the heap", d.root)
	}
	b := d.a.View(d.root, rootSize)
	if m := le.Uint32(b[rootOffMagic:]); m != rootMagic {
		return r, corruptf("root %d: bad magic %#x", d.root, m)
	}
	if v := b[rootOffVersion]; v != rootVersion {
		return r, corruptf("root %d: version %d", d.root, v)
	}
	r.depth = uint(b[rootOffDepth])
	r.count = le.Uint64(b[rootOffCount:])
	r.table = pram.Off(le.Uint64(b[rootOffTable:]))
	r.atDepth = le.Uint64(b[rootOffAtDepth:])
	r.buckets = le.Uint64(b[rootOffBuckets:])
	r.pages = le.Uint64(b[rootOffPages:])
	if r.depth > MaxDepth {
		return r, corruptf("root %d: global depth %d > %d", d.root, r.depth, MaxDepth)
	}
	if r.table%8 != 0 || !d.a.InHeap(r.table, tableBytes(r.depth)) {
		return r, corruptf("root %d: table offset %d outside the heap", d.root, r.table)
	}
	return r, nil
}

// encodeRoot writes r into the rootSize bytes of b.
func encodeRoot(b []byte, r *rootHdr) {
	clear(b[:rootSize])
	le.PutUint32(b[rootOffMagic:], rootMagic)
	b[rootOffVersion] = rootVersion
	b[rootOffDepth] = uint8(r.depth)
	le.PutUint64(b[rootOffCount:], r.count)
	le.PutUint64(b[rootOffTable:], uint64(r.table))
	le.PutUint64(b[rootOffAtDepth:], r.atDepth)
	le.PutUint64(b[rootOffBuckets:], r.buckets)
	le.PutUint64(b[rootOffPages:], r.pages)
}

// storeRoot writes the fields of r that differ from the arena, logged.
func (d Dir) storeRoot(tx *pram.Tx, r *rootHdr) {
	old, err := d.loadRoot()
	if err != nil {
		old = rootHdr{} // store every field
	}
	if old.depth != r.depth {
		tx.Set8(r.off+rootOffDepth, uint8(r.depth))
	}
	set := func(field pram.Off, was, now uint64) {
		if was != now {
			tx.Set64(r.off+field, now)
		}
	}
	set(rootOffCount, old.count, r.count)
	set(rootOffTable, uint64(old.table), uint64(r.table))
	set(rootOffAtDepth, old.atDepth, r.atDepth)
	set(rootOffBuckets, old.buckets, r.buckets)
	set(rootOffPages, old.pages, r.pages)
}
