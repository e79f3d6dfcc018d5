package diskstore

import (
	"conquest/pram"
)

// SEEK_DATA and SEEK_HOLE for a large file.
//
// A file's data is every mapped block whose checksum is not 0, and every
// buffered run; the rest is holes. A mapped block with checksum 0 was
// never written (space taken ahead of writes, or reserved by fallocate)
// or holds zeros, and ReadAt returns zeros for it without reading the
// device, so calling it a hole is exact: a reader that skips holes loses
// nothing. The core clips the answers to the file's size and says ENXIO
// past it.

// NextData returns the first offset at or after off that holds data, or
// MaxFileSize if none does.
//
// Preconditions: no concurrent call with a *pram.Tx (the core's read lock).
func (s *Store) NextData(seg pram.Off, off int64) (int64, error) {
	if err := s.checkRange(seg, off, 0); err != nil {
		return 0, err
	}
	found := int64(MaxFileSize)
	for fb := uint64(off) / s.bs; fb*s.bs < MaxFileSize; {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return 0, err
		}
		if sp.disk == 0 && sp.n > (MaxFileSize-fb*s.bs)/s.bs {
			break // a hole to the end of the address space
		}
		if sp.disk != 0 {
			i, ok, err := s.firstSum(seg, fb, sp.n, true)
			if err != nil {
				return 0, err
			}
			if ok {
				found = max(int64((fb+i)*s.bs), off)
				break
			}
		}
		fb += sp.n
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if fs := s.files[seg]; fs != nil {
		for _, r := range fs.runs {
			if r.end() > off {
				found = min(found, max(r.off, off))
				break // runs are sorted
			}
		}
	}
	return found, nil
}

// NextHole returns the first offset at or after off that holds no data
// (at most MaxFileSize).
//
// Preconditions: no concurrent call with a *pram.Tx (the core's read lock).
func (s *Store) NextHole(seg pram.Off, off int64) (int64, error) {
	if err := s.checkRange(seg, off, 0); err != nil {
		return 0, err
	}
	s.mu.Lock()
	var runs []run
	if fs := s.files[seg]; fs != nil {
		runs = append(runs, fs.runs...) // only offsets and lengths are read
	}
	s.mu.Unlock()
	pos := off
	for pos < MaxFileSize {
		moved := false
		fb := uint64(pos) / s.bs
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return 0, err
		}
		if sp.disk != 0 {
			i, ok, err := s.firstSum(seg, fb, sp.n, false)
			if err != nil {
				return 0, err
			}
			if !ok {
				i = sp.n // data to the end of the span
			}
			if i > 0 {
				pos, moved = int64(min((fb+i)*s.bs, MaxFileSize)), true
			}
		}
		for _, r := range runs {
			if r.off <= pos && pos < r.end() {
				pos, moved = r.end(), true
			}
		}
		if !moved {
			break
		}
	}
	return min(pos, MaxFileSize), nil
}

// firstSum returns the index of the first of the n blocks from fb whose
// checksum is not 0 (nonzero) or is 0 (!nonzero); ok is false if there is
// none.
func (s *Store) firstSum(seg pram.Off, fb, n uint64, nonzero bool) (i uint64, ok bool, err error) {
	var buf [sumsPerPage]uint64
	for i < n {
		k := min(n-i, sumsPerPage)
		sums := buf[:k]
		if err := s.getSums(seg, fb+i, sums); err != nil {
			return 0, false, err
		}
		for j, sum := range sums {
			if (sum != 0) == nonzero {
				return i + uint64(j), true, nil
			}
		}
		i += k
	}
	return 0, false, nil
}

// MappedRuns returns the runs of [0, size) that the file has storage for:
// mapped blocks, written or not (what fallocate reserved must stay
// reserved wherever the file goes), and buffered runs; sorted, disjoint.
//
// Preconditions: no concurrent call with a *pram.Tx (the core's lock).
func (s *Store) MappedRuns(seg pram.Off, size int64) ([][2]int64, error) {
	if err := s.checkRange(seg, 0, 0); err != nil {
		return nil, err
	}
	var runs [][2]int64
	add := func(lo, hi int64) {
		lo, hi = max(lo, 0), min(hi, size)
		if lo >= hi {
			return
		}
		if n := len(runs); n > 0 && lo <= runs[n-1][1] {
			runs[n-1][1] = max(runs[n-1][1], hi)
			return
		}
		runs = append(runs, [2]int64{lo, hi})
	}
	var mapped [][2]int64
	for fb := uint64(0); int64(fb*s.bs) < size; {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return nil, err
		}
		if sp.disk == 0 && sp.n > (MaxFileSize-fb*s.bs)/s.bs {
			break
		}
		if sp.disk != 0 {
			mapped = append(mapped, [2]int64{int64(fb * s.bs), int64((fb + sp.n) * s.bs)})
		}
		fb += sp.n
	}
	s.mu.Lock()
	var buffered [][2]int64
	if fs := s.files[seg]; fs != nil {
		for _, r := range fs.runs {
			buffered = append(buffered, [2]int64{r.off, r.end()})
		}
	}
	s.mu.Unlock()
	// Merge the two sorted lists.
	for i, j := 0, 0; i < len(mapped) || j < len(buffered); {
		if j == len(buffered) || i < len(mapped) && mapped[i][0] <= buffered[j][0] {
			add(mapped[i][0], mapped[i][1])
			i++
		} else {
			add(buffered[j][0], buffered[j][1])
			j++
		}
	}
	return runs, nil
}
