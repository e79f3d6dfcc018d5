package diskstore

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"syscall"

	"conquest/pram"
)

// Staged writes: a file's whole contents written to the disk without the
// core's lock and given to a new segment list later, in a transaction of
// their own (the core's batch move of files that crossed the threshold,
// its move.go). The move used to copy and sync inside its transaction,
// holding the file system's lock across pwrites that stall behind the
// host's writeback and across the device sync (up to 66 ms, session 30).
//
//  1. Stage (the core's lock held exclusively, no Tx open) copies the data
//     into an aligned buffer (the caller's fill) and reserves free blocks
//     for its non-zero blocks: they stay free in the arena, and allocation
//     skips them (s.staged, as it skips the hold).
//  2. WriteStaged (no lock) hashes and writes the blocks, then syncs the
//     device once for all of them.
//  3. Adopt (a Tx, the core's lock held exclusively) takes the reserved
//     blocks from the free map and maps them, with their checksums, in a
//     new segment list. The data is synced, so no unsynced record is
//     needed: the ordering point (data on the device before the arena
//     points at it) is the sync of step 2.
//  4. Unstage ends the reservation, after Adopt's Tx committed or rolled
//     back, or instead of Adopt when the file changed meanwhile (the core
//     compares its data with the staged copy).
//
// A crash before Adopt's Tx commits leaves the blocks free in the arena,
// holding bytes that nothing maps, like the blocks of a deleted file. A
// reserved block is free and outside the quarantine and the hold when
// reserved, so no rollback or power loss can still need its old contents.

// Staged is one file's data on its way to the disk (see above).
type Staged struct {
	owner uint64   // inode number, for messages and the segment list
	seed  uint64   // the checksum seed of the segment list Adopt creates
	size  uint64   // bytes of data
	buf   []byte   // whole blocks, aligned; zeros past size
	data  []uint64 // the file blocks with data (not all zeros), ascending
	xs    []extent // reserved disk blocks, taken in order by data
	sums  []uint64 // checksum of each file block (0: a hole); WriteStaged
	ioErr bool     // WriteStaged failed on the device (counted by Unstage)
	done  bool     // WriteStaged wrote and synced it
}

// Data is the staged copy of the file's bytes (read-only for the caller).
func (st *Staged) Data() []byte { return st.buf[:st.size] }

// Size is the number of bytes staged.
func (st *Staged) Size() uint64 { return st.size }

// Stage copies size bytes of a file (fill writes them into the buffer it
// is given) and reserves disk blocks for them; nothing in the arena
// changes. ErrNoSpace: not enough usable free blocks (the quarantine and
// the hold are not reclaimed here).
// Preconditions: the core's lock held exclusively, no Tx open.
func (s *Store) Stage(owner, size uint64, fill func(dst []byte)) (*Staged, error) {
	if size > MaxFileSize {
		return nil, fmt.Errorf("%w: staging %d bytes", ErrFileTooBig, size)
	}
	n := (size + s.bs - 1) / s.bs
	st := &Staged{owner: owner, seed: rand.Uint64(), size: size, buf: s.stageBuffer(n * s.bs)}
	fill(st.buf[:size])
	clear(st.buf[size:])
	for fb := uint64(0); fb < n; fb++ {
		if !bytes.Equal(st.buf[fb*s.bs:(fb+1)*s.bs], s.zero) {
			st.data = append(st.data, fb)
		}
	}
	if len(st.data) == 0 {
		return st, nil
	}
	xs, err := s.reserve(uint64(len(st.data)))
	if err != nil {
		return nil, err
	}
	st.xs = xs
	return st, nil
}

