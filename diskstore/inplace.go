package diskstore

import (
	"bytes"
	"encoding/binary"
	"fmt"

	"conquest/pram"
)

// In-place appends (DurableOnProcessCrash).
//
// A write into part of a block that holds data goes to a new block
// (copy-on-write), so that a crash leaves the old or the new block, never a
// mix. For small appends (a log growing 200 bytes at a time in 64 KiB
// blocks) that rewrites the whole block elsewhere on every write. Instead,
// a block written since the last sync (it has a live unsynced record, so
// its synced contents are safe in the quarantine or were zeros) whose bytes
// under the write are all zeros is written in place: only the aligned range
// under the write is rewritten. The previous contents are then the current
// ones with that range zeroed again, which is all a rollback needs:
//
//   - before the device write, an intent {segment list, file block, disk
//     block, range, checksum before} goes into a slot of the intent area
//     (stats record +48 points to it), with unlogged stores in program
//     order, the segment list last: kill -9 keeps them, a rollback does not
//     undo them;
//   - Store.Commit clears the slots of the transaction (the new checksum is
//     published, the block is consistent);
//   - Store.Abort, after the rollback, and Open, after a crash, find each
//     block whose checksum is again the one before: they zero the recorded
//     ranges, newest first, until the block verifies against it, and write
//     it back. Stacked intents on one block (several appends in one
//     transaction) unwind together.
//
// A power failure needs no intent: the block was written since the last
// sync, so its record restores the synced contents (or zeros) if it does not
// verify. At most intentSlots in-place writes per transaction; beyond, and
// for any write over non-zero bytes, copy-on-write as before.
//
// On a shadowed arena a power failure brings back the last durable
// checkpoint, which may map the block with the checksum it had then: an
// append in place since would make the block fail that checksum, and
// recovery would zero the data the checkpoint had (the disk kept it). So
// there the block must also have been written since the last checkpoint
// copy was taken (inPlaceSafe): no checkpoint has seen its contents. The
// first append after each checkpoint copies the block, the next ones until
// the following checkpoint go in place.
const (
	stOffIntents = 48 // offset of the intent area (0: none yet)

	intentMagic = 0x31544e49514e4f43 // "CONQINT1"
	intentSlots = 16
	intentWords = 5 // seg (0: free), fb, disk, lo | hi<<32, checksum before
	intentHdr   = 16
	intentSize  = intentHdr + intentSlots*intentWords*8
)

// intentRec is one in-place write: file block fb of seg in disk block disk,
// bytes [lo, hi) were zeros and the block's checksum was before.
type intentRec struct {
	seg    pram.Off
	fb     uint64
	disk   Block
	lo, hi uint64
	before uint64
}

// intentArea is the area's offset if it is valid, else 0.
func (s *Store) intentArea() pram.Off {
	off := pram.Off(s.a.U64(s.st + stOffIntents))
	if off == 0 || off%8 != 0 || !s.a.InHeap(off, intentSize) || s.a.U64(off) != intentMagic || s.a.U64(off+8) != intentSlots {
		return 0
	}
	return off
}

// newIntentArea allocates the intent area through tx (Format, or Open of an
// arena made before it existed).
func (s *Store) newIntentArea(tx *pram.Tx) error {
	off, err := s.h.AllocZero(tx, intentSize)
	if err != nil {
		return err
	}
	b := freshBytes(s.h, s.a, off, 0, intentSize)
	binary.LittleEndian.PutUint64(b[0:], intentMagic)
	binary.LittleEndian.PutUint64(b[8:], intentSlots)
	tx.Set64(s.st+stOffIntents, uint64(off))
	return nil
}

func slotOff(area pram.Off, i int) pram.Off { return area + intentHdr + pram.Off(i*intentWords*8) }

// takeIntent records an in-place write about to happen, in the next free
// slot of this transaction. It reports false when there is none.
func (s *Store) takeIntent(r intentRec) bool {
	area := s.intentArea()
	s.mu.Lock()
	defer s.mu.Unlock()
	if area == 0 {
		return false
	}
	i := len(s.intents)
	for i < intentSlots && s.a.U64(slotOff(area, i)) != 0 { // a slot Abort could not clear
		i++
	}
	if i >= intentSlots {
		return false
	}
	o := slotOff(area, i)
	s.a.PutU64(o+8, r.fb)
	s.a.PutU64(o+16, uint64(r.disk))
	s.a.PutU64(o+24, r.lo|r.hi<<32)
	s.a.PutU64(o+32, r.before)
	s.a.PutU64(o, uint64(r.seg)) // valid from here on
	for len(s.intents) < i {
		s.intents = append(s.intents, intentRec{}) // skipped slots
	}
	s.intents = append(s.intents, r)
	return true
}

