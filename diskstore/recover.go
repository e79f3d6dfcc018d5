package diskstore

import (
	"errors"
	"fmt"

	"conquest/pram"
)

// RecoveryReport says what Open found on the unsynced list: the blocks
// published since the last device sync of the previous run, which did not
// end with a sync (it crashed or was killed).
type RecoveryReport struct {
	Files      int    // files with such blocks
	Checked    uint64 // blocks read back and verified
	Intact     uint64 // their data reached the disk (always so after a mere process crash)
	Restored   uint64 // lost: back to their contents at the last sync
	Zeroed     uint64 // lost: read as zeros now (they were zeros or a hole at the last sync, or that copy is damaged too)
	Unreadable uint64 // read errors and no intact copy of the last sync: left as they are (reads report EIO)
	Damaged    int    // files whose records could not be used (damaged arena: run fsck)
}

// RecoveredFiles lists the segment lists that had blocks written since the
// last sync when Open recovered them: files being written when the last
// run ended without a sync, whose preallocation past the end (trimmed at a
// file's last close, which never came) the core trims.
func (s *Store) RecoveredFiles() []pram.Off {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]pram.Off(nil), s.recoveredSegs...)
}

// Recovery reports what Open did with the unsynced list.
func (s *Store) Recovery() RecoveryReport {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.recovery
}

