package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"conquest/alloc"
	"conquest/pram"
)

// xlist is an ordered list of fixed-size records kept in the arena, keyed by
// the record's first word: a directory (one arena allocation of {first key,
// leaf offset} entries) over leaves (arena allocations of sorted records).
// The free map, both halves of a segment list, the unsynced-block lists and
// the quarantine are xlists.
//
// Leaves start small (minLeafBytes) and double up to maxLeafBytes before they
// split, so a list of one or two records costs a few hundred bytes. As
// records go, a leaf takes in the next one when both fit in half of it, and
// a leaf or the directory left a quarter full moves to half its size, so a
// list that shrinks gives the arena back. A store logs at most one leaf
// (4 KiB) plus, on a split, the shifted tail of the
// directory (at most 64 KiB): the journal cost of an operation is bounded.
//
// Stored layout of the 32-byte header, embedded in its owner:
//
//	+0  dir      Off     directory allocation (0 when the list is empty)
//	+8  nleaves  uint32
//	+12 dirCap   uint32  entries the directory allocation holds
//	+16 count    uint64  records in the list
//	+24 words    uint32  words per record (checked on every load)
//	+28 pad      uint32
//
// Directory entry (16 bytes): +0 first key of the leaf, +8 leaf Off.
// Leaf: +0 n uint32, +4 cap uint32, +8 pad, +16 records.
const (
	xlistHeaderSize = 32
	xhDir           = 0
	xhNLeaves       = 8
	xhDirCap        = 12
	xhCount         = 16
	xhWords         = 24

	dirEntrySize   = 16
	leafHeaderSize = 16
	minLeafBytes   = 128
	maxLeafBytes   = 4096
	minDirEntries  = 4
	maxDirEntries  = 4096 // 64 KiB directory
)

// errListFull: the directory is at maxDirEntries and every leaf is full.
var errListFull = errors.New("diskstore: list directory full")

// rec is one record; only its first words words are used.
type rec [5]uint64

type xlist struct {
	a     *pram.Arena
	h     *alloc.Heap
	hdr   pram.Off
	words int
	what  string // for messages: "free map", "segments", "checksum pages"
	// lazy: an all-zero header is a valid empty list (the header lives in
	// bytes that arenas formatted before the list existed have as zeros);
	// the first insert stores the record width.
	lazy bool
	// keyFits, if set, says whether record r is right at key: mend then
	// sets a leaf's first key from its directory key when only that one
	// fits, instead of the directory key from the record (a checksum
	// page's check word depends on its base, sumcheck.go).
	keyFits func(r rec, key uint64) bool
}

// xhead is a validated copy of a header.
type xhead struct {
	dir     pram.Off
	nleaves int
	dirCap  int
	count   uint64
}

// xleaf is a validated leaf.
type xleaf struct {
	idx int // position in the directory
	off pram.Off
	n   int
	cap int
}

// xcur is a position in the list: leaf and slot.
type xcur struct {
	leaf xleaf
	i    int
}

func (l xlist) corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: %s list at %d: %s", ErrCorrupt, l.what, l.hdr, fmt.Sprintf(format, args...))
}

func (l xlist) recBytes() int { return l.words * 8 }

func (l xlist) leafCap(bytes uint64) int { return int((bytes - leafHeaderSize) / uint64(l.recBytes())) }

// initHeader writes an empty header through tx.
func (l xlist) initHeader(tx *pram.Tx) {
	var b [xlistHeaderSize]byte
	binary.LittleEndian.PutUint32(b[xhWords:], uint32(l.words))
	tx.SetBytes(l.hdr, b[:])
}

func (l xlist) head() (xhead, error) {
	if !l.a.InHeap(l.hdr, xlistHeaderSize) || l.hdr%8 != 0 {
		return xhead{}, l.corrupt("header out of range")
	}
	if w := l.a.U32(l.hdr + xhWords); int(w) != l.words {
		if l.lazy && w == 0 && allZero([]uint64{l.a.U64(l.hdr + xhDir), l.a.U64(l.hdr + xhNLeaves), l.a.U64(l.hdr + xhCount)}) {
			return xhead{}, nil
		}
		return xhead{}, l.corrupt("record words %d, want %d", w, l.words)
	}
	h := xhead{
		dir:     pram.Off(l.a.U64(l.hdr + xhDir)),
		nleaves: int(l.a.U32(l.hdr + xhNLeaves)),
		dirCap:  int(l.a.U32(l.hdr + xhDirCap)),
		count:   l.a.U64(l.hdr + xhCount),
	}
	if h.nleaves > h.dirCap || h.dirCap > maxDirEntries {
		return h, l.corrupt("%d leaves, directory capacity %d", h.nleaves, h.dirCap)
	}
	if h.nleaves == 0 {
		if h.count != 0 {
			return h, l.corrupt("no leaves but %d records", h.count)
		}
		return h, nil
	}
	if !l.a.InHeap(h.dir, uint64(h.dirCap)*dirEntrySize) || h.dir%8 != 0 {
		return h, l.corrupt("directory at %d out of range", h.dir)
	}
	return h, nil
}

