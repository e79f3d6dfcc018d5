package diskstore

import (
	"bytes"
	"errors"
	"fmt"

	"conquest/pram"
)

// flushBatch bounds the staging buffer of one flush step.
const flushBatch = 8 << 20

// JournalPerBlock bounds the undo journal that writing one disk block may
// take: its checksum and unsynced record, and on free space cut into single
// blocks a shifted leaf of the free map and of the segment list (a review
// measured more than 8 KiB). The core sizes the pieces of a write by it,
// and Write leaves that much room when it tidies first.
const JournalPerBlock = 12 << 10

func (s *Store) checkRange(seg pram.Off, off int64, n int) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	if off < 0 || off > MaxFileSize || int64(n) > MaxFileSize-off {
		return fmt.Errorf("%w: [%d, +%d)", ErrFileTooBig, off, n)
	}
	return nil
}

// Write stores data at file offset off of the file at seg.
//
// DurableOnProcessCrash (default): the data is written to the device before
// Write returns, in one request per run of blocks contiguous on disk (at
// most 8 MiB), and published through tx (segments, checksums, an unsynced
// record per block) without a device sync; the core publishes the new size
// in the same tx. Once tx commits, the write survives the death of the
// process. A partial block is merged with the block's current contents and
// written to a new block (copy-on-write), unless the block holds no data yet
// or the write appends over zeros to a block written since the last sync
// (then in place: see inplace.go). When the data written since the last
// sync or the quarantine reaches
// Options.SyncBytes, Write syncs the device. After a power failure, a block
// written since the last sync reads as it was then (or as zeros), never as
// another file's data.
//
// GatherInMemory: Write gathers data in memory; it goes to disk when the
// file's buffer is full (Options.FileBuffer), holds MaxRuns disjoint
// ranges, or all buffers together exceed Options.TotalBuffer; then Write
// flushes (see Flush) through tx. Reads see buffered data at once. A crash,
// even of the process alone, loses buffered data that was never flushed:
// the file then reads as before the write (old data, or zeros where it had
// none), never as another file's data.
func (s *Store) Write(tx *pram.Tx, seg pram.Off, off int64, data []byte) error {
	if err := s.checkRange(seg, off, len(data)); err != nil {
		return err
	}
	if len(data) == 0 {
		return nil
	}
	if s.durable() {
		if err := s.settle(false); err != nil {
			return err
		}
		leave := min((uint64(len(data))/s.bs+2)*JournalPerBlock, s.a.Geometry().JournalLen/2)
		if err := s.tidyLeaving(tx, leave); err != nil {
			return err
		}
		if err := s.writeRuns(tx, seg, []run{{off, data}}); err != nil {
			return err
		}
		return s.maybeSync(tx)
	}
	s.mu.Lock()
	fs := s.addLocked(seg, off, data)
	full := fs.bytes >= s.o.FileBuffer || len(fs.runs) > MaxRuns || s.buffered > s.o.TotalBuffer
	s.mu.Unlock()
	if full {
		return s.Flush(tx, seg)
	}
	return nil
}

// Writeback writes the file's buffered data (GatherInMemory) to disk and
// publishes it, which syncs the device first; in DurableOnProcessCrash mode
// nothing is ever buffered and it does nothing. Unlike Flush it does not
// sync data that is on the device already: the core may call it at the last
// close, where durability is not promised, to spare a sync per file.
func (s *Store) Writeback(tx *pram.Tx, seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	return s.flushBuffer(tx, seg)
}

// WriteThrough writes data and flushes the file at once: the data is on
// disk and published through tx when it returns (Write, then Flush; the
// core calls the two itself, with the move's other steps between them).
func (s *Store) WriteThrough(tx *pram.Tx, seg pram.Off, off int64, data []byte) error {
	if err := s.Write(tx, seg, off, data); err != nil {
		return err
	}
	return s.Flush(tx, seg)
}