// recover runs at Open; see Open and unsynced.go. A file whose records are
// damaged is logged and skipped (its blocks stay as they are, for fsck); a
// device that cannot sync fails Open. It reports whether the store was
// clean: nothing written since the last sync, nothing in quarantine, no
// append to undo and no damage, so that it restored nothing (it may still
// tidy away records of blocks synced since).
func (s *Store) recover() (clean bool, err error) {
	if s.intentArea() == 0 {
		if err := s.ownTx(s.newIntentArea); err != nil {
			return false, err
		}
	}
	// Appends written in place by a transaction that was rolled back.
	rs := s.readIntents()
	if len(rs) > 0 {
		n, err := s.revertInPlace(rs, false)
		if err != nil {
			return false, err
		}
		if n > 0 {
			if err := s.dev.Sync(); err != nil {
				return false, s.ioErr("syncing disk after undoing appends", err)
			}
			s.o.Logf("diskstore: recovery: undid the appends of %d blocks written in place by an operation the crash interrupted", n)
		}
	}
	s.clearAllIntents()
	cur := s.epoch()
	type item struct {
		seg pram.Off
		e   uentry
	}
	var live []item
	files := 0
	err = s.unsyncedFiles().walk(func(r rec) bool {
		seg := pram.Off(r[0])
		files++
		if err := s.validSeg(seg); err != nil {
			s.o.Logf("diskstore: recovery: unsynced list names a bad segment list: %v", err)
			s.recovery.Damaged++
			return true
		}
		var mine []item
		var bad error
		err := s.unsyncedOf(seg).walk(func(r rec) bool {
			e, err := s.uentryOf(seg, r)
			if err != nil {
				bad = err
				return false
			}
			if e.epoch >= cur { // cur, or cur+1 if a sync was in flight (bgsync.go)
				mine = append(mine, item{seg, e})
			}
			return true
		})
		if err == nil {
			err = bad
		}
		if err != nil {
			s.o.Logf("diskstore: recovery: inode %d: %v", s.owner(seg), err)
			s.recovery.Damaged++
			return true
		}
		if len(mine) > 0 {
			s.recovery.Files++
		}
		live = append(live, mine...)
		if len(mine) > 0 {
			s.recoveredSegs = append(s.recoveredSegs, seg)
		}
		return true
	})
	if err != nil {
		if !s.o.ForCheck || !errors.Is(err, ErrCorrupt) {
			return false, err
		}
		// fsck: the walk reports the damage and a repair rebuilds the
		// list; the next Open recovers from it. Until then nothing
		// changes: no new epoch, the quarantine stays.
		s.o.Logf("diskstore: recovery skipped: %v", err)
		s.recovery.Damaged++
		s.recoverySkipped = true
		return false, nil
	}
	if held, ok := s.quarantineHeld(); s.o.ForCheck && (!ok || held != s.quarantined()) {
		// fsck: the stats record's count of quarantined blocks and the
		// quarantine disagree (a free map laid anew by NewFreeMap has an
		// empty one): ending the epoch would make the files' records
		// stale before the repair has put them back on the list, and
		// their blocks would never be verified. The walk reports it, the
		// repair rebuilds both, and the next Open recovers.
		s.o.Logf("diskstore: recovery skipped: the stats record counts %d quarantined blocks, the quarantine holds %d", s.quarantined(), held)
		s.recovery.Damaged++
		s.recoverySkipped = true
		return false, nil
	}
	if files == 0 && s.quarantined() == 0 {
		if s.epochWord()&epochStarted != 0 {
			// A sync was in flight at the crash and nothing is recorded:
			// end both tags, or the bit outlives the flight.
			s.endEpoch(s.tag() + 1)
		}
		return len(rs) == 0 && s.recovery.Damaged == 0, nil
	}
	if len(live) > 0 {
		// After a process crash the data is in the page cache: make it
		// durable before trusting it.
		if err := s.dev.Sync(); err != nil {
			return false, s.ioErr("syncing disk before recovery", err)
		}
		defer s.flushLost()
		for _, it := range live {
			if err := s.recoverBlock(it.seg, it.e); err != nil {
				if !errors.Is(err, ErrCorrupt) {
					return false, err
				}
				s.o.Logf("diskstore: recovery: inode %d, file block %d: %v", s.owner(it.seg), it.e.fb, err)
				s.recovery.Damaged++
			}
		}
		s.flushLost()
		if r := s.recovery; r.Restored+r.Zeroed+r.Unreadable > 0 {
			s.o.Logf("diskstore: recovery: %d blocks of %d files written since the last sync: %d intact, %d restored, %d zeroed, %d unreadable",
				r.Checked, r.Files, r.Intact, r.Restored, r.Zeroed, r.Unreadable)
		}
	}
	// Clean all the same when the list only held records of blocks synced
	// since (a clean close leaves them for the tidy).
	clean = len(rs) == 0 && len(live) == 0 && s.quarantined() == 0 && s.recovery.Damaged == 0
	s.endEpoch(s.tag() + 1)
	s.mu.Lock()
	s.needTidy = true
	s.mu.Unlock()
	for {
		before := [2]uint64{s.quarantined(), 0}
		before[1], _ = s.unsyncedFiles().length()
		if err := s.ownTx(s.tidy); err != nil {
			s.o.Logf("diskstore: recovery: releasing the quarantine: %v", err)
			return false, nil // what is left only holds space; fsck reports damage
		}
		s.mu.Lock()
		done := !s.needTidy
		s.mu.Unlock()
		after := [2]uint64{s.quarantined(), 0}
		after[1], _ = s.unsyncedFiles().length()
		if done || after == before {
			return clean && done, nil
		}
	}
}

// quarantineHeld is the number of blocks the quarantine's extents hold,
// and whether its list could be read.
func (s *Store) quarantineHeld() (held uint64, ok bool) {
	err := s.quarantineList().walk(func(r rec) bool {
		if r[1] > r[0] {
			held += r[1] - r[0]
		}
		return true
	})
	return held, err == nil
}

// recoveryReadTries is how often recovery reads a block back before it
// takes a read error for lasting.
const recoveryReadTries = 3