// clearIntentsLocked frees the slots of the transaction that ended.
// Preconditions: s.mu held.
func (s *Store) clearIntentsLocked() {
	if area := s.intentArea(); area != 0 {
		for i, r := range s.intents {
			if r.seg != 0 {
				s.a.PutU64(slotOff(area, i), 0)
			}
		}
	}
	s.intents = s.intents[:0]
}

// readIntents returns the valid slots, in slot order (Open).
func (s *Store) readIntents() []intentRec {
	area := s.intentArea()
	if area == 0 {
		return nil
	}
	var rs []intentRec
	for i := 0; i < intentSlots; i++ {
		o := slotOff(area, i)
		seg := pram.Off(s.a.U64(o))
		if seg == 0 {
			continue
		}
		lohi := s.a.U64(o + 24)
		r := intentRec{seg: seg, fb: s.a.U64(o + 8), disk: Block(s.a.U64(o + 16)), lo: lohi & 0xffffffff, hi: lohi >> 32, before: s.a.U64(o + 32)}
		if r.lo < r.hi && r.hi <= s.bs {
			rs = append(rs, r)
		}
	}
	return rs
}

// clearAllIntents frees every slot (Open, once they are dealt with).
func (s *Store) clearAllIntents() {
	if area := s.intentArea(); area != 0 {
		for i := 0; i < intentSlots; i++ {
			s.a.PutU64(slotOff(area, i), 0)
		}
	}
}

// revertInPlace puts back the contents of blocks written in place by a
// transaction that was rolled back, newest intent first: a block whose
// checksum in the arena is again the one before its in-place writes is
// read, the recorded ranges are zeroed until it verifies, and it is written
// back. Blocks the arena no longer maps there (freed, or never committed)
// are left alone. It returns the number of blocks written back. A block that
// cannot be put back is logged if report is set (Abort: the device
// misbehaves); at Open it is not (after a power failure the block's earlier
// contents may be lost too: its unsynced record, checked next, restores the
// synced ones and logs it).
func (s *Store) revertInPlace(rs []intentRec, report bool) (int, error) {
	type key struct {
		seg  pram.Off
		fb   uint64
		disk Block
	}
	done := map[key]bool{}
	bufs := map[key][]byte{}
	bs := s.bs
	n := 0
	var firstErr error
	for i := len(rs) - 1; i >= 0; i-- {
		r := rs[i]
		k := key{r.seg, r.fb, r.disk}
		if r.seg == 0 || done[k] {
			continue
		}
		var sum [1]uint64
		sp, err := s.lookup(r.seg, r.fb)
		if s.validSeg(r.seg) != nil || err != nil || sp.disk != r.disk || s.getSums(r.seg, r.fb, sum[:]) != nil || sum[0] == 0 {
			done[k] = true
			continue
		}
		seed := s.a.U64(r.seg + slOffSeed)
		buf := bufs[k]
		if buf == nil {
			buf = AlignedBuffer(int(bs))
			if _, err := s.dev.ReadAt(buf, int64(uint64(r.disk)*bs)); err != nil {
				done[k] = true
				if firstErr == nil {
					firstErr = s.ioErr(fmt.Sprintf("inode %d: reading disk block %d to undo an append", s.owner(r.seg), r.disk), err)
				}
				continue
			}
			if s.blockSum(seed, r.fb, buf) == sum[0] {
				done[k] = true // the write never reached it
				continue
			}
			bufs[k] = buf
		}
		clear(buf[r.lo:r.hi])
		if s.blockSum(seed, r.fb, buf) != sum[0] {
			continue // an older intent of the same block undoes the rest
		}
		done[k] = true
		if _, err := s.dev.WriteAt(buf, int64(uint64(r.disk)*bs)); err != nil {
			if firstErr == nil {
				firstErr = s.ioErr(fmt.Sprintf("inode %d: writing back disk block %d to undo an append", s.owner(r.seg), r.disk), err)
			}
			continue
		}
		n++
	}
	for k := range bufs {
		if !done[k] && report {
			s.o.Logf("diskstore: inode %d, offset %d, disk block %d: an append written in place could not be undone: the block fails its checksum",
				s.owner(k.seg), k.fb*bs, k.disk)
		}
	}
	return n, firstErr
}