// Flush makes the file's data durable on the device: it writes its buffered
// data (GatherInMemory) and, if the file has blocks written since the last
// device sync (DurableOnProcessCrash), syncs the device. Buffered data is
// written and published through tx in that order (the ordering point):
// blocks are written in large sequential requests, the device is synced,
// and only then do the segment list and checksums in the arena point at the
// new data. New data goes to blocks that hold no data of the file (newly
// allocated or preallocated blocks, whose checksums are still 0, so they
// read as zeros until tx commits); data that replaces written blocks goes to
// new blocks (copy-on-write) and the old blocks are freed (or quarantined),
// so a crash at any point leaves every block either old or new, never torn.
// On error nothing is published, blocks allocated for the flush are freed
// and the data stays buffered; the caller aborts tx (Store.Abort) or reports
// the error. Flush and Fsync are the same.
func (s *Store) Flush(tx *pram.Tx, seg pram.Off) error {
	if err := s.validSeg(seg); err != nil {
		return err
	}
	if err := s.flushBuffer(tx, seg); err != nil {
		return err
	}
	live, err := s.hasLive(seg)
	if err == nil && live && s.inFlight() {
		// The sync in flight may cover all the file has written.
		if err = s.settle(true); err == nil {
			live, err = s.hasLive(seg)
		}
	}
	if err == nil && live {
		err = s.syncAll(tx)
	}
	if err == nil {
		err = s.takeSyncErr()
	}
	return err
}

// flushBuffer writes and publishes the file's buffered data.
func (s *Store) flushBuffer(tx *pram.Tx, seg pram.Off) error {
	s.mu.Lock()
	fs := s.files[seg]
	if fs == nil || fs.empty() {
		s.mu.Unlock()
		return nil
	}
	runs := fs.runs
	s.setRunsLocked(fs, nil)
	s.mu.Unlock()
	if err := s.writeRuns(tx, seg, runs); err != nil {
		s.mu.Lock()
		s.setRunsLocked(fs, mergeRuns(runs, fs.runs))
		s.mu.Unlock()
		return err
	}
	return nil
}

// mergeRuns overlays newer runs on older ones.
func mergeRuns(older, newer []run) []run {
	if len(newer) == 0 {
		return older
	}
	tmp := &Store{files: map[pram.Off]*fileState{0: {runs: older}}}
	for _, r := range newer {
		tmp.addLocked(0, r.off, r.data)
	}
	return tmp.files[0].runs
}

// Fsync makes the file durable up to the commit of tx: it flushes the
// buffered data and syncs the device if the file has data written since the
// last sync (see Flush). After Store.Commit the core persists the arena
// metadata (Store.Persist and the inode), completing the ordering "disk
// data, then arena metadata".
func (s *Store) Fsync(tx *pram.Tx, seg pram.Off) error { return s.Flush(tx, seg) }

// FlushAll flushes every file with buffered data and syncs the device if
// anything was written to it since the last sync (sync(2), unmount).
func (s *Store) FlushAll(tx *pram.Tx) error {
	s.mu.Lock()
	var segs []pram.Off
	for seg, fs := range s.files {
		if !fs.empty() {
			segs = append(segs, seg)
		}
	}
	s.mu.Unlock()
	for _, seg := range segs {
		if err := s.flushBuffer(tx, seg); err != nil {
			return err
		}
	}
	return s.SyncWritten(tx)
}

// SyncPending reports whether SyncWritten has anything to do: blocks were
// written since the last device sync, a background sync is in flight, or
// the failure of one waits to be reported. Callers hold the core's lock,
// shared at least (s.bg and s.syncErr change only under it exclusively).
func (s *Store) SyncPending() bool {
	s.mu.Lock()
	dirty := s.unsynced > 0
	s.mu.Unlock()
	return dirty || s.bg != nil || s.syncErr != nil
}

// SyncWritten makes every block written to the device so far durable, for
// an fsync that makes every change durable (whichever file it names): it
// syncs the device if anything was written since the last sync, else waits
// for the background sync in flight. Unlike FlushAll it leaves gathered
// data (GatherInMemory) in memory: the core has not published its sizes.
func (s *Store) SyncWritten(tx *pram.Tx) error {
	s.mu.Lock()
	dirty := s.unsynced > 0
	s.mu.Unlock()
	var err error
	if dirty {
		err = s.syncAll(tx)
	} else if err = s.settle(true); err == nil {
		err = s.tidy(tx)
	}
	if err == nil {
		err = s.takeSyncErr()
	}
	return err
}

