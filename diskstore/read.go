package diskstore

import (
	"fmt"
	"math"

	"conquest/pram"
)

// ReadAt fills p with the file's bytes at off: gathered (buffered) data,
// data from disk verified against its checksums, zeros for holes and for
// blocks never written. The caller clips p to the file size. ra, if not nil,
// is the open handle's readahead state. A block whose data does not match
// its checksum fails the read with an error wrapping ErrIO and
// ErrDataChecksum, logged with the file, offset and disk block; wrong bytes
// are never returned.
//
// Preconditions: no concurrent call with a *pram.Tx (the core's read lock).
func (s *Store) ReadAt(seg pram.Off, p []byte, off int64, ra *Readahead) (int, error) {
	if err := s.checkRange(seg, off, len(p)); err != nil {
		return 0, err
	}
	if len(p) == 0 {
		return 0, nil
	}
	var err error
	if ra != nil {
		err = ra.read(seg, p, off)
	} else {
		err = s.readDisk(seg, p, off)
	}
	if err != nil {
		return 0, err
	}
	s.mu.Lock()
	s.overlayLocked(seg, p, off)
	s.mu.Unlock()
	return len(p), nil
}

// readDisk fills p with the file's data at off as the arena describes it
// (without buffered data). Blocks in the verified-block cache are copied
// from it; a block p covers only in part is read whole, verified and
// cached (the next small read of it needs no device read and no hash);
// runs of blocks p covers whole are read straight into p.
func (s *Store) readDisk(seg pram.Off, p []byte, off int64) error {
	bs := s.bs
	end := uint64(off) + uint64(len(p))
	fb := uint64(off) / bs
	fbEnd := (end + bs - 1) / bs
	seed := s.a.U64(seg + slOffSeed)
	var sumsBuf [32]uint64
	checked := uint64(math.MaxUint64) // the checksum page last checked
	for fb < fbEnd {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return err
		}
		n := min(sp.n, fbEnd-fb)
		if sp.disk == 0 {
			lo, hi := max(fb*bs, uint64(off)), min((fb+n)*bs, end)
			clear(p[lo-uint64(off) : hi-uint64(off)])
			fb += n
			continue
		}
		sums := sumsBuf[:0]
		if n > uint64(len(sumsBuf)) {
			sums = make([]uint64, n)
		}
		sums = sums[:n]
		if err := s.getSums(seg, fb, sums); err != nil {
			return err
		}
		// whole reports that p covers block i entirely; dst is p's part of
		// blocks [i, j).
		whole := func(i uint64) bool { return (fb+i)*bs >= uint64(off) && (fb+i+1)*bs <= end }
		dst := func(i, j uint64) []byte {
			lo, hi := max((fb+i)*bs, uint64(off)), min((fb+j)*bs, end)
			return p[lo-uint64(off) : hi-uint64(off)]
		}
		for i := uint64(0); i < n; {
			disk := sp.disk + Block(i)
			at := max((fb+i)*bs, uint64(off)) - (fb+i)*bs // p's start within the block
			switch {
			case sums[i] == 0:
				// Never written, or zeros: the disk is not read, once the
				// page's check says the 0 is not damage (sumcheck.go).
				if base := (fb + i) &^ (sumsPerPage - 1); base != checked {
					if ok, _, err := s.checkPageOf(seg, fb+i); err != nil {
						return err
					} else if !ok {
						return s.lostSumErr(seg, fb+i, disk)
					}
					checked = base
				}
				clear(dst(i, i+1))
				i++
			case s.cache.get(seg, fb+i, seed, disk, sums[i], dst(i, i+1), at):
				i++
			case !whole(i):
				if err := s.readBlockCached(seg, fb+i, seed, disk, sums[i], dst(i, i+1), at); err != nil {
					return err
				}
				i++
			default:
				j := i + 1
				for j < n && sums[j] != 0 && whole(j) && !s.cache.has(seg, fb+j, seed, sp.disk+Block(j), sums[j]) {
					j++
				}
				if err := s.readVerified(seg, fb+i, disk, sums[i:j], dst(i, j)); err != nil {
					return err
				}
				i = j
			}
		}
		fb += n
	}
	return nil
}

