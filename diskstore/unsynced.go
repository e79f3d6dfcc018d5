package diskstore

import (
	"errors"
	"fmt"
	"math"
	"slices"

	"conquest/pram"
)

// Unsynced blocks, the quarantine and sync epochs (DurableOnProcessCrash).
//
// Write puts data on the device (pwrite) and publishes it in the same
// transaction without syncing the device, so a completed write survives the
// death of the process: the written bytes are in the kernel's page cache
// (image file) or on the device (O_DIRECT), and the arena (a shared mapping)
// keeps the committed metadata. A power failure may still lose any write
// made since the last device sync, or keep part of it. What makes that safe
// is a persistent record of every block published since the last sync:
//
//   - the epoch (stats record +32) counts device syncs. It is stored
//     unlogged, after Device.Sync returns: a transaction that synced and is
//     then rolled back (Abort, or kill -9 before its commit) must not bring
//     back records that look unsynced but describe synced data, nor make
//     its own records look older than they are. Its top bit says that a
//     sync runs in the background, and records made meanwhile carry the
//     next epoch (bgsync.go): "the current epoch" below is then either.
//
//   - each segment list holds (+96) an xlist of unsynced records {file
//     block, epoch, old block, old checksum, keep}, keyed by file block: the
//     block was first published unsynced in that epoch, and its contents at
//     the last sync were zeros (old block 0) or are kept, intact, in old
//     block, of which the first keep bytes still belong to the file (less
//     than the block size after a truncate into the block). A record is live
//     while its epoch is the current one and stale after a sync. Only the
//     first write of a block in an epoch records anything: a second write
//     replaces data that was never synced, and the record still describes
//     the synced contents.
//
//   - the free map holds (+64) an xlist of the segment lists that have
//     records, so that a sync and Open find them, and (+96) the quarantine,
//     an xlist of extents {begin, end, epoch}: old blocks, neither free nor
//     in a file. A copy-on-write of a synced block puts the old block there
//     instead of freeing it, so that no other write reuses it before the
//     sync that makes its replacement durable (otherwise a power failure
//     could lose both versions); the stats record (+40) counts its blocks.
//
// After a sync everything recorded is stale; tidy then frees the quarantine
// of past epochs and drops stale records, within the journal room a
// transaction can spare (tidyRoom), continuing in later transactions if
// needed. Stale records and quarantine are harmless until then: a stale
// record is never used to restore anything, and the quarantine only holds
// space (an allocation that finds no free block syncs and tidies first).
//
// Open (recover) reads back every block with a live record after syncing
// the device (a process crash leaves the data in the page cache: the sync
// makes it durable before it is trusted). A block that verifies is kept; one
// that does not (a power failure lost the write, kept part of it, or the
// disk lied) goes back to its old block if that still verifies, else reads
// as zeros; either way it is logged with its inode, offset and disk block.
// Never another file's bytes: checksums are seeded per file and offset.
const (
	slOffUnsynced   = 96 // unsynced records of a file, in its segment list header
	unsyncedWords   = 5
	fmOffUnsynced   = 64 // segment lists with unsynced records, in the free map
	fmOffQuarantine = 96 // quarantine, in the free map
	unsyncedFWords  = 1
	quarantineWords = 3
)

// uentry is one validated unsynced record.
type uentry struct {
	fb     uint64 // file block
	epoch  uint64 // first published unsynced in this epoch
	old    Block  // holds the contents at the last sync (0: they were zeros)
	oldSum uint64 // checksum of old (0 iff old is 0)
	keep   uint64 // bytes of old that belong to the file (1..block size)
}

func (e uentry) rec() rec { return rec{e.fb, e.epoch, uint64(e.old), e.oldSum, e.keep} }

func (s *Store) unsyncedOf(seg pram.Off) xlist {
	return xlist{a: s.a, h: s.h, hdr: seg + slOffUnsynced, words: unsyncedWords, what: "unsynced block", lazy: true}
}

func (s *Store) unsyncedFiles() xlist {
	return xlist{a: s.a, h: s.h, hdr: s.fm + fmOffUnsynced, words: unsyncedFWords, what: "unsynced file", lazy: true}
}

func (s *Store) quarantineList() xlist {
	return xlist{a: s.a, h: s.h, hdr: s.fm + fmOffQuarantine, words: quarantineWords, what: "quarantine", lazy: true}
}