func dirKeyOff(h xhead, i int) pram.Off  { return h.dir + pram.Off(i*dirEntrySize) }
func dirLeafOff(h xhead, i int) pram.Off { return h.dir + pram.Off(i*dirEntrySize+8) }

func (l xlist) leaf(h xhead, i int) (xleaf, error) {
	off := pram.Off(l.a.U64(dirLeafOff(h, i)))
	if !l.a.InHeap(off, leafHeaderSize) || off%8 != 0 {
		return xleaf{}, l.corrupt("leaf %d at %d out of range", i, off)
	}
	n, c := int(l.a.U32(off)), int(l.a.U32(off+4))
	if n > c || n == 0 || c > l.leafCap(maxLeafBytes) || !l.a.InHeap(off, leafHeaderSize+uint64(c*l.recBytes())) {
		return xleaf{}, l.corrupt("leaf %d at %d: %d records, capacity %d", i, off, n, c)
	}
	return xleaf{idx: i, off: off, n: n, cap: c}, nil
}

func (l xlist) recOff(lf xleaf, i int) pram.Off {
	return lf.off + leafHeaderSize + pram.Off(i*l.recBytes())
}

func (l xlist) key(lf xleaf, i int) uint64 { return l.a.U64(l.recOff(lf, i)) }

func (l xlist) get(c xcur) rec {
	var r rec
	off := l.recOff(c.leaf, c.i)
	for j := 0; j < l.words; j++ {
		r[j] = l.a.U64(off + pram.Off(8*j))
	}
	return r
}

func (l xlist) encode(r rec) []byte {
	var b [len(rec{}) * 8]byte
	return l.encodeInto(&b, r)
}

// encodeInto encodes r into b and returns the record's bytes, a prefix of b.
func (l xlist) encodeInto(b *[len(rec{}) * 8]byte, r rec) []byte {
	for j := 0; j < l.words; j++ {
		binary.LittleEndian.PutUint64(b[8*j:], r[j])
	}
	return b[:l.recBytes()]
}

// findLeaf is the index of the last leaf whose first key is <= key (0 if
// none).
func (l xlist) findLeaf(h xhead, key uint64) int {
	lo, hi := 0, h.nleaves // invariant: answer in [lo, hi)
	for hi-lo > 1 {
		m := (lo + hi) / 2
		if l.a.U64(dirKeyOff(h, m)) <= key {
			lo = m
		} else {
			hi = m
		}
	}
	return lo
}