// Truncate sets the file's data to end at size: buffered data beyond it is
// dropped, blocks wholly beyond it are freed, and the tail of the last block
// is zeroed (copy-on-write, as for any overwrite), so that growing the file
// again reads zeros. The core calls it on every size change made by
// truncate(2) or ftruncate(2), up or down.
func (s *Store) Truncate(tx *pram.Tx, seg pram.Off, size int64) error {
	if err := s.checkRange(seg, size, 0); err != nil {
		return err
	}
	s.mu.Lock()
	s.dropBufferLocked(seg, size)
	s.mu.Unlock()
	nb := (uint64(size) + s.bs - 1) / s.bs
	if err := s.dropFrom(tx, seg, nb); err != nil {
		return err
	}
	return s.zeroTail(tx, seg, size)
}

// ZeroTail zeroes the file's bytes from size to the end of the block that
// holds size and drops buffered data from size on, as Truncate does, but
// frees no block. A cut made in several transactions calls it in the first,
// before it publishes the smaller size: the cut's only device write then
// comes before anything changes, so a disk that fails it leaves the file as
// it was, and once the size is published nothing past it can show again
// however the later steps end. The later steps' Truncate writes the same
// zeros again.
func (s *Store) ZeroTail(tx *pram.Tx, seg pram.Off, size int64) error {
	if err := s.checkRange(seg, size, 0); err != nil {
		return err
	}
	s.mu.Lock()
	s.dropBufferLocked(seg, size)
	s.mu.Unlock()
	return s.zeroTail(tx, seg, size)
}

// zeroTail is Truncate's write: the tail of the block holding size, when
// that block is written, size is not a block boundary and the tail is not
// zeros already (the last step of a cut whose first step zeroed it, where
// in GatherInMemory mode, whose writes end with a sync, the same zeros would
// take another copy-on-write and sync; a review counted them).
func (s *Store) zeroTail(tx *pram.Tx, seg pram.Off, size int64) error {
	if uint64(size)%s.bs == 0 {
		return nil
	}
	last := uint64(size) / s.bs
	sp, err := s.lookup(seg, last)
	if err != nil || sp.disk == 0 {
		return err
	}
	var sum [1]uint64
	if err := s.getSums(seg, last, sum[:]); err != nil {
		return err
	}
	zeros := make([]byte, int64((last+1)*s.bs)-size)
	if sum[0] != 0 && !s.zerosAt(seg, size, len(zeros)) {
		err := s.writeRuns(tx, seg, []run{{size, zeros}})
		if errors.Is(err, ErrDataChecksum) {
			// The last block fails its checksum (found before the
			// write changed anything): its bytes below size are lost
			// already, and zeroing its tail would make the checksum
			// vouch for damaged data. The cut goes on without it: the
			// block keeps failing (EIO, reported by fsck, a hole after
			// fsck --repair --zero-bad-blocks), and a truncate whose
			// last step ended here no longer fails for good, leaving
			// its file an orphan no close or fsck could finish.
			s.o.Logf("diskstore: inode %d, offset %d, disk block %d: truncated to %d with its damaged last block left as it is",
				s.owner(seg), last*s.bs, sp.disk, size)
			err = nil
		}
		if err != nil {
			return err
		}
	}
	// Contents of the last sync that a crash may restore end here too.
	return s.limitKeep(tx, seg, last, uint64(size)%s.bs)
}

// zerosAt reports whether the file reads as n zero bytes at off (false if
// it cannot be read: the write then finds out why).
func (s *Store) zerosAt(seg pram.Off, off int64, n int) bool {
	p := make([]byte, n)
	if _, err := s.ReadAt(seg, p, off, nil); err != nil {
		return false
	}
	return bytes.Equal(p, s.zero[:n])
}

// blk is the plan for one file block of a write.
type blk struct {
	disk    Block  // current mapping (0: hole)
	old     uint64 // current checksum
	sum     uint64 // new checksum
	dst     Block  // where the new data goes (0: no write)
	cow     bool   // dst replaces a written block
	filled  bool   // runs cover the whole block
	inPlace bool   // written in place over zeros [lo, hi) (inplace.go)
	lo, hi  int64
	same    bool // mapped, contents unchanged: no write, no new block
}