// quarantined is the number of blocks in the quarantine.
func (s *Store) quarantined() uint64 { return s.a.U64(s.st + stOffQuarantined) }

func (s *Store) durable() bool { return s.o.Durability != GatherInMemory }

// uentryOf validates the unsynced record r of seg.
func (s *Store) uentryOf(seg pram.Off, r rec) (uentry, error) {
	e := uentry{r[0], r[1], Block(r[2]), r[3], r[4]}
	if e.epoch > s.tag() || uint64(e.old) >= s.super.Blocks || (e.old == 0) != (e.oldSum == 0) ||
		e.keep == 0 || e.keep > s.bs || e.fb >= s.fileBlocks() {
		return e, fmt.Errorf("%w: inode %d: unsynced record for file block %d: epoch %d (now %d), old block %d, keep %d",
			ErrCorrupt, s.owner(seg), e.fb, e.epoch, s.tag(), e.old, e.keep)
	}
	return e, nil
}

// findUnsynced returns the record of file block fb, if any.
func (s *Store) findUnsynced(seg pram.Off, fb uint64) (uentry, xcur, bool, error) {
	l := s.unsyncedOf(seg)
	c, ok, err := l.seekLE(fb)
	if err != nil || !ok {
		return uentry{}, c, false, err
	}
	r := l.get(c)
	if r[0] != fb {
		return uentry{}, c, false, nil
	}
	e, err := s.uentryOf(seg, r)
	return e, c, err == nil, err
}

// noteUnsynced records that file block fb of seg, planned as p, now holds
// data written since the last sync. It reports whether the block p replaces
// (p.disk, when p.cow) holds the contents of the last sync and so goes to
// the quarantine (the caller adds it) instead of being freed.
func (s *Store) noteUnsynced(tx *pram.Tx, seg pram.Off, fb uint64, p *blk) (bool, error) {
	e, c, found, err := s.findUnsynced(seg, fb)
	if err != nil {
		return false, err
	}
	if found && e.epoch == s.epoch() && s.inFlight() {
		// Written before the sync in flight started: the block holds the
		// contents that sync makes durable, and the record the contents of
		// the one before. Wait for it (bgsync.go); the record is then stale.
		if err := s.settle(true); err != nil {
			return false, err
		}
	}
	cur := s.tag()
	if found && e.epoch >= s.epoch() {
		// The record already describes the synced contents: it was made
		// since the last sync that completed (either tag, if a failed
		// sync whose retry failed too left the started bit set).
		return false, nil
	}
	ne := uentry{fb: fb, epoch: cur, keep: s.bs}
	if p.cow {
		ne.old, ne.oldSum = p.disk, p.old
	}
	l := s.unsyncedOf(seg)
	if found { // stale: the block was synced since
		return p.cow, l.set(tx, c, ne.rec())
	}
	err = s.recordAlloc(func() error {
		if err := s.registerUnsynced(tx, seg); err != nil {
			return err
		}
		return l.insert(tx, ne.rec())
	})
	if errors.Is(err, errListFull) {
		err = fmt.Errorf("%w: inode %d: too many unsynced blocks", ErrFileTooBig, s.owner(seg))
	}
	return p.cow, err
}

// SetUseReserve lets writes draw on the arena heap's free reserve
// (alloc.UsingReserve), or stops it, for what a write into blocks already
// mapped needs arena memory for: the unsynced records of the blocks it
// writes and the quarantine of the blocks it replaces, which last only
// until the next device sync, whose tidy frees them (the whole reserve);
// and the records a copy-on-write adds to the file's segment list and to
// the free map, which stay (half of it: alloc.UsingHalfReserve). With the
// arena full, a write into what fallocate reserved (Allocate makes room
// for its checksums) or over data already written can then go on, as on
// ext4, if its caller syncs right after it so that the reserve fills again
// (the core's last retry of an operation that found no space). Writes
// into holes gain nothing: their checksum pages and extents stay ordinary
// allocations. Callers hold the core's lock exclusively.
func (s *Store) SetUseReserve(on bool) { s.useReserve = on }

// recordAlloc runs f, which inserts unsynced records or quarantine, on the
// heap's free reserve when SetUseReserve allows it.
func (s *Store) recordAlloc(f func() error) error {
	if s.useReserve {
		return s.h.UsingReserve(f)
	}
	return f()
}