// lowerBound is the first slot of lf whose key is >= key (lf.n if none).
func (l xlist) lowerBound(lf xleaf, key uint64) int {
	// One view of the leaf's records (leaf checked its bounds), read
	// directly: a bounds-checked arena load per probe was most of the cost
	// of the searches under every random write.
	rb := l.recBytes()
	recs := l.a.View(l.recOff(lf, 0), uint64(lf.n*rb))
	lo, hi := 0, lf.n
	for lo < hi {
		m := (lo + hi) / 2
		if binary.LittleEndian.Uint64(recs[m*rb:]) < key {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// seekLE returns the last record with key <= key.
func (l xlist) seekLE(key uint64) (xcur, bool, error) {
	h, err := l.head()
	if err != nil || h.nleaves == 0 {
		return xcur{}, false, err
	}
	lf, err := l.leaf(h, l.findLeaf(h, key))
	if err != nil {
		return xcur{}, false, err
	}
	i := l.lowerBound(lf, key)
	if i < lf.n && l.key(lf, i) == key {
		return xcur{lf, i}, true, nil
	}
	if i > 0 {
		return xcur{lf, i - 1}, true, nil
	}
	return xcur{}, false, nil // key below the first record
}

// seekGE returns the first record with key >= key.
func (l xlist) seekGE(key uint64) (xcur, bool, error) {
	h, err := l.head()
	if err != nil || h.nleaves == 0 {
		return xcur{}, false, err
	}
	lf, err := l.leaf(h, l.findLeaf(h, key))
	if err != nil {
		return xcur{}, false, err
	}
	i := l.lowerBound(lf, key)
	if i < lf.n {
		return xcur{lf, i}, true, nil
	}
	return l.nextLeaf(h, lf)
}

func (l xlist) nextLeaf(h xhead, lf xleaf) (xcur, bool, error) {
	if lf.idx+1 >= h.nleaves {
		return xcur{}, false, nil
	}
	nl, err := l.leaf(h, lf.idx+1)
	return xcur{nl, 0}, err == nil, err
}

func (l xlist) first() (xcur, bool, error) { return l.seekGE(0) }

func (l xlist) last() (xcur, bool, error) {
	h, err := l.head()
	if err != nil || h.nleaves == 0 {
		return xcur{}, false, err
	}
	lf, err := l.leaf(h, h.nleaves-1)
	return xcur{lf, lf.n - 1}, err == nil, err
}

func (l xlist) next(c xcur) (xcur, bool, error) {
	if c.i+1 < c.leaf.n {
		return xcur{c.leaf, c.i + 1}, true, nil
	}
	h, err := l.head()
	if err != nil {
		return xcur{}, false, err
	}
	return l.nextLeaf(h, c.leaf)
}

func (l xlist) prev(c xcur) (xcur, bool, error) {
	if c.i > 0 {
		return xcur{c.leaf, c.i - 1}, true, nil
	}
	if c.leaf.idx == 0 {
		return xcur{}, false, nil
	}
	h, err := l.head()
	if err != nil {
		return xcur{}, false, err
	}
	pl, err := l.leaf(h, c.leaf.idx-1)
	return xcur{pl, pl.n - 1}, err == nil, err
}

func (l xlist) length() (uint64, error) {
	h, err := l.head()
	return h.count, err
}

// set overwrites the record at c. The caller keeps the list ordered.
func (l xlist) set(tx *pram.Tx, c xcur, r rec) error {
	var eb [len(rec{}) * 8]byte
	tx.SetBytes(l.recOff(c.leaf, c.i), l.encodeInto(&eb, r))
	if c.i == 0 {
		h, err := l.head()
		if err != nil {
			return err
		}
		tx.Set64(dirKeyOff(h, c.leaf.idx), r[0])
	}
	return nil
}

// insert adds r; its key must not be in the list.
func (l xlist) insert(tx *pram.Tx, r rec) error {
	h, err := l.head()
	if err != nil {
		return err
	}
	if h.nleaves == 0 {
		return l.insertFirst(tx, r)
	}
	lf, err := l.leaf(h, l.findLeaf(h, r[0]))
	if err != nil {
		return err
	}
	i := l.lowerBound(lf, r[0])
	if i < lf.n && l.key(lf, i) == r[0] {
		return l.corrupt("duplicate key %d", r[0])
	}
	if lf.n == lf.cap {
		if lf.cap < l.leafCap(maxLeafBytes) {
			if lf, err = l.growLeaf(tx, h, lf); err != nil {
				return err
			}
		} else {
			var right xleaf
			if h, lf, right, err = l.split(tx, h, lf); err != nil {
				return err
			}
			if i > lf.n {
				i -= lf.n
				lf = right
			}
		}
	}
	// Shift [i, n) right by one record and store r at i.
	at, rb := l.recOff(lf, i), l.recBytes()
	tx.Move(at+pram.Off(rb), at, uint64((lf.n-i)*rb))
	var eb [len(rec{}) * 8]byte
	tx.SetBytes(at, l.encodeInto(&eb, r))
	tx.Set32(lf.off, uint32(lf.n+1))
	if i == 0 {
		tx.Set64(dirKeyOff(h, lf.idx), r[0])
	}
	tx.Set64(l.hdr+xhCount, h.count+1)
	return nil
}

func (l xlist) insertFirst(tx *pram.Tx, r rec) error {
	dir, err := l.h.Alloc(tx, minDirEntries*dirEntrySize)
	if err != nil {
		return err
	}
	lo, err := l.h.Alloc(tx, minLeafBytes)
	if err != nil {
		return err
	}
	// Fresh allocations of this Tx: written unlogged.
	lb := freshBytes(l.h, l.a, lo, 0, minLeafBytes)
	clear(lb)
	binary.LittleEndian.PutUint32(lb[0:], 1)
	binary.LittleEndian.PutUint32(lb[4:], uint32(l.leafCap(minLeafBytes)))
	copy(lb[leafHeaderSize:], l.encode(r))
	db := freshBytes(l.h, l.a, dir, 0, minDirEntries*dirEntrySize)
	clear(db)
	binary.LittleEndian.PutUint64(db[0:], r[0])
	binary.LittleEndian.PutUint64(db[8:], uint64(lo))
	if l.lazy && l.a.U32(l.hdr+xhWords) == 0 {
		tx.Set32(l.hdr+xhWords, uint32(l.words))
	}
	tx.SetOff(l.hdr+xhDir, dir)
	tx.Set32(l.hdr+xhNLeaves, 1)
	tx.Set32(l.hdr+xhDirCap, minDirEntries)
	tx.Set64(l.hdr+xhCount, 1)
	return nil
}

func (l xlist) leafBytes(lf xleaf) uint64 {
	return leafHeaderSize + uint64(lf.cap*l.recBytes())
}

// growLeaf moves a full leaf to an allocation twice its size.
func (l xlist) growLeaf(tx *pram.Tx, h xhead, lf xleaf) (xleaf, error) {
	nsize := uint64(minLeafBytes)
	for l.leafCap(nsize) <= lf.cap {
		nsize *= 2
	}
	return l.moveLeaf(tx, h, lf, nsize)
}

// moveLeaf moves leaf lf to a new allocation of nsize bytes, which holds
// its records.
func (l xlist) moveLeaf(tx *pram.Tx, h xhead, lf xleaf, nsize uint64) (xleaf, error) {
	no, err := l.h.Alloc(tx, nsize)
	if err != nil {
		return lf, err
	}
	nb := freshBytes(l.h, l.a, no, 0, nsize)
	clear(nb)
	copy(nb, l.a.View(lf.off, leafHeaderSize+uint64(lf.n*l.recBytes())))
	ncap := l.leafCap(nsize)
	binary.LittleEndian.PutUint32(nb[4:], uint32(ncap))
	tx.SetOff(dirLeafOff(h, lf.idx), no)
	if err := l.h.Free(tx, lf.off); err != nil {
		return lf, err
	}
	return xleaf{idx: lf.idx, off: no, n: lf.n, cap: ncap}, nil
}

// shrinkLeaf moves a leaf that removals left at most a quarter full to an
// allocation half its size (one it fills at most half, so that the next
// inserts do not grow it back at once). Leaves grow as a list fills; without
// this, a free map that was cut into many extents and then merged again
// would keep its grown leaves. A shrink is an economy, never a need: when
// the arena has no room for the smaller allocation (a removal is how room
// is made), the leaf stays as it is.
func (l xlist) shrinkLeaf(tx *pram.Tx, h xhead, lf xleaf) error {
	size, err := l.h.SizeOf(lf.off)
	if err != nil {
		return err
	}
	if size/2 < minLeafBytes || 2*lf.n > l.leafCap(size/2) {
		return nil
	}
	_, err = l.moveLeaf(tx, h, lf, size/2)
	if errors.Is(err, alloc.ErrNoSpace) {
		return nil
	}
	return err
}

// split moves the upper half of a full leaf into a new leaf after it.
func (l xlist) split(tx *pram.Tx, h xhead, lf xleaf) (xhead, xleaf, xleaf, error) {
	if h.nleaves == h.dirCap {
		var err error
		if h, err = l.growDir(tx, h); err != nil {
			return h, lf, xleaf{}, err
		}
	}
	half := lf.n / 2
	ro, err := l.h.Alloc(tx, maxLeafBytes)
	if err != nil {
		return h, lf, xleaf{}, err
	}
	rb := freshBytes(l.h, l.a, ro, 0, maxLeafBytes)
	clear(rb)
	rn := lf.n - half
	binary.LittleEndian.PutUint32(rb[0:], uint32(rn))
	binary.LittleEndian.PutUint32(rb[4:], uint32(l.leafCap(maxLeafBytes)))
	copy(rb[leafHeaderSize:], l.a.View(l.recOff(lf, half), uint64(rn*l.recBytes())))
	tx.Set32(lf.off, uint32(half))
	// Insert the directory entry at lf.idx+1.
	at := lf.idx + 1
	tail := l.a.Bytes(dirKeyOff(h, at), uint64((h.nleaves-at)*dirEntrySize))
	ent := make([]byte, dirEntrySize, dirEntrySize+len(tail))
	binary.LittleEndian.PutUint64(ent[0:], l.key(xleaf{off: ro, n: rn, cap: 1}, 0))
	binary.LittleEndian.PutUint64(ent[8:], uint64(ro))
	tx.SetBytes(dirKeyOff(h, at), append(ent, tail...))
	h.nleaves++
	tx.Set32(l.hdr+xhNLeaves, uint32(h.nleaves))
	lf.n = half
	return h, lf, xleaf{idx: at, off: ro, n: rn, cap: l.leafCap(maxLeafBytes)}, nil
}

func (l xlist) growDir(tx *pram.Tx, h xhead) (xhead, error) {
	if h.dirCap*2 > maxDirEntries {
		return h, errListFull
	}
	return l.moveDir(tx, h, h.dirCap*2)
}

// moveDir moves the directory to a new allocation of ncap entries, which
// holds its h.nleaves.
func (l xlist) moveDir(tx *pram.Tx, h xhead, ncap int) (xhead, error) {
	nd, err := l.h.Alloc(tx, uint64(ncap*dirEntrySize))
	if err != nil {
		return h, err
	}
	nb := freshBytes(l.h, l.a, nd, 0, uint64(ncap*dirEntrySize))
	clear(nb)
	copy(nb, l.a.View(h.dir, uint64(h.nleaves*dirEntrySize)))
	tx.SetOff(l.hdr+xhDir, nd)
	tx.Set32(l.hdr+xhDirCap, uint32(ncap))
	if err := l.h.Free(tx, h.dir); err != nil {
		return h, err
	}
	h.dir, h.dirCap = nd, ncap
	return h, nil
}

// remove deletes the record at c.
func (l xlist) remove(tx *pram.Tx, c xcur) error {
	h, err := l.head()
	if err != nil {
		return err
	}
	lf := c.leaf
	tx.Move(l.recOff(lf, c.i), l.recOff(lf, c.i+1), uint64((lf.n-c.i-1)*l.recBytes()))
	lf.n--
	tx.Set32(lf.off, uint32(lf.n))
	tx.Set64(l.hdr+xhCount, h.count-1)
	if lf.n == 0 {
		return l.dropLeaf(tx, h, lf)
	}
	if c.i == 0 {
		tx.Set64(dirKeyOff(h, lf.idx), l.key(lf, 0))
	}
	// Merge with the next leaf when both together fill at most half of this
	// one, so that a list that shrinks does not keep many sparse leaves.
	if lf.idx+1 < h.nleaves {
		nl, err := l.leaf(h, lf.idx+1)
		if err != nil {
			return err
		}
		if lf.n+nl.n <= lf.cap/2 {
			tx.Move(l.recOff(lf, lf.n), l.recOff(nl, 0), uint64(nl.n*l.recBytes()))
			tx.Set32(lf.off, uint32(lf.n+nl.n))
			tx.Set32(nl.off, 0)
			return l.dropLeaf(tx, h, nl)
		}
	}
	return l.shrinkLeaf(tx, h, lf)
}

// removeRange deletes every record whose key is in [lo, hi), calling fn on
// each first (an error from fn stops before anything of its leaf is
// removed). It shifts each leaf once, so its journal cost is about one leaf
// per leaf touched, not one per record.
func (l xlist) removeRange(tx *pram.Tx, lo, hi uint64, fn func(r rec) error) error {
	for lo < hi {
		h, err := l.head()
		if err != nil || h.nleaves == 0 {
			return err
		}
		c, ok, err := l.seekGE(lo)
		if err != nil || !ok {
			return err
		}
		lf, i := c.leaf, c.i
		j := i
		for j < lf.n && l.key(lf, j) < hi {
			if fn != nil {
				if err := fn(l.get(xcur{lf, j})); err != nil {
					return err
				}
			}
			j++
		}
		if j == i {
			return nil
		}
		k := j - i
		tx.Move(l.recOff(lf, i), l.recOff(lf, j), uint64((lf.n-j)*l.recBytes()))
		lf.n -= k
		tx.Set32(lf.off, uint32(lf.n))
		tx.Set64(l.hdr+xhCount, h.count-uint64(k))
		if lf.n == 0 {
			if err := l.dropLeaf(tx, h, lf); err != nil {
				return err
			}
		} else {
			if i == 0 {
				tx.Set64(dirKeyOff(h, lf.idx), l.key(lf, 0))
			}
			if err := l.shrinkLeaf(tx, h, lf); err != nil {
				return err
			}
		}
	}
	return nil
}

// dropLeaf frees an empty leaf and removes its directory entry.
func (l xlist) dropLeaf(tx *pram.Tx, h xhead, lf xleaf) error {
	if err := l.h.Free(tx, lf.off); err != nil {
		return err
	}
	if h.nleaves == 1 {
		if err := l.h.Free(tx, h.dir); err != nil {
			return err
		}
		tx.SetOff(l.hdr+xhDir, 0)
		tx.Set32(l.hdr+xhNLeaves, 0)
		tx.Set32(l.hdr+xhDirCap, 0)
		return nil
	}
	tx.Move(dirKeyOff(h, lf.idx), dirKeyOff(h, lf.idx+1), uint64((h.nleaves-lf.idx-1)*dirEntrySize))
	h.nleaves--
	tx.Set32(l.hdr+xhNLeaves, uint32(h.nleaves))
	return l.shrinkDir(tx, h)
}

// shrinkDir moves a directory that dropped leaves left at most a quarter
// full to an allocation half its size, as shrinkLeaf does for a leaf (and,
// like it, leaves the directory as it is when the arena has no room).
func (l xlist) shrinkDir(tx *pram.Tx, h xhead) error {
	ncap := h.dirCap / 2
	if ncap < minDirEntries || 2*h.nleaves > ncap {
		return nil
	}
	_, err := l.moveDir(tx, h, ncap)
	if errors.Is(err, alloc.ErrNoSpace) {
		return nil
	}
	return err
}

// destroy frees every allocation of the list and empties it.
func (l xlist) destroy(tx *pram.Tx) error {
	h, err := l.head()
	if err != nil {
		return err
	}
	if h.nleaves == 0 {
		return nil
	}
	for i := 0; i < h.nleaves; i++ {
		lf, err := l.leaf(h, i)
		if err != nil {
			return err
		}
		if err := l.h.Free(tx, lf.off); err != nil {
			return err
		}
	}
	if err := l.h.Free(tx, h.dir); err != nil {
		return err
	}
	l.initHeader(tx)
	return nil
}

// live reports an error unless the list's directory and leaves are live
// heap allocations.
func (l xlist) live() error {
	h, err := l.head()
	if err != nil || h.nleaves == 0 {
		return err
	}
	if _, err := l.h.SizeOf(h.dir); err != nil {
		return l.corrupt("directory %d: %v", h.dir, err)
	}
	for i := 0; i < h.nleaves; i++ {
		lf, err := l.leaf(h, i)
		if err != nil {
			return err
		}
		if _, err := l.h.SizeOf(lf.off); err != nil {
			return l.corrupt("leaf %d at %d: %v", i, lf.off, err)
		}
	}
	return nil
}

// walk calls fn for every record in order until fn returns false.
func (l xlist) walk(fn func(r rec) bool) error {
	c, ok, err := l.first()
	for ok && err == nil {
		if !fn(l.get(c)) {
			return nil
		}
		c, ok, err = l.next(c)
	}
	return err
}

// check marks the list's allocations and verifies its structure: leaves
// non-empty, keys strictly increasing, directory keys equal to the leaves'
// first keys, the count right. It never panics on a damaged arena.
func (l xlist) check(m *alloc.Checker) []error {
	h, err := l.head()
	if err != nil {
		return []error{err}
	}
	if h.nleaves == 0 {
		if h.dir != 0 {
			return []error{l.corrupt("empty list with directory %d", h.dir)}
		}
		return nil
	}
	var errs []error
	m.Mark(h.dir, l.what+" directory")
	var total uint64
	var prev uint64
	for i := 0; i < h.nleaves; i++ {
		lf, err := l.leaf(h, i)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		m.Mark(lf.off, l.what+" leaf")
		if dk := l.a.U64(dirKeyOff(h, i)); dk != l.key(lf, 0) {
			errs = append(errs, l.corrupt("directory key %d of leaf %d, leaf starts at %d", dk, i, l.key(lf, 0)))
		}
		for j := 0; j < lf.n; j++ {
			k := l.key(lf, j)
			if total > 0 && k <= prev {
				errs = append(errs, l.corrupt("key %d after %d (leaf %d slot %d)", k, prev, i, j))
			}
			prev = k
			total++
		}
	}
	if total != h.count {
		errs = append(errs, l.corrupt("count %d, found %d records", h.count, total))
	}
	return errs
}