// writeRuns writes runs (sorted, disjoint) to disk and publishes them.
func (s *Store) writeRuns(tx *pram.Tx, seg pram.Off, runs []run) error {
	bs := int64(s.bs)
	maxBlocks := max(uint64(flushBatch)/s.bs, 1)
	for i := 0; i < len(runs); {
		// A batch: consecutive runs whose blocks are contiguous, at most
		// maxBlocks blocks.
		fb0 := uint64(runs[i].off / bs)
		fb1 := uint64((runs[i].end() + bs - 1) / bs)
		j := i + 1
		for j < len(runs) && uint64(runs[j].off/bs) <= fb1 && uint64((runs[j].end()+bs-1)/bs)-fb0 <= maxBlocks {
			fb1 = uint64((runs[j].end() + bs - 1) / bs)
			j++
		}
		for lo := fb0; lo < fb1; lo += maxBlocks {
			if err := s.writeBlocks(tx, seg, lo, min(fb1, lo+maxBlocks), runs[i:j]); err != nil {
				return err
			}
		}
		i = j
	}
	return nil
}

// writeBlocks writes the parts of runs that fall in file blocks [fb0, fb1).
func (s *Store) writeBlocks(tx *pram.Tx, seg pram.Off, fb0, fb1 uint64, runs []run) error {
	if s.useReserve {
		// A write over blocks already mapped may take half of the
		// heap's reserve for what its copy-on-write adds (SetUseReserve).
		mapped, err := s.allMapped(seg, fb0, fb1)
		if err != nil {
			return err
		}
		if mapped {
			return s.h.UsingHalfReserve(func() error { return s.writeBlocksNow(tx, seg, fb0, fb1, runs) })
		}
	}
	return s.writeBlocksNow(tx, seg, fb0, fb1, runs)
}

// allMapped reports whether every file block in [fb0, fb1) has a disk
// block.
func (s *Store) allMapped(seg pram.Off, fb0, fb1 uint64) (bool, error) {
	for fb := fb0; fb < fb1; {
		sp, err := s.lookup(seg, fb)
		if err != nil || sp.disk == 0 {
			return false, err
		}
		fb += min(sp.n, fb1-fb)
	}
	return true, nil
}