// appendFast writes an append in place without the rest of its block: the
// common small append (an 8 KiB write into a 16 or 64 KiB block) on a store with
// page sums (checksum.go). It applies when the write falls in one block
// that holds data written since the last sync, is in the verified-block
// cache, and has zeros under the write: it takes the whole pages under the
// write from the cache, writes them with the new bytes in place (under an
// intent, as writeBlocks does), derives the block's new checksum from the
// old and new pages alone, and patches the cached block. Nothing else of
// the block is copied or hashed (writeBlocks copies the block out of the
// cache and back, and hashes all of it). It reports false, having changed
// nothing, when the write does not qualify: writeBlocks then does it the
// general way, which also caches the block for the next append.
func (s *Store) appendFast(tx *pram.Tx, seg pram.Off, fb uint64, runs []run) (bool, error) {
	if !s.pageSums || !s.durable() {
		return false, nil
	}
	bs := int64(s.bs)
	start := int64(fb) * bs
	lo, hi := inPlaceRange(runs, start, bs)
	if lo >= hi || hi-lo == bs {
		return false, nil
	}
	var old [1]uint64
	if err := s.getSums(seg, fb, old[:]); err != nil {
		return false, err
	}
	if old[0] <= 1 {
		return false, nil // a hole, unwritten, or an ambiguous sum
	}
	sp, err := s.lookup(seg, fb)
	if err != nil || sp.disk == 0 {
		return false, err // no disk block: writeBlocks reports it
	}
	e, _, found, err := s.findUnsynced(seg, fb)
	if err != nil || !found || e.epoch != s.tag() || !s.inPlaceSafe(sp.disk) {
		return false, err
	}
	seed := s.a.U64(seg + slOffSeed)
	a0 := uint64(lo) &^ (hashPage - 1)
	a1 := min((uint64(hi)+hashPage-1)&^(hashPage-1), s.bs)
	n := a1 - a0
	if uint64(len(s.appendBuf)) < 2*n {
		s.appendBuf = AlignedBuffer(int(2 * s.bs))
	}
	before, after := s.appendBuf[:n], s.appendBuf[s.bs:s.bs+n]
	if !s.cache.get(seg, fb, seed, sp.disk, old[0], before, a0) ||
		!bytes.Equal(before[uint64(lo)-a0:uint64(hi)-a0], s.zero[:hi-lo]) {
		return false, nil
	}
	copy(after, before)
	for _, r := range runs {
		x, y := max(r.off, start+int64(a0)), min(r.end(), start+int64(a1))
		if x < y {
			copy(after[x-start-int64(a0):], r.data[x-r.off:y-r.off])
		}
	}
	if bytes.Equal(before, after) {
		return true, nil // zeros over zeros: nothing changes
	}
	sum, ok := s.updatedSum(seed, fb, old[0], a0, before, after)
	if !ok || !s.takeIntent(intentRec{seg, fb, sp.disk, uint64(lo), uint64(hi), old[0]}) {
		return false, nil
	}
	if _, err := s.dev.WriteAt(after, int64(uint64(sp.disk)*s.bs+a0)); err != nil {
		// The caller aborts tx; Abort undoes the intent.
		return true, s.ioErr(fmt.Sprintf("writing disk block %d", sp.disk), err)
	}
	s.wroteUnsynced(int64(n))
	if err := s.setSums(tx, seg, fb, []uint64{sum}); err != nil {
		return true, err
	}
	s.bump(seg)
	s.cache.patch(seg, fb, seed, sp.disk, old[0], sum, after, a0)
	s.fastApp.Add(1)
	return true, nil
}

// inPlaceRange is the range of block i of a write that the runs change,
// [lo, hi) relative to the block, if they change a single span of it.
func inPlaceRange(runs []run, blockStart, bs int64) (lo, hi int64) {
	lo, hi = bs, 0
	for _, r := range runs {
		a, b := max(r.off, blockStart), min(r.end(), blockStart+bs)
		if a < b {
			lo, hi = min(lo, a-blockStart), max(hi, b-blockStart)
		}
	}
	return lo, hi
}

// markFresh notes that the disk blocks plan wrote (dst) were written in
// this checkpoint interval (see inPlaceSafe). Preconditions: s.mu not held.
func (s *Store) markFresh(plan []blk) {
	if !s.shadowed {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetFreshLocked()
	for _, p := range plan {
		if p.dst != 0 {
			s.fresh[p.dst] = struct{}{}
		}
	}
}

// inPlaceSafe reports whether disk block b may be written in place as far as
// checkpoints go: the arena is not shadowed, or no checkpoint copy was taken
// since b was last written (markFresh), so no durable checkpoint can map b
// with an older checksum.
func (s *Store) inPlaceSafe(b Block) bool {
	if !s.shadowed {
		return true
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.resetFreshLocked()
	_, ok := s.fresh[b]
	return ok
}

// resetFreshLocked forgets the blocks written before the last checkpoint
// copy. Preconditions: s.mu held.
func (s *Store) resetFreshLocked() {
	if g := s.snapGen.Load(); s.fresh == nil || s.freshGen != g {
		s.fresh, s.freshGen = make(map[Block]struct{}), g
	}
}
