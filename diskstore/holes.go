package diskstore

import (
	"conquest/pram"
)

// PunchHole makes [off, off+n) of the file read as zeros (fallocate
// FALLOC_FL_PUNCH_HOLE): whole blocks inside the range are unmapped and
// freed, the partial blocks at its edges are rewritten with zeros
// (copy-on-write). Buffered data of the file is written first. The file
// size does not change (that is the core's).
func (s *Store) PunchHole(tx *pram.Tx, seg pram.Off, off, n int64) error {
	if err := s.checkRange(seg, off, int(min(n, MaxFileSize))); err != nil || n <= 0 {
		return err
	}
	if err := s.flushBuffer(tx, seg); err != nil {
		return err
	}
	bs := int64(s.bs)
	end := off + n
	fbA, fbB := (off+bs-1)/bs, end/bs // whole blocks [fbA, fbB)
	var edges []run
	if fbA > fbB { // inside one block
		edges = append(edges, run{off, make([]byte, n)})
	} else {
		if off < fbA*bs {
			edges = append(edges, run{off, make([]byte, fbA*bs-off)})
		}
		if end > fbB*bs {
			edges = append(edges, run{fbB * bs, make([]byte, end-fbB*bs)})
		}
	}
	if len(edges) > 0 {
		if err := s.writeRuns(tx, seg, edges); err != nil {
			return err
		}
	}
	if fbA >= fbB {
		return nil
	}
	xs, err := s.unmapRange(tx, seg, uint64(fbA), uint64(fbB))
	if err != nil {
		return err
	}
	if err := s.clearSums(tx, seg, uint64(fbA), uint64(fbB)); err != nil {
		return err
	}
	if err := s.dropUnsynced(tx, seg, uint64(fbA), uint64(fbB)); err != nil {
		return err
	}
	s.bump(seg)
	return s.release(tx, xs)
}

// Allocate reserves disk blocks for the holes of [off, off+n) of the file
// (fallocate mode 0 or FALLOC_FL_KEEP_SIZE): later writes there cannot fail
// for lack of space (except copy-on-write overwrites of written data). The
// blocks read as zeros. On ErrNoSpace the caller aborts tx, which returns
// what was taken.
func (s *Store) Allocate(tx *pram.Tx, seg pram.Off, off, n int64) error {
	if err := s.checkRange(seg, off, int(min(n, MaxFileSize))); err != nil || n <= 0 {
		return err
	}
	if n > MaxFileSize-off {
		return ErrFileTooBig
	}
	bs := s.bs
	fb, end := uint64(off)/bs, (uint64(off+n)+bs-1)/bs
	s.forgetPrealloc(seg, fb, end) // what it reserves stays reserved
	// Room for the checksums of what it reserves: a write there must not
	// need arena memory either (reserveSums).
	if err := s.reserveSums(tx, seg, fb, end); err != nil {
		return err
	}
	for fb < end {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return err
		}
		k := min(sp.n, end-fb)
		if sp.disk != 0 {
			fb += k
			continue
		}
		goal, err := s.goal(seg, fb)
		if err != nil {
			return err
		}
		for got := uint64(0); got < k; {
			x, err := s.allocGrowth(tx, k-got, goal)
			if err != nil {
				return err
			}
			if err := s.mapRange(tx, seg, fb+got, x.b, x.len()); err != nil {
				return err
			}
			got += x.len()
			goal = x.e
		}
		fb += k
	}
	s.bump(seg)
	return nil
}