// writeBlocksNow is writeBlocks.
func (s *Store) writeBlocksNow(tx *pram.Tx, seg pram.Off, fb0, fb1 uint64, runs []run) error {
	if fb1-fb0 == 1 {
		if done, err := s.appendFast(tx, seg, fb0, runs); done || err != nil {
			return err
		}
	}
	bs := s.bs
	n := fb1 - fb0
	// One run covering every block (a large write, aligned): hash and write
	// from the caller's data, without staging it.
	whole := len(runs) == 1 && runs[0].off <= int64(fb0*bs) && runs[0].end() >= int64(fb1*bs)
	var buf []byte
	if whole {
		buf = runs[0].data[int64(fb0*bs)-runs[0].off : int64(fb1*bs)-runs[0].off]
	} else {
		if uint64(len(s.scratch)) < n*bs {
			s.scratch = AlignedBuffer(int(n * bs))
		}
		buf = s.scratch[:n*bs]
	}
	plan := make([]blk, n)
	olds := make([]uint64, n)
	if err := s.getSums(seg, fb0, olds); err != nil {
		return err
	}
	for fb := fb0; fb < fb1; {
		sp, err := s.lookup(seg, fb)
		if err != nil {
			return err
		}
		k := min(sp.n, fb1-fb)
		for i := uint64(0); i < k; i++ {
			p := &plan[fb-fb0+i]
			p.old = olds[fb-fb0+i]
			if sp.disk != 0 {
				p.disk = sp.disk + Block(i)
			} else if p.old != 0 {
				return fmt.Errorf("%w: inode %d: file block %d has a checksum but no disk block", ErrCorrupt, s.owner(seg), fb+i)
			}
		}
		fb += k
	}
	// Which blocks the runs cover entirely.
	start, stop := int64(fb0*bs), int64(fb1*bs)
	for _, r := range runs {
		lo, hi := max(r.off, start), min(r.end(), stop)
		for b := (lo + int64(bs) - 1) / int64(bs); (b+1)*int64(bs) <= hi; b++ {
			plan[uint64(b)-fb0].filled = true
		}
	}
	// Old contents of partly covered blocks: from the verified-block cache,
	// else read and verified; or zeros.
	seed := s.a.U64(seg + slOffSeed)
	for i := range plan {
		p := &plan[i]
		dst := buf[uint64(i)*bs : uint64(i+1)*bs]
		if p.filled || p.old == 0 {
			if !p.filled {
				if p.disk != 0 {
					// Kept as zeros around the write: not if its page's
					// check says the 0 may be damage (sumcheck.go).
					if ok, _, err := s.checkPageOf(seg, fb0+uint64(i)); err != nil {
						return err
					} else if !ok {
						return s.lostSumErr(seg, fb0+uint64(i), p.disk)
					}
				}
				clear(dst)
			}
			continue
		}
		if s.cache.get(seg, fb0+uint64(i), seed, p.disk, p.old, dst, 0) {
			continue
		}
		if err := s.readVerified(seg, fb0+uint64(i), p.disk, []uint64{p.old}, dst); err != nil {
			return err
		}
	}
	// Appends in place: partly covered written blocks, written since the
	// last sync, zeros under the write.
	cur := s.tag()
	if s.durable() {
		for i := range plan {
			p := &plan[i]
			if p.filled || p.old == 0 || p.disk == 0 {
				continue
			}
			at := uint64(i) * bs
			lo, hi := inPlaceRange(runs, int64((fb0+uint64(i))*bs), int64(bs))
			if lo >= hi || !bytes.Equal(buf[at+uint64(lo):at+uint64(hi)], s.zero[:hi-lo]) {
				continue
			}
			e, _, found, err := s.findUnsynced(seg, fb0+uint64(i))
			if err != nil {
				return err
			}
			if found && e.epoch == cur && s.inPlaceSafe(p.disk) {
				p.inPlace, p.lo, p.hi = true, lo, hi
			}
		}
	}
	for _, r := range runs {
		lo, hi := max(r.off, start), min(r.end(), stop)
		if lo < hi && !whole {
			copy(buf[lo-start:hi-start], r.data[lo-r.off:hi-r.off])
		}
	}
	for i := range plan {
		p := &plan[i]
		p.sum = s.blockSum(seed, fb0+uint64(i), buf[uint64(i)*bs:uint64(i+1)*bs])
		switch {
		case p.sum == 0:
			// Zeros need no disk block: a hole stays a hole, and a block
			// that held data is unmapped and freed (held until no durable
			// checkpoint maps it), as PunchHole does with whole blocks.
			// Kept mapped with checksum 0, the next write would take it for
			// a block that never held data and land in place, over the
			// bytes the last durable checkpoint may still map there with
			// their checksum: a power loss would bring that checkpoint
			// back with a block that fails it.
			p.inPlace = false
			p.cow = p.disk != 0 && p.old != 0
		case p.disk != 0 && p.old == 0:
			p.dst = p.disk // holds no data: written in place
		case p.inPlace && p.sum == p.old:
			p.inPlace, p.same = false, true // zeros over zeros: nothing changes
		case p.inPlace && s.takeIntent(intentRec{seg, fb0 + uint64(i), p.disk, uint64(p.lo), uint64(p.hi), p.old}):
			p.dst = p.disk
		default:
			p.inPlace = false
			p.cow = p.disk != 0
		}
	}
	allocs, err := s.allocFor(tx, seg, fb0, plan)
	if err != nil {
		return err
	}
	if s.tag() != cur {
		// Allocation synced the device to reclaim the quarantine: blocks
		// to append to in place now hold synced data. Copy-on-write.
		moved := false
		for i := range plan {
			if p := &plan[i]; p.inPlace {
				p.inPlace, p.cow, p.dst, moved = false, true, 0, true
			}
		}
		if moved {
			more, err := s.allocFor(tx, seg, fb0, plan)
			if err != nil {
				s.unalloc(tx, allocs)
				return err
			}
			allocs = append(allocs, more...)
		}
	}
	wrote, err := s.writePlan(fb0, plan, buf)
	if err != nil {
		s.unalloc(tx, allocs)
		return err
	}
	if wrote > 0 {
		if !s.durable() {
			if err := s.syncDevice(); err != nil {
				s.unalloc(tx, allocs)
				return err
			}
		} else {
			s.wroteUnsynced(wrote)
		}
	}
	s.markFresh(plan)
	// Publish: the data is on the device (synced, or recorded unsynced).
	kept := make([]bool, n) // replaced blocks that go to the quarantine
	if s.durable() {
		for i := range plan {
			if plan[i].dst == 0 {
				continue
			}
			if kept[i], err = s.noteUnsynced(tx, seg, fb0+uint64(i), &plan[i]); err != nil {
				return err
			}
		}
	}
	for i := range plan {
		if p := plan[i]; p.cow && p.dst == 0 {
			// Now a hole: no contents of a last sync to restore.
			if err := s.dropUnsynced(tx, seg, fb0+uint64(i), fb0+uint64(i)+1); err != nil {
				return err
			}
		}
	}
	for i := 0; i < len(plan); {
		if !plan[i].cow {
			i++
			continue
		}
		j := i + 1
		for j < len(plan) && plan[j].cow {
			j++
		}
		if _, err := s.unmapRange(tx, seg, fb0+uint64(i), fb0+uint64(j)); err != nil {
			return err
		}
		i = j
	}
	for _, a := range allocs {
		if err := s.mapRange(tx, seg, a.fb, a.x.b, a.x.len()); err != nil {
			return err
		}
	}
	sums := make([]uint64, n)
	changed := false
	for i := range plan {
		sums[i] = plan[i].sum
		changed = changed || plan[i].sum != plan[i].old
	}
	if changed {
		if err := s.setSums(tx, seg, fb0, sums); err != nil {
			return err
		}
	}
	s.bump(seg)
	// Partly written blocks are likely to be written or read again in
	// part (small appends, small random writes): keep their new contents.
	// Should tx abort, the checksum goes back and the entry stops matching.
	for i := range plan {
		if p := plan[i]; !p.filled && p.sum != 0 {
			disk := p.dst
			if disk == 0 {
				disk = p.disk
			}
			s.cache.put(seg, fb0+uint64(i), seed, disk, p.sum, buf[uint64(i)*bs:uint64(i+1)*bs])
		}
	}
	var freed, held []extent
	for i := range plan {
		if p := plan[i]; p.cow {
			if kept[i] {
				held = appendBlock(held, p.disk)
			} else {
				freed = appendBlock(freed, p.disk)
			}
		}
	}
	for _, x := range held {
		if err := s.recordAlloc(func() error { return s.quarantineAdd(tx, x) }); err != nil {
			return err
		}
	}
	return s.release(tx, freed)
}