// recoverBlock reads back the block of e and repairs it if its data did not
// reach the disk, or cannot be read and its copy of the last sync can.
func (s *Store) recoverBlock(seg pram.Off, e uentry) error {
	s.recovery.Checked++
	bs := s.bs
	fb := e.fb
	sp, err := s.lookup(seg, fb)
	if err != nil {
		return err
	}
	var sum [1]uint64
	if err := s.getSums(seg, fb, sum[:]); err != nil {
		return err
	}
	if sp.disk == 0 || sum[0] == 0 { // zeros now: nothing on disk to lose
		s.recovery.Intact++
		return nil
	}
	owner, off := s.owner(seg), fb*bs
	seed := s.a.U64(seg + slOffSeed)
	buf := AlignedBuffer(int(bs))
	var readErr error
	for try := 0; try < recoveryReadTries; try++ {
		if _, readErr = s.dev.ReadAt(buf, int64(uint64(sp.disk)*bs)); readErr == nil {
			break
		}
	}
	if readErr == nil && s.blockSum(seed, fb, buf) == sum[0] {
		s.recovery.Intact++
		return nil
	}
	var old []byte
	if e.old != 0 {
		ob := AlignedBuffer(int(bs))
		if _, err := s.dev.ReadAt(ob, int64(uint64(e.old)*bs)); err == nil && s.blockSum(seed, fb, ob) == e.oldSum {
			old = ob
		}
	}
	if readErr != nil {
		_ = s.ioErr("recovery", readErr)
		s.o.Logf("diskstore: recovery: inode %d, offset %d, disk block %d: cannot read it back: %v", owner, off, sp.disk, readErr)
		if old == nil {
			// No intact copy of the last sync to go back to: left as it
			// is (reads report EIO; the error may pass).
			s.recovery.Unreadable++
			return nil
		}
		// What the block held was never synced (a sync would have made
		// its record stale): going back to the intact synced copy, before
		// the next epoch frees it, loses nothing a sync promised.
	}
	if old != nil && e.keep == bs {
		// The synced copy, intact in the quarantine: map it back.
		err := s.ownTx(func(tx *pram.Tx) error {
			xs, err := s.unmapRange(tx, seg, fb, fb+1)
			if err != nil {
				return err
			}
			for _, x := range xs {
				if err := s.freeExtent(tx, x); err != nil {
					return err
				}
			}
			if err := s.quarantineTake(tx, e.old); err != nil {
				return err
			}
			if err := s.mapRange(tx, seg, fb, e.old, 1); err != nil {
				return err
			}
			if err := s.setSums(tx, seg, fb, []uint64{e.oldSum}); err != nil {
				return err
			}
			return s.clearOld(tx, seg, fb)
		})
		if err != nil {
			return err
		}
		s.recovery.Restored++
		s.logLost(seg, fb, sp.disk, e.old, "restored its contents at the last sync")
		return nil
	}
	if old != nil {
		// Truncated into since the sync: the synced copy without the bytes
		// beyond the end, in a new block (the quarantined one stays intact
		// until this transaction commits).
		clear(old[e.keep:])
		nsum := s.blockSum(seed, fb, old)
		restored := false
		err := s.ownTx(func(tx *pram.Tx) error {
			if nsum == 0 {
				return s.setSums(tx, seg, fb, []uint64{0})
			}
			x, err := s.allocFree(tx, 1, e.old)
			if err != nil {
				if errors.Is(err, ErrNoSpace) {
					return s.setSums(tx, seg, fb, []uint64{0})
				}
				return err
			}
			if _, err := s.dev.WriteAt(old, int64(uint64(x.b)*bs)); err != nil {
				return s.ioErr("recovery: writing a restored block", err)
			}
			if err := s.dev.Sync(); err != nil {
				return s.ioErr("recovery: syncing a restored block", err)
			}
			xs, err := s.unmapRange(tx, seg, fb, fb+1)
			if err != nil {
				return err
			}
			for _, y := range xs {
				if err := s.freeExtent(tx, y); err != nil {
					return err
				}
			}
			if err := s.mapRange(tx, seg, fb, x.b, 1); err != nil {
				return err
			}
			restored = true
			return s.setSums(tx, seg, fb, []uint64{nsum})
		})
		if err != nil {
			return err
		}
		if restored {
			s.recovery.Restored++
			s.logLost(seg, fb, sp.disk, e.old, fmt.Sprintf("restored its contents at the last sync up to byte %d of the block", e.keep))
		} else {
			s.recovery.Zeroed++
			s.logLost(seg, fb, sp.disk, 0, "it now reads as zeros")
		}
		return nil
	}
	if err := s.ownTx(func(tx *pram.Tx) error { return s.setSums(tx, seg, fb, []uint64{0}) }); err != nil {
		return err
	}
	s.recovery.Zeroed++
	if e.old != 0 {
		s.logLost(seg, fb, sp.disk, e.old, "its copy of the last sync is damaged too: it now reads as zeros")
	} else {
		s.logLost(seg, fb, sp.disk, 0, "it now reads as zeros (as at the last sync)")
	}
	return nil
}

