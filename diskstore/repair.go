package diskstore

import (
	"fmt"
	"math"

	"conquest/pram"
)

// Repairs of what the consistency walk (Checker) reports, for
// `conquest fsck --repair`: each changes the store only through the caller's
// Tx, which the caller ends with Store.Commit or Store.Abort.

// ReclaimLeaked returns the leaked disk blocks r to the free map in tx: the
// repair of a *LeakedBlocksError. Only the caller knows that no file uses
// them (a consistency walk that reached every file found them leaked, and
// nothing changed since); ReclaimLeaked checks the rest: r lies on the
// disk's data blocks and no block of it is free or quarantined (else
// ErrCorrupt, nothing changed). The blocks are free, and may be reused, once
// tx commits (through Store.Commit). Extension of DESIGN.md.
func (s *Store) ReclaimLeaked(tx *pram.Tx, r BlockRange) error {
	x := extent{r.Begin, r.End}
	if x.b < 1 || x.e <= x.b || uint64(x.e) > s.super.Blocks {
		return fmt.Errorf("%w: reclaiming blocks [%d, %d) of a %d-block disk", ErrCorrupt, x.b, x.e, s.super.Blocks)
	}
	if q, ok, err := s.quarantineOverlap(x); err != nil {
		return err
	} else if ok {
		return fmt.Errorf("%w: reclaiming blocks [%d, %d), quarantined in [%d, %d)", ErrCorrupt, x.b, x.e, q.b, q.e)
	}
	s.mu.Lock()
	held := append(append([]extent(nil), s.quarantine...), s.heldInTx...)
	s.mu.Unlock()
	for _, q := range held {
		if q.b < x.e && x.b < q.e {
			return fmt.Errorf("%w: reclaiming blocks [%d, %d), freed or quarantined in this transaction in [%d, %d)",
				ErrCorrupt, x.b, x.e, q.b, q.e)
		}
	}
	return s.freeExtent(tx, x) // refuses blocks already free, before changing anything
}

// quarantineOverlap returns an extent of the persistent quarantine that
// overlaps x, if any.
func (s *Store) quarantineOverlap(x extent) (extent, bool, error) {
	l := s.quarantineList()
	if c, ok, err := l.seekLE(uint64(x.b)); err != nil {
		return extent{}, false, err
	} else if ok {
		if r := l.get(c); Block(r[1]) > x.b {
			return extent{Block(r[0]), Block(r[1])}, true, nil
		}
	}
	if c, ok, err := l.seekGE(uint64(x.b)); err != nil {
		return extent{}, false, err
	} else if ok {
		if r := l.get(c); Block(r[0]) < x.e {
			return extent{Block(r[0]), Block(r[1])}, true, nil
		}
	}
	return extent{}, false, nil
}

// SetFileCount sets the stats record's count of large files to n: the
// repair of a *FileCountError, n being its Reached. Only the caller knows
// that the walk reached every segment list (none is leaked in the arena).
// Extension of DESIGN.md.
func (s *Store) SetFileCount(tx *pram.Tx, n uint64) { tx.Set64(s.st+stOffFiles, n) }

// MappedEnd is the end, in bytes, of the last file block seg maps (0 if
// none): no disk data of the file lies beyond it.
func (s *Store) MappedEnd(seg pram.Off) (int64, error) {
	if err := s.validSeg(seg); err != nil {
		return 0, err
	}
	fb, err := s.mappedEnd(seg)
	return int64(fb * s.bs), err
}

// ClearStraySum repairs a *StraySumError: it zeroes the checksum of file
// block fb of seg, which must map no disk block (else ErrCorrupt, nothing
// changed).
func (s *Store) ClearStraySum(tx *pram.Tx, seg pram.Off, fb uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	sp, err := s.lookup(seg, fb)
	if err != nil {
		return err
	}
	if sp.disk != 0 {
		return fmt.Errorf("%w: inode %d: file block %d maps disk block %d", ErrCorrupt, s.owner(seg), fb, sp.disk)
	}
	return s.fixSum(tx, seg, fb, 0)
}

// DropSumPage repairs a *BadSumPageError: it removes seg's record of the
// checksum page for file blocks from base, which must be damaged (else
// ErrCorrupt, nothing changed). The blocks it covered then have no
// checksum, which means never written: they read as zeros, and their disk
// blocks stay with the file until it is truncated or deleted. (Taking the
// checksums from the disk instead could bless another file's old bytes in a
// block that was allocated but never written.) The page itself, if it was
// an allocation, is left for the leak pass.
func (s *Store) DropSumPage(tx *pram.Tx, seg pram.Off, base uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	l := s.sums(seg)
	c, ok, err := l.seekLE(base)
	if err != nil {
		return err
	}
	if !ok || l.get(c)[0] != base {
		return fmt.Errorf("%w: inode %d has no checksum page record for file block %d", ErrCorrupt, s.owner(seg), base)
	}
	if _, err := s.sumPageAt(l, c); err == nil {
		return fmt.Errorf("%w: inode %d: the checksum page for file block %d is sound", ErrCorrupt, s.owner(seg), base)
	}
	if err := l.remove(tx, c); err != nil {
		return err
	}
	s.bump(seg) // cached reads of the file are stale
	return nil
}