// readBlockCached reads file block fb (disk block disk, checksum sum) whole,
// verifies it, puts it in the verified-block cache and copies bytes
// [at, at+len(dst)) of it into dst.
func (s *Store) readBlockCached(seg pram.Off, fb, seed uint64, disk Block, sum uint64, dst []byte, at uint64) error {
	bp := s.blocks.Get().(*[]byte)
	defer s.blocks.Put(bp)
	b := *bp
	if err := s.readVerified(seg, fb, disk, []uint64{sum}, b); err != nil {
		return err
	}
	s.cache.put(seg, fb, seed, disk, sum, b)
	copy(dst, b[at:])
	return nil
}

// readVerified reads len(sums) blocks of file block fb from disk into dst
// (len(sums) blocks) and checks each against its checksum.
func (s *Store) readVerified(seg pram.Off, fb uint64, disk Block, sums []uint64, dst []byte) error {
	bs := s.bs
	if _, err := s.dev.ReadAt(dst[:uint64(len(sums))*bs], int64(uint64(disk)*bs)); err != nil {
		return s.ioErr(fmt.Sprintf("inode %d: reading disk blocks [%d, %d)", s.owner(seg), disk, disk+Block(len(sums))), err)
	}
	if i := s.firstMismatch(seg, fb, sums, dst); i >= 0 {
		return s.sumErr(seg, fb+uint64(i), disk+Block(i))
	}
	return nil
}

// firstMismatch is the index of the first of the len(sums) blocks in dst
// (file blocks from fb) that does not match its checksum, or -1.
func (s *Store) firstMismatch(seg pram.Off, fb uint64, sums []uint64, dst []byte) int {
	seed := s.a.U64(seg + slOffSeed)
	for i, want := range sums {
		if s.blockSum(seed, fb+uint64(i), dst[uint64(i)*s.bs:uint64(i+1)*s.bs]) != want {
			return i
		}
	}
	return -1
}

// runVerifies is readVerified that neither counts, logs nor returns what
// fails: the checker reads a run of blocks at once and, only when the run
// fails, each of its blocks again (readVerified), so that each bad block
// is counted and logged once (fsck printed each twice, and the stats
// counted it twice).
func (s *Store) runVerifies(seg pram.Off, fb uint64, disk Block, sums []uint64, dst []byte) bool {
	n := uint64(len(sums)) * s.bs
	if _, err := s.dev.ReadAt(dst[:n], int64(uint64(disk)*s.bs)); err != nil {
		return false
	}
	return s.firstMismatch(seg, fb, sums, dst) < 0
}

// lostSumErr reports a mapped block without a checksum in a page that
// fails its check: its checksum may be lost to damage, so its zeros would
// be a guess. Counted, logged, returned as EIO, as a mismatch is.
func (s *Store) lostSumErr(seg pram.Off, fb uint64, disk Block) error {
	s.a.PutU64(s.st+stOffChecksumEr, s.a.U64(s.st+stOffChecksumEr)+1)
	if s.damaged.due(seg, fb) {
		s.o.Logf("diskstore: checksum page fails its check: inode %d, offset %d, disk block %d has no checksum, which may be lost: returning EIO (run `conquest fsck --repair`)",
			s.owner(seg), fb*s.bs, disk)
	}
	return fmt.Errorf("%w: %w: inode %d, offset %d, disk block %d: its checksum page fails its check", ErrIO, ErrDataChecksum, s.owner(seg), fb*s.bs, disk)
}

// sumErr reports a checksum mismatch: counted, logged, returned as EIO.
func (s *Store) sumErr(seg pram.Off, fb uint64, disk Block) error {
	s.a.PutU64(s.st+stOffChecksumEr, s.a.U64(s.st+stOffChecksumEr)+1)
	if s.damaged.due(seg, fb) { // once a minute per block
		s.o.Logf("diskstore: checksum mismatch: inode %d, offset %d, disk block %d: returning EIO",
			s.owner(seg), fb*s.bs, disk)
	}
	return fmt.Errorf("%w: %w: inode %d, offset %d, disk block %d", ErrIO, ErrDataChecksum, s.owner(seg), fb*s.bs, disk)
}
