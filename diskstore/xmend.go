package diskstore

import (
	"errors"
	"fmt"
	"strings"

	"conquest/pram"
)

// mend repairs an xlist whose structure check fails when the damage is
// confined to fields that follow from the rest, and changes nothing
// otherwise (ErrCorrupt). What follows from what:
//
//   - the record width: a constant of the list's kind;
//   - the directory's capacity: the size of its allocation;
//   - a leaf's capacity: the size of its allocation;
//   - the directory's keys: the first keys of the leaves;
//   - the header's record count, when impossible (more than the leaves
//     hold): the sum of the leaves' counts; and a single leaf's count that
//     is impossible, from the header's count and the other leaves';
//   - a directory or leaf pointer that is no allocation, when exactly one
//     pointer one byte away from it (a flipped bit, an overwritten byte) is
//     a directory whose leaves are allocations, or a leaf starting with the
//     key the directory records.
//
// The number of leaves must be sound, and the records themselves are trusted: the mended list
// must then pass the full check (keys strictly increasing across leaves),
// or the changes are rolled back by the caller's Abort. It returns what it
// changed.
func (l xlist) mend(tx *pram.Tx) (string, error) {
	refuse := func(format string, args ...any) (string, error) {
		return "", l.corrupt("cannot be mended: "+format, args...)
	}
	if !l.a.InHeap(l.hdr, xlistHeaderSize) || l.hdr%8 != 0 {
		return refuse("header out of range")
	}
	var did []string
	if w := l.a.U32(l.hdr + xhWords); int(w) != l.words {
		tx.Set32(l.hdr+xhWords, uint32(l.words))
		did = append(did, fmt.Sprintf("record width %d→%d", w, l.words))
	}
	dir := pram.Off(l.a.U64(l.hdr + xhDir))
	nleaves := int(l.a.U32(l.hdr + xhNLeaves))
	count := l.a.U64(l.hdr + xhCount)
	if nleaves == 0 {
		if dir != 0 || count != 0 {
			return refuse("no leaves, directory %d, %d records", dir, count)
		}
		return strings.Join(did, ", "), l.checkMended(did)
	}
	dsize, err := l.h.SizeOf(dir)
	if err != nil || dir%8 != 0 {
		// A pointer one byte away from a directory whose leaves are all
		// allocations (the full check after mending must pass too).
		alt, ok := nearPointer(dir, func(c pram.Off) bool {
			size, err := l.h.SizeOf(c)
			if err != nil || c%8 != 0 || int(size/dirEntrySize) < nleaves {
				return false
			}
			for i := range nleaves {
				if _, err := l.h.SizeOf(pram.Off(l.a.U64(c + pram.Off(i*dirEntrySize+8)))); err != nil {
					return false
				}
			}
			return true
		})
		if !ok {
			return refuse("directory at %d is no allocation (%v)", dir, err)
		}
		tx.Set64(l.hdr+xhDir, uint64(alt))
		did = append(did, fmt.Sprintf("directory pointer %d→%d (one byte)", dir, alt))
		dir = alt
		dsize, _ = l.h.SizeOf(dir)
	}
	dirCap := min(int(dsize/dirEntrySize), maxDirEntries)
	if nleaves > dirCap {
		return refuse("%d leaves in a directory of %d entries", nleaves, dirCap)
	}
	if c := int(l.a.U32(l.hdr + xhDirCap)); c != dirCap {
		tx.Set32(l.hdr+xhDirCap, uint32(dirCap))
		did = append(did, fmt.Sprintf("directory capacity %d→%d", c, dirCap))
	}
	h := xhead{dir: dir, nleaves: nleaves, dirCap: dirCap}
	type leafInfo struct {
		off    pram.Off
		n, cap int
	}
	leaves := make([]leafInfo, nleaves)
	var sum uint64
	bad := -1
	for i := range leaves {
		off := pram.Off(l.a.U64(dirLeafOff(h, i)))
		size, err := l.h.SizeOf(off)
		if err != nil || off%8 != 0 || size < leafHeaderSize+uint64(l.recBytes()) {
			// A pointer one byte away from a leaf whose first key is the
			// one the directory records for it.
			key := l.a.U64(dirKeyOff(h, i))
			alt, ok := nearPointer(off, func(c pram.Off) bool {
				size, err := l.h.SizeOf(c)
				return err == nil && c%8 == 0 && size >= leafHeaderSize+uint64(l.recBytes()) &&
					l.a.U32(c) >= 1 && l.a.U64(c+leafHeaderSize) == key
			})
			if !ok {
				return refuse("leaf %d at %d is no allocation (%v)", i, off, err)
			}
			tx.Set64(dirLeafOff(h, i), uint64(alt))
			did = append(did, fmt.Sprintf("leaf %d pointer %d→%d (one byte)", i, off, alt))
			off = alt
			size, _ = l.h.SizeOf(off)
		}
		lf := leafInfo{off: off, cap: min(l.leafCap(size), l.leafCap(maxLeafBytes)), n: int(l.a.U32(off))}
		if c := int(l.a.U32(off + 4)); c != lf.cap {
			tx.Set32(off+4, uint32(lf.cap))
			did = append(did, fmt.Sprintf("leaf %d capacity %d→%d", i, c, lf.cap))
		}
		if lf.n < 1 || lf.n > lf.cap {
			if bad >= 0 {
				return refuse("the counts of leaves %d and %d are both impossible", bad, i)
			}
			bad = i
		} else {
			sum += uint64(lf.n)
		}
		leaves[i] = lf
	}
	if bad >= 0 {
		lf := &leaves[bad]
		if count <= sum || count-sum > uint64(lf.cap) {
			return refuse("leaf %d's count %d is impossible, and the list's count %d does not tell it", bad, lf.n, count)
		}
		n := int(count - sum)
		tx.Set32(lf.off, uint32(n))
		did = append(did, fmt.Sprintf("leaf %d count %d→%d", bad, lf.n, n))
		lf.n = n
		sum = count
	}
	if count != sum {
		// Slots past a leaf's count keep stale records, so a count within
		// the leaves' room could be right and a leaf's count wrong: only
		// an impossible one is replaced.
		var room uint64
		for _, lf := range leaves {
			room += uint64(lf.cap)
		}
		if count <= room {
			return refuse("the list's count %d disagrees with its leaves' %d, and neither is impossible", count, sum)
		}
		tx.Set64(l.hdr+xhCount, sum)
		did = append(did, fmt.Sprintf("record count %d→%d", count, sum))
	}
	for i, lf := range leaves {
		first := l.a.U64(lf.off + leafHeaderSize)
		if k := l.a.U64(dirKeyOff(h, i)); k != first {
			if l.keyFits != nil && lf.n > 0 {
				if r := l.get(xcur{leaf: xleaf{idx: i, off: lf.off, n: lf.n, cap: lf.cap}, i: 0}); l.keyFits(r, k) && !l.keyFits(r, first) {
					tx.Set64(lf.off+leafHeaderSize, k)
					did = append(did, fmt.Sprintf("leaf %d's first key %d→%d (the record fits the directory's key)", i, first, k))
					continue
				}
			}
			tx.Set64(dirKeyOff(h, i), first)
			did = append(did, fmt.Sprintf("directory key %d %d→%d", i, k, first))
		}
	}
	return strings.Join(did, ", "), l.checkMended(did)
}