// registerUnsynced puts seg on the list of files with unsynced records.
func (s *Store) registerUnsynced(tx *pram.Tx, seg pram.Off) error {
	l := s.unsyncedFiles()
	c, ok, err := l.seekLE(uint64(seg))
	if err != nil || ok && l.get(c)[0] == uint64(seg) {
		return err
	}
	err = l.insert(tx, rec{uint64(seg)})
	if errors.Is(err, errListFull) {
		err = fmt.Errorf("%w: too many files with unsynced blocks", ErrNoSpace)
	}
	return err
}

// unregisterUnsynced takes seg off the list of files with unsynced records.
func (s *Store) unregisterUnsynced(tx *pram.Tx, seg pram.Off) error {
	l := s.unsyncedFiles()
	c, ok, err := l.seekLE(uint64(seg))
	if err != nil || !ok || l.get(c)[0] != uint64(seg) {
		return err
	}
	return l.remove(tx, c)
}

// dropUnsynced removes the records of file blocks [from, to) (unmapped by a
// truncate, hole punch or destroy). Their quarantined blocks stay in the
// quarantine until the next sync frees them.
func (s *Store) dropUnsynced(tx *pram.Tx, seg pram.Off, from, to uint64) error {
	l := s.unsyncedOf(seg)
	n, err := l.length()
	if err != nil || n == 0 {
		return err
	}
	if err := l.removeRange(tx, from, to, nil); err != nil {
		return err
	}
	if n, err = l.length(); err != nil || n > 0 {
		return err
	}
	return s.unregisterUnsynced(tx, seg)
}

// limitKeep notes that only the first keep bytes of file block fb still
// belong to the file (a truncate into the block): restoring its old
// contents must not bring back bytes beyond the new end.
func (s *Store) limitKeep(tx *pram.Tx, seg pram.Off, fb, keep uint64) error {
	e, c, found, err := s.findUnsynced(seg, fb)
	if err != nil || !found || e.keep <= keep {
		return err
	}
	e.keep = keep
	return s.unsyncedOf(seg).set(tx, c, e.rec())
}

// hasLive reports whether seg has blocks published since the last sync
// that completed.
func (s *Store) hasLive(seg pram.Off) (bool, error) {
	cur := s.epoch()
	live := false
	var bad error
	err := s.unsyncedOf(seg).walk(func(r rec) bool {
		e, err := s.uentryOf(seg, r)
		if err != nil {
			bad = err
			return false
		}
		live = e.epoch >= cur
		return !live
	})
	if err == nil {
		err = bad
	}
	return live, err
}

// quarantineAdd puts the blocks of x (replaced by a copy-on-write since the
// last sync) into the quarantine.
func (s *Store) quarantineAdd(tx *pram.Tx, x extent) error {
	if x.b < 1 || x.e <= x.b || uint64(x.e) > s.super.Blocks {
		return fmt.Errorf("%w: quarantining blocks [%d, %d) of a %d-block disk", ErrCorrupt, x.b, x.e, s.super.Blocks)
	}
	l := s.quarantineList()
	cur := s.tag()
	s.mu.Lock()
	s.heldInTx = append(s.heldInTx, x)
	s.mu.Unlock()
	tx.Set64(s.st+stOffQuarantined, s.quarantined()+x.len())
	pc, pok, err := l.seekLE(uint64(x.b))
	if err != nil {
		return err
	}
	if pok {
		p := l.get(pc)
		if Block(p[1]) > x.b {
			return fmt.Errorf("%w: quarantining blocks [%d, %d), already in [%d, %d)", ErrCorrupt, x.b, x.e, p[0], p[1])
		}
	}
	nc, nok, err := l.seekGE(uint64(x.b))
	if err != nil {
		return err
	}
	if nok {
		n := l.get(nc)
		if Block(n[0]) < x.e {
			return fmt.Errorf("%w: quarantining blocks [%d, %d), already in [%d, %d)", ErrCorrupt, x.b, x.e, n[0], n[1])
		}
	}
	if pok {
		if p := l.get(pc); Block(p[1]) == x.b && p[2] == cur {
			return l.set(tx, pc, rec{p[0], uint64(x.e), cur})
		}
	}
	if nok {
		if n := l.get(nc); Block(n[0]) == x.e && n[2] == cur {
			return l.set(tx, nc, rec{uint64(x.b), n[1], cur})
		}
	}
	err = l.insert(tx, rec{uint64(x.b), uint64(x.e), cur})
	if errors.Is(err, errListFull) {
		err = fmt.Errorf("%w: quarantine too fragmented", ErrNoSpace)
	}
	return err
}