// reserve finds need usable free blocks, from where the last reservation
// ended on (wrapping), and adds them to s.staged.
func (s *Store) reserve(need uint64) ([]extent, error) {
	if s.availBlocks() < need { // a move adds to the disk's use (overwriteReserve)
		return nil, fmt.Errorf("%w: %d blocks to stage, %d free, %d of them kept for overwrites and moves", ErrNoSpace, need, s.freeBlocks(), s.growthKeep())
	}
	l := s.freeList()
	from := s.stageRover
	if from < 1 || uint64(from) >= s.super.Blocks {
		from = 1
	}
	var xs []extent
	got := uint64(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	for pass := 0; pass < 2 && got < need; pass++ {
		var c xcur
		var ok bool
		var err error
		if pass == 0 {
			c, ok, err = l.seekLE(uint64(from))
			if err == nil && (!ok || Block(l.get(c)[1]) <= from) {
				c, ok, err = l.seekGE(uint64(from))
			}
		} else {
			c, ok, err = l.first()
		}
		for ; ok && err == nil && got < need; c, ok, err = l.next(c) {
			f := extent{Block(l.get(c)[0]), Block(l.get(c)[1])}
			if pass == 1 && f.b >= from {
				break
			}
			if pass == 0 && f.b < from {
				f.b = from
			}
			if pass == 1 && f.e > from {
				f.e = from // the rest was scanned in pass 0
			}
			s.runsLocked(f, func(r extent) bool {
				r.e = min(r.e, r.b+Block(need-got))
				xs = append(xs, r)
				got += r.len()
				return got < need
			})
		}
		if err != nil {
			return nil, err
		}
	}
	if got < need {
		return nil, fmt.Errorf("%w: %d blocks to stage, %d usable", ErrNoSpace, need, got)
	}
	for _, x := range xs {
		i, _ := slices.BinarySearchFunc(s.staged, x.b, func(y extent, b Block) int { return int(int64(y.b) - int64(b)) })
		s.staged = slices.Insert(s.staged, i, x)
	}
	s.stageRover = xs[len(xs)-1].e
	return xs, nil
}

// WriteStaged hashes and writes the staged files' blocks, one request per
// run contiguous in the file and on the disk, then syncs the device once.
// It changes nothing in the arena.
// Preconditions: none of the core's lock (a Store method that takes a Tx
// may run meanwhile); no other call on these Staged.
func (s *Store) WriteStaged(sts []*Staged) error {
	wrote := false
	for _, st := range sts {
		st.sums = make([]uint64, (st.size+s.bs-1)/s.bs)
		for _, fb := range st.data {
			st.sums[fb] = s.blockSum(st.seed, fb, st.buf[fb*s.bs:(fb+1)*s.bs])
		}
		err := st.eachRun(func(fb, n uint64, disk Block) error {
			_, err := s.dev.WriteAt(st.buf[fb*s.bs:(fb+n)*s.bs], int64(uint64(disk)*s.bs))
			if err != nil {
				return stagedIOErr(fmt.Sprintf("writing disk blocks [%d, %d) for inode %d", disk, uint64(disk)+n, st.owner), err)
			}
			wrote = true
			return nil
		})
		if err != nil {
			st.ioErr = true
			return err
		}
	}
	if wrote {
		if err := s.dev.Sync(); err != nil {
			sts[0].ioErr = true // one device error, counted once
			return stagedIOErr("syncing disk", err)
		}
	}
	for _, st := range sts {
		st.done = true
	}
	return nil
}

// stagedIOErr is ioErr without the count in the arena, which WriteStaged
// may not touch (Unstage counts it).
func stagedIOErr(what string, err error) error {
	if errors.Is(err, syscall.ENOSPC) {
		return fmt.Errorf("%w: %s: %w", ErrNoSpace, what, err)
	}
	return fmt.Errorf("%w: %s: %w", ErrIO, what, err)
}

// eachRun calls fn for each run of data blocks contiguous in the file and
// on the reserved disk blocks: file blocks [fb, fb+n) at disk blocks
// [disk, disk+n).
func (st *Staged) eachRun(fn func(fb, n uint64, disk Block) error) error {
	xi, xoff := 0, Block(0)
	for i := 0; i < len(st.data); {
		fb, disk := st.data[i], st.xs[xi].b+xoff
		n := uint64(1)
		for i+int(n) < len(st.data) && st.data[i+int(n)] == fb+n && disk+Block(n) < st.xs[xi].e {
			n++
		}
		if err := fn(fb, n, disk); err != nil {
			return err
		}
		i += int(n)
		xoff += Block(n)
		if st.xs[xi].b+xoff == st.xs[xi].e {
			xi, xoff = xi+1, 0
		}
	}
	return nil
}

// Adopt gives the staged blocks, written and synced by WriteStaged, to a
// new segment list (returned; owned by st's owner): they leave the free
// map and are mapped with their checksums. Call Unstage after tx commits
// or aborts.
// Preconditions: the core's lock held exclusively.
func (s *Store) Adopt(tx *pram.Tx, st *Staged) (pram.Off, error) {
	if !st.done {
		return 0, fmt.Errorf("%w: inode %d: adopting blocks not written", ErrCorrupt, st.owner)
	}
	seg, err := s.newFile(tx, st.owner, st.seed)
	if err != nil {
		return 0, err
	}
	if err := s.takeStaged(tx, st.xs); err != nil {
		return 0, err
	}
	err = st.eachRun(func(fb, n uint64, disk Block) error { return s.mapRange(tx, seg, fb, disk, n) })
	if err != nil {
		return 0, err
	}
	if err := s.setSums(tx, seg, 0, st.sums); err != nil {
		return 0, err
	}
	s.bump(seg)
	return seg, nil
}

// takeStaged removes the reserved extents from the free map. Runs of
// whole free extents go with one shift per leaf (removeRange), as in
// takeRun: on free space cut into single blocks, one removal per block
// took a leaf of journal each.
func (s *Store) takeStaged(tx *pram.Tx, reserved []extent) error {
	xs := slices.Clone(reserved)
	slices.SortFunc(xs, func(a, b extent) int { return int(int64(a.b) - int64(b.b)) })
	l := s.freeList()
	for i := 0; i < len(xs); {
		x := xs[i]
		c, ok, err := l.seekLE(uint64(x.b))
		if err != nil {
			return err
		}
		if !ok || Block(l.get(c)[1]) < x.e {
			return fmt.Errorf("%w: staged blocks [%d, %d) are no longer free", ErrCorrupt, x.b, x.e)
		}
		j, total := i, x.len()
		for cc := c; Block(l.get(cc)[0]) == xs[j].b && Block(l.get(cc)[1]) == xs[j].e && j+1 < len(xs); {
			next, ok, err := l.next(cc)
			if err != nil {
				return err
			}
			if !ok || Block(l.get(next)[0]) != xs[j+1].b || Block(l.get(next)[1]) != xs[j+1].e {
				break
			}
			cc, j, total = next, j+1, total+xs[j+1].len()
		}
		if j == i {
			if err := s.takeExtent(tx, c, x); err != nil {
				return err
			}
			i++
			continue
		}
		if err := l.removeRange(tx, uint64(xs[i].b), uint64(xs[j].b)+1, nil); err != nil {
			return err
		}
		tx.Set64(s.fm+fmOffFree, s.freeBlocks()-total)
		i = j + 1
	}
	return nil
}

// Unstage ends st's reservation (after Adopt's Tx committed or rolled
// back, or instead of Adopt), and counts a device error of WriteStaged in
// the stats record.
// Preconditions: the core's lock held exclusively, no Tx open.
func (s *Store) Unstage(st *Staged) {
	if st.ioErr {
		s.a.PutU64(s.st+stOffIOErr, s.a.U64(s.st+stOffIOErr)+1)
		st.ioErr = false
	}
	s.mu.Lock()
	for _, x := range st.xs {
		if i, ok := slices.BinarySearchFunc(s.staged, x.b, func(y extent, b Block) int { return int(int64(y.b) - int64(b)) }); ok && s.staged[i] == x {
			s.staged = slices.Delete(s.staged, i, i+1)
		}
	}
	s.mu.Unlock()
	if buf := st.buf; buf != nil && cap(buf) <= maxPooledStage {
		s.stageBufs.Put(&buf)
	}
	st.xs, st.buf, st.done = nil, nil, false
}

// maxPooledStage bounds the staging buffers Unstage keeps for reuse: a
// file waiting to move is at most twice the threshold (2 MiB by default)
// and never more than 4 MiB past it, and one larger (held in the arena,
// see the core's move.go) is rare. Reused, a buffer costs the collector
// nothing: allocated fresh, each moved file's megabytes came back as
// garbage, at the rate files move.
const maxPooledStage = 8 << 20

// stageBuffer is an aligned buffer of n bytes, reused when one fits.
func (s *Store) stageBuffer(n uint64) []byte {
	if p, ok := s.stageBufs.Get().(*[]byte); ok && uint64(cap(*p)) >= n {
		return (*p)[:n]
	}
	return AlignedBuffer(int(n))
}

// StagedBlocks is the number of blocks reserved by Stage and not yet
// released by Unstage (tests).
func (s *Store) StagedBlocks() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	var n uint64
	for _, x := range s.staged {
		n += x.len()
	}
	return n
}