// nearPointer returns the one pointer that differs from p in one byte (a
// flipped bit, or a byte overwritten) and that ok accepts; false if none or
// more than one does (then nothing tells which).
func nearPointer(p pram.Off, ok func(pram.Off) bool) (pram.Off, bool) {
	var found pram.Off
	n := 0
	for at := 0; at < 64; at += 8 {
		for v := range pram.Off(256) {
			c := p&^(0xff<<at) | v<<at
			if c != p && ok(c) {
				found = c
				n++
			}
		}
	}
	return found, n == 1
}

// checkMended runs the structure check on the mended list (tx's stores are
// already in the arena).
func (l xlist) checkMended(did []string) error {
	if len(did) == 0 {
		return l.corrupt("cannot be mended: no field that follows from the rest is wrong")
	}
	if errs := l.check(l.h.NewChecker()); len(errs) > 0 {
		return fmt.Errorf("%w (after mending: %s)", errors.Join(errs...), strings.Join(did, ", "))
	}
	return nil
}

// MendFileList repairs a *FileListError by mending the list named list
// (FileSegments, FileSums or FileUnsynced) of seg (see xlist.mend): no
// record is lost. It fails with ErrCorrupt, having changed nothing once
// the caller aborts tx, when the damage is elsewhere. It returns what it
// changed.
func (s *Store) MendFileList(tx *pram.Tx, seg pram.Off, list string) (string, error) {
	if err := s.validSeg(seg); err != nil {
		return "", err
	}
	var l xlist
	switch list {
	case FileSegments:
		l = s.segs(seg)
	case FileSums:
		l = s.sums(seg)
	case FileUnsynced:
		l = s.unsyncedOf(seg)
	default:
		return "", fmt.Errorf("%w: no list %q", ErrCorrupt, list)
	}
	did, err := l.mend(tx)
	if err == nil {
		s.bump(seg) // cached reads of the file are stale
	}
	return did, err
}