// appendBlock adds block b to xs, extending the last extent when b follows
// it.
func appendBlock(xs []extent, b Block) []extent {
	if n := len(xs); n > 0 && xs[n-1].e == b {
		xs[n-1].e++
		return xs
	}
	return append(xs, extent{b, b + 1})
}

// alloc is an extent allocated by a flush for file blocks from fb.
type allocation struct {
	fb uint64
	x  extent
}

// preallocGap is how far past a file's mapped end a run of new blocks may
// start and still be taken for an append that is preallocated for (see
// allocFor): a stream's writes may reach the store a little out of order.
// A run further out is a sparse write, and gets only its own blocks:
// preallocated blocks inside the file's size are not trimmed at close, so
// before, writes of 4 KiB every 10 MiB held 7 MiB of disk each (ext4: 4 KiB).
const preallocGap = 4 << 20

// allocFor allocates disk blocks for the plan entries that need a new
// block (holes and copy-on-write), sets their dst, and returns the extents
// with the file blocks they map. A run of new blocks that extends the file's
// mapped end, starting at most preallocGap past it, is followed by
// preallocation: the extent grows with the file (about the size it already
// holds, at least 1 MiB unless most of the mapped range is holes, capped at
// Options.MaxExtent) and is placed right after the file's last block when
// that is free.
func (s *Store) allocFor(tx *pram.Tx, seg pram.Off, fb0 uint64, plan []blk) (allocs []allocation, err error) {
	defer func() {
		if err != nil {
			s.unalloc(tx, allocs)
			allocs = nil
		}
	}()
	needs := func(p blk) bool { return p.sum != 0 && p.dst == 0 && !p.same }
	for i := 0; i < len(plan); {
		if !needs(plan[i]) {
			i++
			continue
		}
		j := i + 1
		for j < len(plan) && needs(plan[j]) && plan[j].cow == plan[i].cow {
			j++
		}
		fb, count := fb0+uint64(i), uint64(j-i)
		want := count
		// What the run leaves free: nothing for copy-on-write, the
		// overwrite reserve and the staged blocks for growth (freemap.go).
		keep := uint64(0)
		if !plan[i].cow {
			keep = s.growthKeep()
		}
		avail := func() uint64 { free := s.freeBlocks(); return free - min(free, keep) }
		if !plan[i].cow {
			end, err := s.mappedEnd(seg)
			if err != nil {
				return allocs, err
			}
			if fb+count >= end && fb <= end+max(preallocGap/s.bs, 1) {
				held := s.a.U64(seg + slOffBlocks)
				// At least 1 MiB for a file dense from its start; a sparse
				// one (most of its mapped range holes) grows by what it
				// holds only, so that a write that crosses a block
				// boundary far out, which reaches the store as two runs,
				// does not take a megabyte for its second half.
				minGrow := (1 << 20) / s.bs
				if held*2 < end {
					minGrow = 1
				}
				grow := min(max(held, minGrow), max(s.o.MaxExtent/s.bs, 1))
				// Never more than a quarter of the free blocks: a file that
				// took all of them ahead would leave none for the
				// copy-on-write of its own partly written last block after
				// a sync, and its writes would fail with ENOSPC while it
				// held unwritten blocks (a 64 MiB disk was full at 38 MiB).
				grow = min(grow, avail()/4)
				want = max(count, grow)
				sp, err := s.lookup(seg, fb+count)
				if err != nil {
					return allocs, err
				}
				if sp.disk != 0 {
					sp.n = 0
				}
				want = min(want, count+sp.n) // only into the hole after the run
				// and never past the last block a file may have.
				want = min(want, max(count, s.fileBlocks()-fb))
			}
		}
		goal, err := s.goal(seg, fb)
		if err != nil {
			return allocs, err
		}
		got := uint64(0)
		use := func(x extent) error {
			allocs = append(allocs, allocation{fb + got, x})
			if pa, ok := s.dev.(preallocator); ok {
				if err := pa.preallocate(int64(uint64(x.b)*s.bs), int64(x.len()*s.bs)); err != nil {
					return s.ioErr(fmt.Sprintf("allocating disk blocks [%d, %d) in the image", x.b, x.e), err)
				}
			}
			// The run's blocks, and preallocated blocks after it that this
			// batch writes too (they were holes), get their destination.
			for k := uint64(0); k < x.len() && uint64(i)+got+k < uint64(len(plan)); k++ {
				if p := &plan[uint64(i)+got+k]; p.sum != 0 {
					p.dst = x.b + Block(k)
				}
			}
			got += x.len()
			goal = x.e
			return nil
		}
		for got < count {
			asked := want - got
			x, err := s.allocKeeping(tx, asked, goal, keep)
			if err != nil {
				return allocs, err
			}
			if err := use(x); err != nil {
				return allocs, err
			}
			if got >= count {
				break
			}
			want = count // partial: take only what is needed from here on
			if asked == count-(got-x.len()) {
				// No free run holds what is left: take the whole free
				// extents that follow x at once (takeRun).
				xs, err := s.takeRun(tx, x.e, min(count-got, avail()))
				if err != nil {
					return allocs, err
				}
				for _, x := range xs {
					if err := use(x); err != nil {
						return allocs, err
					}
				}
			}
		}
		if got > count {
			s.notePrealloc(seg, fb, fb+count, fb+got) // prealloc.go
		}
		i = j
	}
	return allocs, nil
}

