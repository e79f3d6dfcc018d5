package diskstore

import (
	"conquest/pram"
)

// Preallocation the file did not use, inside its size.
//
// A write that extends a file's mapped end takes disk blocks ahead of it
// (allocFor). Trim gives back those past the end of the file at its last
// close; those inside the file's size stay mapped, so a file truncated up
// (sparse) and then written from its start kept up to MaxExtent of blocks
// it never wrote (a 1-byte write at offset 0 held 1 MiB, ext4 4 KiB).
// The store remembers, per file and in memory only, the window of file
// blocks the last preallocations covered; DropPrealloc, called by the core
// after the last close, unmaps the blocks of that window that are still
// unwritten (checksum 0): runs that end or start a segment shorten it,
// runs inside one split it (a segment record each, as far as the journal
// allows; before session 45 only the runs that ended a segment went, so a
// file written with holes between its writes kept blocks in them). A fallocate (Allocate) over the window forgets it: the
// blocks it reserves must stay reserved. A crash forgets the window too,
// which only keeps the blocks.

// dropRoom is the journal room DropPrealloc leaves for the rest of its
// Tx, besides releaseCost for each extent it unmapped (their release to
// the free map): it stops unmapping below that.
func dropRoom(a *pram.Arena) uint64 { return min(32<<10, a.Geometry().JournalLen/4) }

const releaseCost = 256 // journal bytes to release one extent, at most

// notePrealloc records that file blocks [ahead, end) were taken ahead of a
// write to blocks [from, ahead). The window joins the one remembered when
// they touch, or when only the write's blocks, holes and written blocks
// lie between them (a file written forward with holes between its writes,
// as `cp --sparse` writes, or a write the kernel split in two): written
// blocks stay (DropPrealloc takes only unwritten ones) and a hole has
// nothing to take, but blocks fallocate reserved between them would be
// taken, so a gap with an unwritten block mapped keeps the windows apart
// (the new one replaces the old).
// Preconditions: no concurrent call with another *pram.Tx (the write's).
func (s *Store) notePrealloc(seg pram.Off, from, ahead, end uint64) {
	s.mu.Lock()
	pre := s.fileLocked(seg).pre
	s.mu.Unlock()
	fb := ahead
	if pre[1] > pre[0] && end >= pre[0] {
		start := min(from, ahead)
		if start <= pre[1] || s.noUnwritten(seg, pre[1], start) {
			fb, end = min(fb, pre[0]), max(end, pre[1])
		}
	}
	s.mu.Lock()
	s.fileLocked(seg).pre = [2]uint64{fb, end}
	s.mu.Unlock()
}

// noUnwritten reports whether file blocks [fb, end) hold no block that
// is mapped but unwritten (checksum 0): only holes and written blocks.
func (s *Store) noUnwritten(seg pram.Off, fb, end uint64) bool {
	for fb < end {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return false
		}
		n := min(sp.n, end-fb)
		if sp.disk != 0 {
			if _, found, err := s.firstSum(seg, fb, n, false); err != nil || found {
				return false
			}
		}
		fb += n
	}
	return true
}

// forgetPrealloc drops the remembered window if it overlaps [fb, end).
func (s *Store) forgetPrealloc(seg pram.Off, fb, end uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if f := s.files[seg]; f != nil && fb < f.pre[1] && end > f.pre[0] {
		f.pre = [2]uint64{}
	}
}

// PreallocSegs returns the files for which a window is remembered.
func (s *Store) PreallocSegs() []pram.Off {
	s.mu.Lock()
	defer s.mu.Unlock()
	var out []pram.Off
	for seg, f := range s.files {
		if f.pre[1] > f.pre[0] {
			out = append(out, seg)
		}
	}
	return out
}

// HasPrealloc reports whether a window is remembered for seg inside its
// first size bytes: whether DropPrealloc may have something to do. (A file
// growing from its end has its window past the end: Trim's.)
func (s *Store) HasPrealloc(seg pram.Off, size int64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.files[seg]
	return f != nil && f.pre[1] > f.pre[0] && size > 0 && f.pre[0] < (uint64(size)+s.bs-1)/s.bs
}

// DropPrealloc unmaps and frees the blocks taken ahead of writes that the
// file has not written, inside its first size bytes (Trim frees those
// past it at the last close; MaxFileSize takes them too): every run of
// unwritten blocks in the remembered window, also inside a segment (a
// file written with holes between its writes, as `cp --sparse` writes,
// kept those until session 45), as far as the journal holds the records
// that the splits take; then it keeps the rest of the window for the
// next call (HasPrealloc: the core calls it again, each time in a Tx of
// its own). Nothing visible changes (unwritten blocks read as zeros, as
// holes do, and beyond the end nothing is read). Otherwise it forgets the
// window. Call it after
// the last close, or for every file when the disk is full, in a
// transaction of its own: it may fail for lack of arena space to record
// the freed extents, which only keeps the blocks.
func (s *Store) DropPrealloc(tx *pram.Tx, seg pram.Off, size int64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	if size < 0 || size > MaxFileSize {
		return nil
	}
	s.mu.Lock()
	f := s.files[seg]
	var pre [2]uint64
	if f != nil && f.empty() { // gathered data not written yet: leave it
		pre, f.pre = f.pre, [2]uint64{}
	}
	s.mu.Unlock()
	a, b := pre[0], min(pre[1], (uint64(size)+s.bs-1)/s.bs)
	var xs []extent
	var sums [64]uint64
	var rest [2]uint64 // the part of the window left for the next call
	defer func() {
		if rest[1] > rest[0] {
			s.mu.Lock()
			if f := s.fileLocked(seg); f.pre[1] <= f.pre[0] {
				f.pre = rest
			}
			s.mu.Unlock()
		}
	}()
	for fb := a; fb < b; {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return err
		}
		end := fb + min(sp.n, b-fb)
		if sp.disk == 0 {
			fb = end // a hole
			continue
		}
		// Unmap each run of unwritten blocks of [fb, end). One that ends
		// the segment (or starts it) shortens it; one inside it splits
		// it, which takes a segment record: stop while the journal still
		// has room for the rest of the Tx.
		for i := fb; i < end; {
			n := min(end-i, uint64(len(sums)))
			if err := s.getSums(seg, i, sums[:n]); err != nil {
				return err
			}
			j := uint64(0)
			for j < n && sums[j] != 0 {
				j++
			}
			if j == n {
				i += n
				continue
			}
			r0 := i + j // an unwritten run starts here; find its end
			r1 := r0
			for r1 < end {
				m := min(end-r1, uint64(len(sums)))
				if err := s.getSums(seg, r1, sums[:m]); err != nil {
					return err
				}
				k := uint64(0)
				for k < m && sums[k] == 0 {
					k++
				}
				r1 += k
				if k < m {
					break
				}
			}
			if tx.Room() < dropRoom(s.a)+uint64(len(xs)+1)*releaseCost {
				rest = [2]uint64{r0, pre[1]} // for the next call
				fb = b
				break
			}
			got, err := s.unmapRange(tx, seg, r0, r1)
			if err != nil {
				return err
			}
			xs = append(xs, got...)
			i = r1
		}
		fb = max(fb, end)
	}
	if len(xs) == 0 {
		return nil
	}
	s.bump(seg)
	return s.release(tx, xs)
}
