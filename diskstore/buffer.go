package diskstore

import (
	"slices"

	"conquest/pram"
)

// run is a range of written bytes not yet on disk.
type run struct {
	off  int64
	data []byte
}

func (r run) end() int64 { return r.off + int64(len(r.data)) }

// fileState is the volatile state of one large file: its write buffer (the
// gathered writes) and the generation that readahead caches are checked
// against. Guarded by Store.mu.
type fileState struct {
	runs  []run     // sorted, disjoint and not adjacent
	bytes int       // total length of runs
	gen   uint64    // changes whenever the file's mapping or checksums change
	pre   [2]uint64 // file blocks taken ahead of writes, maybe unused (prealloc.go)
}

func (f *fileState) empty() bool { return len(f.runs) == 0 }

// end is one past the last buffered byte (0 if none).
func (f *fileState) end() int64 {
	if len(f.runs) == 0 {
		return 0
	}
	return f.runs[len(f.runs)-1].end()
}

// fileLocked returns the state of seg, creating it.
// Preconditions: s.mu held.
func (s *Store) fileLocked(seg pram.Off) *fileState {
	fs := s.files[seg]
	if fs == nil {
		fs = &fileState{}
		s.files[seg] = fs
		s.gen++
		fs.gen = s.gen
	}
	return fs
}

// bump marks a change of seg's mapping or checksums: readahead data fetched
// before it is stale. Generations come from one store-wide counter, so they
// never repeat even if the state is dropped and created again.
func (s *Store) bump(seg pram.Off) {
	s.mu.Lock()
	s.bumpLocked(seg)
	s.mu.Unlock()
}

func (s *Store) bumpLocked(seg pram.Off) {
	fs := s.fileLocked(seg)
	s.gen++
	fs.gen = s.gen
	s.onAbortLocked(func() { s.gen++; fs.gen = s.gen })
}

// genOf is seg's current generation.
func (s *Store) genOf(seg pram.Off) uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fs := s.files[seg]; fs != nil {
		return fs.gen
	}
	return 0
}

// setRunsLocked replaces fs's runs, keeping the byte counts right and
// recording the undo.
// Preconditions: s.mu held.
func (s *Store) setRunsLocked(fs *fileState, runs []run) {
	old, oldBytes := fs.runs, fs.bytes
	n := 0
	for _, r := range runs {
		n += len(r.data)
	}
	fs.runs, fs.bytes = runs, n
	s.buffered += n - oldBytes
	s.onAbortLocked(func() {
		s.buffered += oldBytes - fs.bytes
		fs.runs, fs.bytes = old, oldBytes
	})
}

// addLocked copies data at off into seg's write buffer, merging it with
// the runs it overlaps or touches.
// Preconditions: s.mu held.
func (s *Store) addLocked(seg pram.Off, off int64, data []byte) *fileState {
	fs := s.fileLocked(seg)
	end := off + int64(len(data))
	rs := fs.runs
	i, _ := slices.BinarySearchFunc(rs, off, func(r run, off int64) int { // first run ending at or after off
		if r.end() < off {
			return -1
		}
		return 1
	})
	j := i
	for j < len(rs) && rs[j].off <= end {
		j++
	}
	runs := make([]run, 0, len(rs)+1)
	runs = append(runs, rs[:i]...)
	switch {
	case j-i == 1 && rs[i].end() == off:
		// Pure append: extend in place. Older views of the run keep their
		// length, so an undo still sees the bytes it had.
		runs = append(runs, run{rs[i].off, append(rs[i].data, data...)})
	case j == i:
		runs = append(runs, run{off, append([]byte(nil), data...)})
	default:
		start, stop := min(off, rs[i].off), max(end, rs[j-1].end())
		b := make([]byte, stop-start, (stop-start)*5/4)
		for _, r := range rs[i:j] {
			copy(b[r.off-start:], r.data)
		}
		copy(b[off-start:], data)
		runs = append(runs, run{start, b})
	}
	runs = append(runs, rs[j:]...)
	s.setRunsLocked(fs, runs)
	return fs
}

// dropBufferLocked discards buffered bytes of seg at or after from.
// Preconditions: s.mu held.
func (s *Store) dropBufferLocked(seg pram.Off, from int64) {
	fs := s.files[seg]
	if fs == nil || fs.end() <= from {
		return
	}
	var runs []run
	for _, r := range fs.runs {
		switch {
		case r.end() <= from:
			runs = append(runs, r)
		case r.off < from:
			runs = append(runs, run{r.off, r.data[: from-r.off : from-r.off]})
		}
	}
	s.setRunsLocked(fs, runs)
}

// overlayLocked copies the buffered bytes of seg that fall in [off,
// off+len(p)) over p.
// Preconditions: s.mu held.
func (s *Store) overlayLocked(seg pram.Off, p []byte, off int64) {
	fs := s.files[seg]
	if fs == nil {
		return
	}
	end := off + int64(len(p))
	for _, r := range fs.runs {
		if r.end() <= off || r.off >= end {
			continue
		}
		lo, hi := max(r.off, off), min(r.end(), end)
		copy(p[lo-off:hi-off], r.data[lo-r.off:hi-r.off])
	}
}

// Buffered is the number of bytes of seg written but not yet on disk
// (GatherInMemory; always 0 in DurableOnProcessCrash mode once Write
// returns).
func (s *Store) Buffered(seg pram.Off) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fs := s.files[seg]; fs != nil {
		return fs.bytes
	}
	return 0
}

// BufferedEnd is one past the last buffered byte of seg (0 if none). The
// core uses it to keep a file's size covering data it has accepted.
func (s *Store) BufferedEnd(seg pram.Off) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fs := s.files[seg]; fs != nil {
		return fs.end()
	}
	return 0
}

// BufferedStart is the offset of the first buffered byte of seg
// (MaxFileSize if none): every byte before it is on disk or a hole.
func (s *Store) BufferedStart(seg pram.Off) int64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	if fs := s.files[seg]; fs != nil && len(fs.runs) > 0 {
		return fs.runs[0].off
	}
	return MaxFileSize
}