// goal is the disk block the data of file block fb would best go to: right
// after the disk block of the nearest mapped block before it.
func (s *Store) goal(seg pram.Off, fb uint64) (Block, error) {
	l := s.segs(seg)
	c, ok, err := l.seekLE(fb)
	if err != nil || !ok {
		return 0, err
	}
	x, err := s.segAt(l, c)
	if err != nil {
		return 0, err
	}
	if fb < x.end() { // copy-on-write of a mapped block: near its old place
		return x.disk + Block(x.count), nil
	}
	return x.disk + Block(x.count) + Block(fb-x.end()), nil
}

// unalloc returns extents allocated by a failed flush to the free map, best
// effort: the caller aborts the transaction anyway. It stops while the
// journal still has room for one more insertion (unallocRoom): giving back
// hundreds of single blocks that takeRun took with one shift per leaf costs
// a shift each, and overflowing the journal here turned an ENOSPC into EIO.
func (s *Store) unalloc(tx *pram.Tx, allocs []allocation) {
	for _, a := range allocs {
		if tx.Room() < unallocRoom {
			return
		}
		_ = s.freeExtent(tx, a.x)
	}
}

// unallocRoom is the journal one free-map insertion may take: a leaf shifted,
// a leaf split and the directory grown.
const unallocRoom = 3*maxLeafBytes + maxDirEntries*dirEntrySize