// quarantineTake takes block b out of the quarantine (recovery maps it
// back into its file).
func (s *Store) quarantineTake(tx *pram.Tx, b Block) error {
	l := s.quarantineList()
	c, ok, err := l.seekLE(uint64(b))
	if err != nil {
		return err
	}
	if !ok {
		return fmt.Errorf("%w: block %d is not in the quarantine", ErrCorrupt, b)
	}
	r := l.get(c)
	qb, qe, ep := Block(r[0]), Block(r[1]), r[2]
	if b >= qe {
		return fmt.Errorf("%w: block %d is not in the quarantine", ErrCorrupt, b)
	}
	q := s.quarantined()
	if q == 0 {
		return fmt.Errorf("%w: quarantine count is 0 but holds block %d", ErrCorrupt, b)
	}
	tx.Set64(s.st+stOffQuarantined, q-1)
	switch {
	case qb == b && qe == b+1:
		return l.remove(tx, c)
	case qb == b:
		return l.set(tx, c, rec{uint64(b + 1), uint64(qe), ep})
	case qe == b+1:
		return l.set(tx, c, rec{uint64(qb), uint64(b), ep})
	}
	if err := l.set(tx, c, rec{uint64(qb), uint64(b), ep}); err != nil {
		return err
	}
	err = l.insert(tx, rec{uint64(b + 1), uint64(qe), ep})
	if errors.Is(err, errListFull) {
		err = fmt.Errorf("%w: quarantine too fragmented", ErrNoSpace)
	}
	return err
}

// endEpoch ends the epochs before e after a successful device sync: every
// record and quarantined extent tagged below e becomes stale.
func (s *Store) endEpoch(e uint64) {
	s.setEpoch(e, false) // unlogged: see the comment at the top
	pending := s.quarantined() > 0
	if n, err := s.unsyncedFiles().length(); err != nil || n > 0 {
		pending = true
	}
	s.mu.Lock()
	s.needTidy = s.needTidy || pending
	s.mu.Unlock()
}

// syncDevice syncs the device, after the sync in flight if there is one,
// and ends the epochs of everything recorded so far, unless Open skipped
// recovery (ForCheck): then the records of the previous run stay live for
// the next Open to recover from.
func (s *Store) syncDevice() error {
	if err := s.settle(true); err != nil {
		return err
	}
	t := s.tag()
	if err := s.dev.Sync(); err != nil {
		return s.ioErr("syncing disk", err)
	}
	s.mu.Lock()
	s.unsynced = 0
	s.mu.Unlock()
	if !s.recoverySkipped {
		s.endEpoch(t + 1)
	}
	return nil
}

// syncAll syncs the device, then frees what the new epoch made stale (as
// far as tx's journal allows).
func (s *Store) syncAll(tx *pram.Tx) error {
	if err := s.syncDevice(); err != nil {
		return err
	}
	return s.tidy(tx)
}

// syncAllForSpace is syncAll for an allocation that found no usable free
// block when its caller does not checkpoint and retry (SetCheckpointRetry;
// the core does, unless that checkpoint failed): it also lets the blocks
// held for a checkpoint be reused, and those the quarantine frees now (a
// checkpoint cannot be made inside a transaction). A power loss before the
// next checkpoint may then find a file that the arena in RAM had freed or
// rewritten unable to read some of those blocks (EIO: never another
// file's bytes).
func (s *Store) syncAllForSpace(tx *pram.Tx) error {
	s.mu.Lock()
	if len(s.hold) > 0 {
		s.o.Logf("diskstore: the disk is full: reusing %d extents freed since the last checkpoint", len(s.hold))
	}
	s.hold = s.hold[:0]
	s.reuseTidyHeldLocked()
	s.forSpace = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.forSpace = false
		s.mu.Unlock()
	}()
	return s.syncAll(tx)
}