// lostRun is a run of blocks of one file that recovery repaired the same
// way, contiguous in the file and on disk: one log line.
type lostRun struct {
	seg      pram.Off
	fb, n    uint64
	disk     Block
	old      Block // 0: none
	outcome  string
	inFlight bool
}

// logLost logs a repaired block, merged with the previous ones if it
// continues their run.
func (s *Store) logLost(seg pram.Off, fb uint64, disk, old Block, outcome string) {
	r := &s.lost
	if r.inFlight && r.seg == seg && r.outcome == outcome && r.fb+r.n == fb && r.disk+Block(r.n) == disk &&
		(r.old == 0) == (old == 0) && (old == 0 || r.old+Block(r.n) == old) {
		r.n++
		return
	}
	s.flushLost()
	*r = lostRun{seg: seg, fb: fb, n: 1, disk: disk, old: old, outcome: outcome, inFlight: true}
}

// flushLost logs the pending run.
func (s *Store) flushLost() {
	r := &s.lost
	if !r.inFlight {
		return
	}
	r.inFlight = false
	bs := s.bs
	where := fmt.Sprintf("inode %d, offset %d, disk block %d", s.owner(r.seg), r.fb*bs, r.disk)
	if r.n > 1 {
		where = fmt.Sprintf("inode %d, offsets [%d, %d), disk blocks [%d, %d)", s.owner(r.seg), r.fb*bs, (r.fb+r.n)*bs, r.disk, r.disk+Block(r.n))
	}
	from := ""
	if r.old != 0 {
		from = fmt.Sprintf(" (from disk block %d)", r.old)
		if r.n > 1 {
			from = fmt.Sprintf(" (from disk blocks [%d, %d))", r.old, r.old+Block(r.n))
		}
	}
	s.o.Logf("diskstore: recovery: %s: data written before the crash did not reach the disk: %s%s", where, r.outcome, from)
}

// clearOld forgets the old block of fb's record (it is back in the file).
func (s *Store) clearOld(tx *pram.Tx, seg pram.Off, fb uint64) error {
	e, c, found, err := s.findUnsynced(seg, fb)
	if err != nil || !found {
		return err
	}
	e.old, e.oldSum = 0, 0
	return s.unsyncedOf(seg).set(tx, c, e.rec())
}

// ownTx runs fn in a transaction of the store's own (at Open, before the
// core begins any): committed if fn succeeds, aborted if it fails or panics
// (a damaged arena, a journal too small).
func (s *Store) ownTx(fn func(tx *pram.Tx) error) (err error) {
	tx := s.a.Begin()
	defer func() {
		if r := recover(); r != nil {
			s.Abort(tx)
			err = fmt.Errorf("%w: %v", ErrCorrupt, r)
		}
	}()
	if err := fn(tx); err != nil {
		s.Abort(tx)
		return err
	}
	s.Commit(tx)
	return nil
}