// DropUnsynced repairs a *BadUnsyncedError: it removes seg's unsynced
// record of file block fb (and takes seg off the list of files with
// records if it was the last). A record only guides Open's recovery after
// a power failure: without it, a block lost or torn by one fails its
// checksum (EIO) instead of going back to its synced contents. A
// quarantined old block the record named stays quarantined until the next
// sync frees it.
func (s *Store) DropUnsynced(tx *pram.Tx, seg pram.Off, fb uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	if fb == math.MaxUint64 {
		return fmt.Errorf("%w: file block %d", ErrCorrupt, fb)
	}
	return s.dropUnsynced(tx, seg, fb, fb+1)
}

// RestoreMagic repairs a *SegMagicError: it rewrites the magic of the
// segment list at seg, an arena allocation large enough for one, when the
// list records owner (the inode that points at it) as its file, so that
// the damage was the magic alone. The consistency walk then checks the rest
// of the list as usual. Otherwise it changes nothing (ErrCorrupt).
func (s *Store) RestoreMagic(tx *pram.Tx, seg pram.Off, owner uint64) error {
	if err := s.RestoreCheck(seg, owner); err != nil {
		return err
	}
	tx.Set64(seg, segListMagic)
	return nil
}

// RestoreCheck reports whether RestoreMagic(seg, owner) would restore the
// magic (nil) or refuse (ErrCorrupt, why).
func (s *Store) RestoreCheck(seg pram.Off, owner uint64) error {
	if !s.SegAllocation(seg) {
		return fmt.Errorf("%w: segment list %d is not an allocation of %d bytes", ErrCorrupt, seg, segListSize)
	}
	if got := s.owner(seg); got != owner {
		return fmt.Errorf("%w: segment list %d belongs to inode %d, not %d", ErrCorrupt, seg, got, owner)
	}
	return nil
}

// SegAllocation reports whether seg could hold a segment list: an aligned
// arena allocation of at least a list's size. A file whose pointer fails it
// has lost its list for good (fsck gives it an empty one).
func (s *Store) SegAllocation(seg pram.Off) bool {
	if !s.a.InHeap(seg, segListSize) || seg%8 != 0 {
		return false
	}
	n, err := s.h.SizeOf(seg)
	return err == nil && n >= segListSize
}

// ResetUnsynced repairs a *FileListError of seg's unsynced records: it
// empties the list, whose records only guide recovery after a power
// failure (see DropUnsynced). The list's allocations are left for the leak
// pass, and the list of files with unsynced blocks still names seg until
// it is rebuilt (the walk reports it as a *ListDamageError).
func (s *Store) ResetUnsynced(tx *pram.Tx, seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	s.unsyncedOf(seg).initHeader(tx)
	return nil
}

// ResetSums repairs a *FileListError of seg's checksum pages: it empties
// the list. The file keeps its disk blocks, but with no checksum a block
// counts as never written: the whole file reads as zeros (its data is
// lost). Its pages are left for the leak pass.
func (s *Store) ResetSums(tx *pram.Tx, seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	s.sums(seg).initHeader(tx)
	s.bump(seg) // cached reads of the file are stale
	return nil
}

// ResetSegments repairs a *FileListError of seg's segments: it empties
// the file's three lists, so the file maps no disk block and reads as
// zeros (its data is lost). Its disk blocks are left for the walk to find
// leaked, and its lists' allocations for the leak pass.
func (s *Store) ResetSegments(tx *pram.Tx, seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	s.segs(seg).initHeader(tx)
	s.sums(seg).initHeader(tx)
	s.unsyncedOf(seg).initHeader(tx)
	tx.Set64(seg+slOffBlocks, 0)
	s.bump(seg)
	return nil
}

// RewriteSum repairs a *SumDamageError: it sets the checksum recorded for
// file block fb of seg to that of the data on disk, after checking again
// that the record is stored and the data sums to data, and that the two
// differ as a damaged record would (else ErrCorrupt, nothing changed).
func (s *Store) RewriteSum(tx *pram.Tx, seg pram.Off, fb, stored, data uint64) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	buf := AlignedBuffer(int(s.bs))
	sum, err := s.readWritten(seg, fb, buf)
	if err != nil {
		return err
	}
	got := s.blockSum(s.a.U64(seg+slOffSeed), fb, buf)
	if sum != stored || got != data || !sumDamaged(stored, data) {
		return fmt.Errorf("%w: inode %d, file block %d: recorded checksum %#x, data's %#x: not a damaged record of it", ErrCorrupt, s.owner(seg), fb, sum, got)
	}
	if err := s.fixSum(tx, seg, fb, data); err != nil {
		return err
	}
	s.bump(seg) // cached reads of the file are stale
	return nil
}