// maybeSync syncs when the data written since the last sync, or the
// quarantine, reaches Options.SyncBytes: in the background (bgsync.go),
// unless Options.ForegroundSync. A writer that has written SyncBytes more
// while a sync is still in flight waits for it: the disk is behind.
func (s *Store) maybeSync(tx *pram.Tx) error {
	over := func() bool {
		s.mu.Lock()
		over := s.unsynced >= s.o.SyncBytes
		s.mu.Unlock()
		return over || s.quarantined()*s.bs >= uint64(s.o.SyncBytes)
	}
	if !over() {
		return nil
	}
	if !s.background() {
		return s.syncAll(tx)
	}
	if s.inFlight() {
		if err := s.settle(true); err != nil {
			return err
		}
		if err := s.tidy(tx); err != nil || !over() {
			return err
		}
	}
	if s.epochWord()&epochStarted != 0 {
		// A failed sync whose retry failed too left records of both tags
		// live (settle): a background sync would end only the older.
		return s.syncAll(tx)
	}
	s.startSync()
	return nil
}

// tidyRoom is the journal room tidy leaves to the rest of the transaction,
// plus what one of its steps may take.
func (s *Store) tidyRoom() uint64 {
	return max(s.a.Geometry().JournalLen/4, 64<<10) + 16<<10
}

// tidy frees the quarantine of past epochs and drops stale unsynced
// records while tx has more than tidyRoom of journal left; what remains is
// done by later calls. It frees, so it may draw on the heap's free reserve
// (alloc.UsingReserve), as a truncate does: each quarantined extent that
// merges with no free neighbour needs a record in the free map, and on a
// full arena the fsync that synced the disk used to fail with ENOSPC here,
// leaving the quarantine (and its space) held.
func (s *Store) tidy(tx *pram.Tx) error { return s.tidyLeaving(tx, 0) }

// tidyLeaving is tidy leaving extra journal room besides tidyRoom: Write
// tidies before it writes, and leaves what its blocks may take
// (JournalPerBlock each, at most half the journal). Tidying left only
// tidyRoom before, less than a write of 4 KiB blocks on free space cut into
// single blocks can take (each block a free-map and a segment-list leaf
// shifted), and the write overflowed the journal: EIO.
func (s *Store) tidyLeaving(tx *pram.Tx, extra uint64) error {
	s.mu.Lock()
	need := s.needTidy
	s.mu.Unlock()
	if !need {
		return nil
	}
	var done bool
	err := s.h.UsingReserve(func() error {
		var err error
		done, err = s.tidySome(tx, s.tidyRoom()+extra)
		return err
	})
	if err != nil || !done {
		return err
	}
	s.mu.Lock()
	s.needTidy = false
	s.onAbortLocked(func() { s.needTidy = true })
	s.mu.Unlock()
	return nil
}

func (s *Store) tidySome(tx *pram.Tx, room uint64) (bool, error) {
	cur := s.epoch()
	// The quarantine, from its end (removing the last record shifts
	// nothing).
	ql := s.quarantineList()
	key := uint64(math.MaxUint64)
	for {
		if tx.Room() < room {
			return false, nil
		}
		c, ok, err := ql.seekLE(key)
		if err != nil {
			return false, err
		}
		if !ok {
			break
		}
		r := ql.get(c)
		x := extent{Block(r[0]), Block(r[1])}
		if x.b < 1 || x.e <= x.b || uint64(x.e) > s.super.Blocks || r[2] > s.tag() {
			return false, fmt.Errorf("%w: quarantine extent [%d, %d) of epoch %d (now %d)", ErrCorrupt, x.b, x.e, r[2], s.tag())
		}
		if r[2] < cur {
			q := s.quarantined()
			if q < x.len() {
				return false, fmt.Errorf("%w: quarantine counts %d blocks, holds [%d, %d)", ErrCorrupt, q, x.b, x.e)
			}
			if err := ql.remove(tx, c); err != nil {
				return false, err
			}
			tx.Set64(s.st+stOffQuarantined, q-x.len())
			if err := s.freeExtent(tx, x); err != nil {
				return false, err
			}
			// Blocks quarantined by an earlier transaction may be reused at
			// once: an abort puts them back into the quarantine, where
			// nothing needs their contents any more (their records are
			// stale). Blocks this transaction took out of a file go back
			// into it on abort: not before this transaction ends.
			s.mu.Lock()
			forCkpt := s.shadowed && !s.forSpace // watchCheckpoints
			inTx := false
			for _, h := range s.heldInTx {
				if h.b < x.e && x.b < h.e {
					inTx = true
					break
				}
			}
			if forCkpt || inTx {
				s.quarantineLocked(x)
			}
			if forCkpt && !inTx {
				s.tidyHeld = append(s.tidyHeld, x)
			}
			s.mu.Unlock()
		}
		if x.b == 1 {
			break
		}
		key = uint64(x.b) - 1
	}
	// Stale records, file by file.
	var segs []pram.Off
	if err := s.unsyncedFiles().walk(func(r rec) bool { segs = append(segs, pram.Off(r[0])); return true }); err != nil {
		return false, err
	}
	for _, seg := range segs {
		done, err := s.tidyFile(tx, seg, cur, room)
		if err != nil || !done {
			return false, err
		}
	}
	return true, nil
}

