package diskstore

import (
	"fmt"

	"conquest/pram"
)

// A segment's count of blocks damaged.
//
// A segment list keeps, beside its segments, the count of blocks they map
// (+24). When the two disagree, either that count is damaged (SetSegBlocks
// sets it from the segments) or one segment's count is. A corruption
// review changed one segment's count: raised by one, the file took a disk
// block of another file (reported as used twice, never repaired); lowered,
// the repair cleared the checksums of the blocks the segment no longer
// mapped and freed them, losing data that the arena still described. The
// list's count is then the witness, as a checksum page's check word is:
//
//   - the segments map δ blocks fewer than it says: the one segment whose
//     next δ file blocks are unmapped, lie on the disk right after it, and
//     all record checksums that their data verifies (seeded per file and
//     block: no other file's data does) lost δ from its count;
//   - δ blocks more: the one segment whose last δ blocks record no
//     checksum or one their data fails gained δ.
//
// Only a single such segment is taken (else SegBlocksError, as before);
// the walk reports it as a *SegCountError and SetSegCount puts it back.

// maxSegCountMend bounds the blocks a mend reads (a count damaged by more
// is left to SetSegBlocks).
const maxSegCountMend = 1 << 12

// SegCountError is one segment whose count of blocks differs from what
// the segment list's count and the checksums of the blocks around it show
// (see segcount.go). Store.SetSegCount repairs it. It is ErrCorrupt.
type SegCountError struct {
	Owner     uint64
	Seg       pram.Off
	FileBlock uint64 // the segment's first file block (its key)
	Disk      Block  // its first disk block
	Count     uint64 // its count
	Want      uint64 // the count the evidence shows
}

func (e *SegCountError) Error() string {
	return fmt.Sprintf("%v: inode %d: the segment at file block %d (disk block %d) counts %d blocks; the segment list's count and the blocks' checksums show %d",
		ErrCorrupt, e.Owner, e.FileBlock, e.Disk, e.Count, e.Want)
}

// Unwrap returns ErrCorrupt.
func (e *SegCountError) Unwrap() error { return ErrCorrupt }

// segCountMend finds the one segment of segs (seg's, in file order) whose
// count, changed by counted - mapped, agrees with the blocks' checksums.
func (s *Store) segCountMend(seg pram.Off, segs []segment, counted, mapped uint64) (*SegCountError, bool) {
	var found *SegCountError
	n := 0
	for i, x := range segs {
		if want, ok := s.segCountFits(seg, segs, i, counted, mapped); ok {
			found = &SegCountError{Owner: s.owner(seg), Seg: seg, FileBlock: x.fb, Disk: x.disk, Count: x.count, Want: want}
			n++
		}
	}
	return found, n == 1
}

// segCountFits reports whether segment i of segs, its count changed by
// counted - mapped, agrees with the checksums of the blocks it would gain
// or lose, and returns that count.
func (s *Store) segCountFits(seg pram.Off, segs []segment, i int, counted, mapped uint64) (uint64, bool) {
	x := segs[i]
	seed := s.a.U64(seg + slOffSeed)
	buf := AlignedBuffer(int(s.bs))
	// verifies says whether file block fb, in disk block d, records a
	// checksum its data verifies.
	verifies := func(fb uint64, d Block) bool {
		var sum [1]uint64
		if s.getSums(seg, fb, sum[:]) != nil || sum[0] == 0 {
			return false
		}
		if _, err := s.dev.ReadAt(buf, int64(uint64(d)*s.bs)); err != nil {
			return false
		}
		return s.blockSum(seed, fb, buf) == sum[0]
	}
	switch {
	case counted > mapped && counted-mapped <= maxSegCountMend:
		d := counted - mapped
		if i+1 < len(segs) && segs[i+1].fb < x.end()+d {
			return 0, false // the file blocks it would gain are mapped
		}
		if uint64(x.disk)+x.count+d > s.super.Blocks {
			return 0, false
		}
		for j := range d {
			if !verifies(x.end()+j, x.disk+Block(x.count+j)) {
				return 0, false
			}
		}
		return x.count + d, true
	case mapped > counted && mapped-counted < x.count && mapped-counted <= maxSegCountMend:
		d := mapped - counted
		for j := x.count - d; j < x.count; j++ {
			if verifies(x.fb+j, x.disk+Block(j)) {
				return 0, false // a block it would lose holds its data
			}
		}
		return x.count - d, true
	}
	return 0, false
}

// SetSegCount repairs a *SegCountError: it sets the count of seg's segment
// at file block fb from count to want, once the evidence still holds (else
// ErrCorrupt, nothing changed), and clears the checksums the blocks it
// drops recorded. The segment list's count is then right again.
func (s *Store) SetSegCount(tx *pram.Tx, seg pram.Off, fb, count, want uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	var segs []segment
	var mapped uint64
	if err := s.segs(seg).walk(func(r rec) bool {
		segs = append(segs, segment{r[0], Block(r[1]), r[2]})
		mapped += r[2]
		return true
	}); err != nil {
		return err
	}
	counted := s.a.U64(seg + slOffBlocks)
	i := -1
	for j, x := range segs {
		if x.fb == fb && x.count == count {
			i = j
		}
	}
	if i < 0 {
		return fmt.Errorf("%w: inode %d has no segment of %d blocks at file block %d", ErrCorrupt, s.owner(seg), count, fb)
	}
	if got, ok := s.segCountFits(seg, segs, i, counted, mapped); !ok || got != want {
		return fmt.Errorf("%w: inode %d: the segment at file block %d: its blocks' checksums no longer show a count of %d", ErrCorrupt, s.owner(seg), fb, want)
	}
	l := s.segs(seg)
	c, ok, err := l.seekLE(fb)
	if err != nil || !ok {
		return fmt.Errorf("%w: inode %d: the segment at file block %d: %v", ErrCorrupt, s.owner(seg), fb, err)
	}
	x := segs[i]
	if err := l.set(tx, c, rec{x.fb, uint64(x.disk), want}); err != nil {
		return err
	}
	if want < count {
		if err := s.clearSums(tx, seg, x.fb+want, x.fb+count); err != nil {
			return err
		}
	}
	s.bump(seg)
	return nil
}