// SetSegBlocks repairs a *SegBlocksError: it sets seg's count of blocks to
// the blocks its segments map, counted again (ErrCorrupt if they cannot
// be walked).
func (s *Store) SetSegBlocks(tx *pram.Tx, seg pram.Off) (uint64, error) {
	if err := s.validSeg(seg); err != nil {
		return 0, err
	}
	var held uint64
	err := s.segs(seg).walk(func(r rec) bool {
		held += r[2]
		return true
	})
	if err != nil {
		return 0, err
	}
	tx.Set64(seg+slOffBlocks, held)
	return held, nil
}

// readWritten reads written file block fb of seg into buf (one block) for a
// repair, unverified, and returns its recorded checksum. A block that maps
// no disk block or records no checksum (zeros) is ErrCorrupt.
func (s *Store) readWritten(seg pram.Off, fb uint64, buf []byte) (uint64, error) {
	sp, err := s.lookup(seg, fb)
	if err != nil {
		return 0, err
	}
	var sum [1]uint64
	if err := s.getSums(seg, fb, sum[:]); err != nil {
		return 0, err
	}
	if sp.disk == 0 || sum[0] == 0 {
		return 0, fmt.Errorf("%w: inode %d: file block %d holds no written data", ErrCorrupt, s.owner(seg), fb)
	}
	if _, err := s.dev.ReadAt(buf, int64(uint64(sp.disk)*s.bs)); err != nil {
		return 0, s.ioErr(fmt.Sprintf("inode %d: reading disk block %d", s.owner(seg), sp.disk), err)
	}
	return sum[0], nil
}

// MendSumPage repairs a *BadSumPageError without losing data when one byte
// of the record (its base, page pointer or capacity, a flipped bit or an
// overwritten byte) is what is damaged: of the records one byte away that
// are sane, it takes the one whose page holds checksums that the file's
// data verifies (up to four written blocks read, none failing), if exactly
// one does. Else ErrCorrupt and nothing changed; DropSumPage (data lost)
// is what is left. It returns what it changed.
func (s *Store) MendSumPage(tx *pram.Tx, seg pram.Off, base uint64) (string, error) {
	if err := s.validSeg(seg); err != nil {
		return "", err
	}
	l := s.sums(seg)
	c, ok, err := l.seekLE(base)
	if err != nil {
		return "", err
	}
	if !ok || l.get(c)[0] != base {
		return "", fmt.Errorf("%w: inode %d has no checksum page record for file block %d", ErrCorrupt, s.owner(seg), base)
	}
	r := l.get(c)
	seed := s.a.U64(seg + slOffSeed)
	buf := AlignedBuffer(int(s.bs))
	verifies := func(p sumPage) bool {
		good := 0
		for i := uint64(0); i < p.cap && good < 4; i++ {
			sum := s.a.U64(p.page + pram.Off(8*i))
			if sum == 0 {
				continue
			}
			sp, err := s.lookup(seg, p.base+i)
			if err != nil || sp.disk == 0 {
				return false
			}
			if _, err := s.dev.ReadAt(buf, int64(uint64(sp.disk)*s.bs)); err != nil || s.blockSum(seed, p.base+i, buf) != sum {
				return false
			}
			good++
		}
		return good > 0
	}
	// A base (the record's key) must stay between its neighbours'.
	lo, hi := uint64(0), uint64(math.MaxUint64)
	if base > 0 {
		if pc, ok, err := l.seekLE(base - 1); err == nil && ok {
			lo = l.get(pc)[0] + 1
		}
	}
	if nc, ok, err := l.next(c); err == nil && ok {
		hi = l.get(nc)[0]
	}
	var found rec
	var what string
	n := 0
	for _, field := range []int{0, 1, 2} {
		for at := 0; at < 64; at += 8 {
			for v := range uint64(256) {
				cand := r
				cand[field] = r[field]&^(0xff<<at) | v<<at
				p := sumPage{cand[0], pram.Off(cand[1]), cand[2], cand[3]}
				if cand[field] == r[field] || !s.sumPageSane(p) || cand[0] < lo || cand[0] >= hi {
					continue
				}
				if verifies(p) {
					found, n = cand, n+1
					what = fmt.Sprintf("base %d→%d, page %d→%d, capacity %d→%d", r[0], cand[0], r[1], cand[1], r[2], cand[2])
				}
			}
		}
	}
	if n != 1 {
		return "", fmt.Errorf("%w: inode %d: no single record one byte away from the checksum page record for file block %d holds checksums its data verifies (%d do)", ErrCorrupt, s.owner(seg), base, n)
	}
	if err := l.set(tx, c, found); err != nil {
		return "", err
	}
	s.bump(seg) // cached reads of the file are stale
	return what, nil
}
