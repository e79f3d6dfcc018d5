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
// unwritten (checksum 0) and end their segment, which needs no new
// segment record. A fallocate (Allocate) over the window forgets it: the
// blocks it reserves must stay reserved. A crash forgets the window too,
// which only keeps the blocks.

// notePrealloc records that file blocks [fb, end) were taken ahead of a
// write. A window that touches the one remembered joins it.
func (s *Store) notePrealloc(seg pram.Off, fb, end uint64) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f := s.fileLocked(seg)
	if f.pre[1] > f.pre[0] && fb <= f.pre[1] && end >= f.pre[0] {
		fb, end = min(fb, f.pre[0]), max(end, f.pre[1])
	}
	f.pre = [2]uint64{fb, end}
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
// past it at the last close; MaxFileSize takes them too): of the
// remembered window, each segment's tail of unwritten blocks. Nothing
// visible changes (unwritten blocks read as zeros, as holes do, and
// beyond the end nothing is read). It forgets the window. Call it after
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
	for fb := a; fb < b; {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return err
		}
		end := fb + min(sp.n, b-fb)
		if sp.disk == 0 || end != fb+sp.n {
			fb = end // a hole, or a segment that goes on past the window
			continue
		}
		// The segment ends in the window: find where its unwritten tail
		// starts, reading its checksums backwards.
		tail := end
		for tail > fb {
			n := min(tail-fb, uint64(len(sums)))
			if err := s.getSums(seg, tail-n, sums[:n]); err != nil {
				return err
			}
			i := n
			for i > 0 && sums[i-1] == 0 {
				i--
			}
			tail -= n - i
			if i > 0 {
				break
			}
		}
		if tail < end {
			got, err := s.unmapRange(tx, seg, tail, end)
			if err != nil {
				return err
			}
			xs = append(xs, got...)
		}
		fb = end
	}
	if len(xs) == 0 {
		return nil
	}
	s.bump(seg)
	return s.release(tx, xs)
}