// writePlan writes the blocks with a destination, one request per run of
// blocks contiguous both in the file and on disk, and returns the bytes
// written.
func (s *Store) writePlan(fb0 uint64, plan []blk, buf []byte) (int64, error) {
	bs := s.bs
	wrote := int64(0)
	for i := 0; i < len(plan); {
		if plan[i].dst == 0 {
			i++
			continue
		}
		if p := plan[i]; p.inPlace { // only the aligned range under the write
			lo := uint64(p.lo) &^ (Alignment - 1)
			hi := min((uint64(p.hi)+Alignment-1)&^(Alignment-1), bs)
			at := uint64(i) * bs
			if _, err := s.dev.WriteAt(buf[at+lo:at+hi], int64(uint64(p.dst)*bs+lo)); err != nil {
				return 0, s.ioErr(fmt.Sprintf("writing disk block %d", p.dst), err)
			}
			wrote += int64(hi - lo)
			i++
			continue
		}
		j := i + 1
		for j < len(plan) && plan[j].dst == plan[j-1].dst+1 && !plan[j].inPlace {
			j++
		}
		off := int64(uint64(plan[i].dst) * bs)
		if _, err := s.dev.WriteAt(buf[uint64(i)*bs:uint64(j)*bs], off); err != nil {
			return 0, s.ioErr(fmt.Sprintf("writing disk blocks [%d, %d)", plan[i].dst, plan[j-1].dst+1), err)
		}
		wrote += int64(uint64(j-i) * bs)
		i = j
	}
	return wrote, nil
}

// wroteUnsynced counts bytes written to the device without a sync
// (DurableOnProcessCrash) and starts the device's writeback every
// kickBytes.
func (s *Store) wroteUnsynced(n int64) {
	s.mu.Lock()
	s.unsynced += n
	s.kicked += n
	kick := s.kicked >= kickBytes
	if kick {
		s.kicked = 0
	}
	s.mu.Unlock()
	if kb, ok := s.dev.(writebackStarter); kick && ok && s.kicking.CompareAndSwap(false, true) {
		// On a goroutine: starting writeback submits the I/O (block
		// allocation of the image file, bios), which the writer need not
		// wait for. One at a time; a start while one runs is dropped, the
		// running one covers it.
		s.bgWG.Add(1)
		go func() {
			defer s.bgWG.Done()
			defer s.kicking.Store(false)
			kb.startWriteback()
		}()
	}
}

// writebackStarter is a device whose writes go through a page cache and can
// be sent on to the disk in the background, without waiting for them.
type writebackStarter interface {
	startWriteback()
}

// kickBytes is how much is written through a page-cached device before its
// writeback is started (DurableOnProcessCrash): the device then writes
// while more data comes in, as the kernel's flusher does for any file
// system, instead of all at the next sync (every Options.SyncBytes, or
// fsync), which the writer would wait for.
const kickBytes = 8 << 20