// tidyFile drops the stale records of seg (all of them, usually, in one
// destroy), and takes seg off the file list when none is left.
func (s *Store) tidyFile(tx *pram.Tx, seg pram.Off, cur, room uint64) (bool, error) {
	if tx.Room() < room {
		return false, nil
	}
	if err := s.validSeg(seg); err != nil {
		// Freed or damaged while listed (a bug or a damaged arena): forget
		// it here; the consistency walk reports the rest.
		s.o.Logf("diskstore: dropping segment list %d from the unsynced list: %v", seg, err)
		return true, s.unregisterUnsynced(tx, seg)
	}
	l := s.unsyncedOf(seg)
	h, err := l.head()
	if err != nil {
		return false, err
	}
	// Stale runs of keys, [lo, hi).
	type krange struct{ lo, hi uint64 }
	var runs []krange
	live := 0
	var bad error
	err = l.walk(func(r rec) bool {
		e, err := s.uentryOf(seg, r)
		if err != nil {
			bad = err
			return false
		}
		if e.epoch >= cur {
			live++
			if len(runs) > 0 && runs[len(runs)-1].hi == math.MaxUint64 {
				runs[len(runs)-1].hi = e.fb
			}
			return true
		}
		if len(runs) == 0 || runs[len(runs)-1].hi != math.MaxUint64 {
			runs = append(runs, krange{e.fb, math.MaxUint64})
		}
		return true
	})
	if err == nil {
		err = bad
	}
	if err != nil {
		return false, err
	}
	if live == 0 && tx.Room() >= room+uint64(h.nleaves)*64+4096 {
		if err := l.destroy(tx); err != nil {
			return false, err
		}
		return true, s.unregisterUnsynced(tx, seg)
	}
	// Some live records, or a list too long to destroy in one go: remove
	// stale runs a bounded number of records at a time.
	const step = 64
	for _, kr := range runs {
		for lo := kr.lo; lo < kr.hi; {
			if tx.Room() < room+2*maxLeafBytes {
				return false, nil
			}
			hi, n := lo, 0
			c, ok, err := l.seekGE(lo)
			for ok && err == nil && n < step {
				k := l.get(c)[0]
				if k >= kr.hi {
					break
				}
				hi, n = k+1, n+1
				c, ok, err = l.next(c)
			}
			if err != nil {
				return false, err
			}
			if n == 0 {
				break
			}
			if err := l.removeRange(tx, lo, hi, nil); err != nil {
				return false, err
			}
			lo = hi
		}
	}
	if live == 0 {
		return true, s.unregisterUnsynced(tx, seg)
	}
	return true, nil
}

// tidyHeldAny reports whether the open transaction's tidy holds freed
// blocks for the next checkpoint (Store.tidyHeld).
func (s *Store) tidyHeldAny() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.tidyHeld) > 0
}

// reuseTidyHeldLocked lets the open transaction reuse the blocks its tidy
// freed and held only for the next checkpoint (syncAllForSpace gives up
// that hold for the disk's sake). Those blocks belonged to no file when the
// transaction began, so an abort that puts them back into the quarantine
// needs nothing of them. Preconditions: s.mu held.
func (s *Store) reuseTidyHeldLocked() {
	for _, x := range s.tidyHeld {
		if i := slices.Index(s.quarantine, x); i >= 0 {
			s.quarantine = slices.Delete(s.quarantine, i, i+1)
		}
	}
	s.tidyHeld = s.tidyHeld[:0]
}
