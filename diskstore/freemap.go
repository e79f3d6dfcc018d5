package diskstore

import (
	"errors"
	"fmt"
	"slices"
	"strings"

	"conquest/pram"
)

// Block is a disk block number. Block 0 holds the superblock and is never
// allocated, so 0 doubles as "no block".
type Block uint64

// extent is the half-open block range [b, e).
type extent struct{ b, e Block }

func (x extent) len() uint64 { return uint64(x.e - x.b) }

// The free map (root slot 5) is an arena allocation of freeMapSize bytes:
//
//	+0  magic      uint64 freeMapMagic
//	+8  blockSize  uint64
//	+16 blocks     uint64 blocks on the disk, block 0 included
//	+24 free       uint64 free blocks (sum of the extents)
//	+32 extents    xlist of {begin, end} records keyed by begin: sorted,
//	               disjoint and never adjacent (frees coalesce)
//	+64 unsynced   xlist of {segment list} records: the files with unsynced
//	               records (unsynced.go)
//	+96 quarantine xlist of {begin, end, epoch} records: blocks neither free
//	               nor in a file until a sync (unsynced.go)
//
// Arenas formatted before the last two existed have zeros there: an empty
// list (the lists are lazy).
const (
	freeMapMagic   = 0x31504d4644514e43 // "CNQDFMP1"
	freeMapSize    = 128
	fmOffBlockSize = 8
	fmOffBlocks    = 16
	fmOffFree      = 24
	fmOffList      = 32
)

func (s *Store) freeList() xlist {
	return xlist{a: s.a, h: s.h, hdr: s.fm + fmOffList, words: 2, what: "free map"}
}

func (s *Store) freeBlocks() uint64 { return s.a.U64(s.fm + fmOffFree) }

// freeExtent returns [b, e) to the free map, coalescing with its neighbours.
// Freeing a block that is already free is reported as ErrCorrupt.
func (s *Store) freeExtent(tx *pram.Tx, x extent) error {
	if x.b < 1 || x.e <= x.b || uint64(x.e) > s.super.Blocks {
		return fmt.Errorf("%w: freeing blocks [%d, %d) of a %d-block disk", ErrCorrupt, x.b, x.e, s.super.Blocks)
	}
	l := s.freeList()
	pc, pok, err := l.seekLE(uint64(x.b))
	if err != nil {
		return err
	}
	nc, nok, err := l.seekGE(uint64(x.b))
	if err != nil {
		return err
	}
	var p, n rec
	if pok {
		p = l.get(pc)
		if Block(p[1]) > x.b {
			return fmt.Errorf("%w: freeing blocks [%d, %d), already free in [%d, %d)", ErrCorrupt, x.b, x.e, p[0], p[1])
		}
	}
	if nok {
		n = l.get(nc)
		if Block(n[0]) < x.e {
			return fmt.Errorf("%w: freeing blocks [%d, %d), already free in [%d, %d)", ErrCorrupt, x.b, x.e, n[0], n[1])
		}
	}
	joinP := pok && Block(p[1]) == x.b
	joinN := nok && Block(n[0]) == x.e
	switch {
	case joinP && joinN:
		if err := l.set(tx, pc, rec{p[0], n[1]}); err != nil {
			return err
		}
		err = l.remove(tx, nc)
	case joinP:
		err = l.set(tx, pc, rec{p[0], uint64(x.e)})
	case joinN:
		err = l.set(tx, nc, rec{uint64(x.b), n[1]})
	default:
		err = l.insert(tx, rec{uint64(x.b), uint64(x.e)})
		if errors.Is(err, errListFull) {
			err = fmt.Errorf("%w: free map too fragmented (%d extents)", ErrNoSpace, maxDirEntries*((maxLeafBytes-leafHeaderSize)/16))
		}
	}
	if err != nil {
		return err
	}
	tx.Set64(s.fm+fmOffFree, s.freeBlocks()+x.len())
	return nil
}

// takeExtent removes [b, e), which must lie inside the free extent at c,
// from the free map.
func (s *Store) takeExtent(tx *pram.Tx, c xcur, x extent) error {
	l := s.freeList()
	f := l.get(c)
	fb, fe := Block(f[0]), Block(f[1])
	if x.b < fb || x.e > fe || x.e <= x.b {
		return fmt.Errorf("%w: taking [%d, %d) from free extent [%d, %d)", ErrCorrupt, x.b, x.e, fb, fe)
	}
	var err error
	switch {
	case x.b == fb && x.e == fe:
		err = l.remove(tx, c)
	case x.b == fb:
		err = l.set(tx, c, rec{uint64(x.e), uint64(fe)})
	case x.e == fe:
		err = l.set(tx, c, rec{uint64(fb), uint64(x.b)})
	default:
		if err = l.set(tx, c, rec{uint64(fb), uint64(x.b)}); err == nil {
			err = l.insert(tx, rec{uint64(x.e), uint64(fe)})
			if errors.Is(err, errListFull) {
				err = fmt.Errorf("%w: free map too fragmented", ErrNoSpace)
			}
		}
	}
	if err != nil {
		return err
	}
	tx.Set64(s.fm+fmOffFree, s.freeBlocks()-x.len())
	return nil
}

// takeRun takes the whole free extents that come first at or after from,
// in order, while each is entirely usable (see usable) and their total
// stays within need, and removes them from the free map with one shift of
// each leaf they lie in (removeRange). Taken one at a time on free space cut
// into single blocks, each was a record removed from the middle of a leaf,
// a shift of up to a leaf of journal per block: moving a 1 MiB file needed
// more than a 256 KiB journal holds. It returns what it took, possibly
// nothing.
func (s *Store) takeRun(tx *pram.Tx, from Block, need uint64) ([]extent, error) {
	l := s.freeList()
	c, ok, err := l.seekGE(uint64(from))
	var xs []extent
	total := uint64(0)
	for ok && err == nil {
		f := l.get(c)
		x := extent{Block(f[0]), Block(f[1])}
		if total+x.len() > need || s.usable(x, 0, x.len()) != x {
			break
		}
		xs = append(xs, x)
		total += x.len()
		c, ok, err = l.next(c)
	}
	if err != nil || len(xs) == 0 {
		return nil, err
	}
	if err := l.removeRange(tx, uint64(xs[0].b), uint64(xs[len(xs)-1].b)+1, nil); err != nil {
		return nil, err
	}
	tx.Set64(s.fm+fmOffFree, s.freeBlocks()-total)
	return xs, nil
}

// usable is the first run of want blocks of the free extent f, at or after
// from, that does not touch the quarantine (blocks freed by the current
// transaction), the hold (freed since the last durable checkpoint, see
// watchCheckpoints) or the blocks staged for a write without the core's
// lock (stage.go). If there is none it returns the longest run there is.
func (s *Store) usable(f extent, from Block, want uint64) (best extent) {
	s.mu.Lock() // the hold changes as checkpoints end
	defer s.mu.Unlock()
	s.runsLocked(extent{max(f.b, from), f.e}, func(run extent) bool {
		if run.len() >= want {
			best = extent{run.b, run.b + Block(want)}
			return false
		}
		if run.len() > best.len() {
			best = run
		}
		return true
	})
	return best
}

// runsLocked calls fn, in order, on each maximal run of blocks of f that
// lies outside the quarantine, the hold and the staged extents (each
// sorted and disjoint), until fn returns false.
// Preconditions: s.mu held.
func (s *Store) runsLocked(f extent, fn func(run extent) bool) {
	q, h, g := s.quarantine, s.hold, s.staged
	// The first of each that ends after f.b.
	qi, _ := slices.BinarySearchFunc(q, f.b, func(x extent, b Block) int { return int(int64(x.e) - int64(b) - 1) })
	hi, _ := slices.BinarySearchFunc(h, f.b, func(x heldExtent, b Block) int { return int(int64(x.x.e) - int64(b) - 1) })
	gi, _ := slices.BinarySearchFunc(g, f.b, func(x extent, b Block) int { return int(int64(x.e) - int64(b) - 1) })
	for b := f.b; b < f.e; {
		for qi < len(q) && q[qi].e <= b {
			qi++
		}
		for hi < len(h) && h[hi].x.e <= b {
			hi++
		}
		for gi < len(g) && g[gi].e <= b {
			gi++
		}
		// The next blocked extent of each list ends after b: one that
		// begins at or before b covers it.
		e, skip := f.e, b
		see := func(x extent) {
			if x.b <= b {
				skip = max(skip, x.e)
			} else {
				e = min(e, x.b)
			}
		}
		if qi < len(q) {
			see(q[qi])
		}
		if hi < len(h) {
			see(h[hi].x)
		}
		if gi < len(g) {
			see(g[gi])
		}
		if skip > b {
			b = skip
			continue
		}
		if !fn(extent{b, e}) {
			return
		}
		b = e
	}
}

// allocExtent takes up to want free blocks: starting exactly at goal if goal
// is free, otherwise the first free run of want blocks at or after goal
// (wrapping around), otherwise the longest free run. It never returns blocks
// in quarantine (freed by the current transaction, or held for blocks
// rewritten since the last sync) and never an empty extent: a full disk is
// ErrNoSpace. When no block is free but the quarantine or the hold has some,
// it returns ErrSpaceHeld if the caller retries after a checkpoint
// (SetCheckpointRetry); otherwise it syncs the device, which releases the
// quarantine (see unsynced.go), lets the held blocks be reused, and tries
// again.
func (s *Store) allocExtent(tx *pram.Tx, want uint64, goal Block) (extent, error) {
	return s.allocKeeping(tx, want, goal, 0)
}

// allocGrowth is allocExtent for blocks that add to what files hold (a
// write into a hole or past the end, fallocate) rather than replace written
// ones: it leaves the overwrite reserve free.
func (s *Store) allocGrowth(tx *pram.Tx, want uint64, goal Block) (extent, error) {
	return s.allocKeeping(tx, want, goal, s.growthKeep())
}

// allocKeeping is allocExtent leaving keep free blocks.
//
// The blocks a sync or a checkpoint could make usable: the quarantine,
// the hold, and what this transaction's own tidy has just freed and holds
// for the checkpoint (a background sync completed since the last
// transaction, and the write's tidy freed the old copies of the rewrites
// before it: until session 37 those were not counted, and a rewrite on a
// full disk failed with ErrNoSpace, with 61 of 61 free blocks "freed by
// this operation").
func (s *Store) allocKeeping(tx *pram.Tx, want uint64, goal Block, keep uint64) (extent, error) {
	x, err := s.allocAbove(tx, want, goal, keep)
	if err == nil || !errors.Is(err, ErrNoSpace) || s.quarantined() == 0 && s.HeldBlocks() == 0 && !s.tidyHeldAny() {
		return x, err
	}
	if s.shadowed && s.ckptRetry.Load() {
		// The caller checkpoints and retries (SetCheckpointRetry).
		return extent{}, ErrSpaceHeld
	}
	if err := s.syncAllForSpace(tx); err != nil {
		return extent{}, err
	}
	return s.allocAbove(tx, want, goal, keep)
}

// allocAbove is allocFree taking at most what lies above keep free blocks.
func (s *Store) allocAbove(tx *pram.Tx, want uint64, goal Block, keep uint64) (extent, error) {
	if keep > 0 {
		free := s.freeBlocks()
		if free <= keep {
			return extent{}, fmt.Errorf("%w: the last %d free blocks are kept for overwrites and moves", ErrNoSpace, free)
		}
		want = min(want, free-keep)
	}
	return s.allocFree(tx, want, goal)
}

// The overwrite reserve.
//
// Written blocks are never overwritten in place: a rewrite goes to a new
// block (copy-on-write) and the old one is freed once the device has synced
// (unsynced.go). So on a disk that growth had filled to the last block, an
// overwrite of a file's existing data failed with ENOSPC, where ext4
// overwrites in place. Growth (writes into holes or past the end,
// fallocate, files moved to the disk) therefore stops overwriteReserve
// blocks short of the end, and only copy-on-write takes those. Each
// rewrite gives back as many blocks as it takes once the next sync lands,
// and an allocation that finds the reserve used up syncs first
// (allocKeeping), so overwrites on a full disk go on at the pace of the
// syncs. statfs counts the reserve as free but not available, as ext4
// counts its reserved blocks. The reserve is not recorded anywhere: it
// follows from the disk's size.

// overwriteReserve is the number of free blocks kept for copy-on-write:
// 1/256 of the disk, at least 1 MiB and a block (a 128 KiB FUSE write, and
// more for the store's own buffers), at most 64 MiB, and never more than an
// eighth of a small disk.
func (s *Store) overwriteReserve() uint64 {
	n := s.super.DataBlocks()
	r := max(n/256, (1<<20+s.bs-1)/s.bs+1)
	return min(r, max((64<<20)/s.bs, 1), n/8)
}

// growthKeep is how many free blocks growth leaves: the overwrite reserve
// and the blocks staged for moves (stage.go), which are free until adopted.
func (s *Store) growthKeep() uint64 { return s.overwriteReserve() + s.StagedBlocks() }

// availBlocks is the free blocks that growth may take.
func (s *Store) availBlocks() uint64 {
	free, keep := s.freeBlocks(), s.growthKeep()
	if free <= keep {
		return 0
	}
	return free - keep
}

// firstFitNear bounds allocFree's first scan from its goal.
const firstFitNear = 64

// allocFree is allocExtent without the sync.
func (s *Store) allocFree(tx *pram.Tx, want uint64, goal Block) (extent, error) {
	if want == 0 {
		return extent{}, fmt.Errorf("%w: allocating 0 blocks", ErrCorrupt)
	}
	if s.freeBlocks() == 0 {
		return extent{}, ErrNoSpace
	}
	l := s.freeList()
	if goal < 1 || uint64(goal) >= s.super.Blocks {
		goal = 1
	}
	// Exactly at goal: keeps a growing file contiguous.
	c, ok, err := l.seekLE(uint64(goal))
	if err != nil {
		return extent{}, err
	}
	if ok {
		f := l.get(c)
		if Block(f[1]) > goal {
			if x := s.usable(extent{goal, Block(f[1])}, goal, want); x.b == goal && x.len() > 0 {
				return x, s.takeExtent(tx, c, x)
			}
		}
	}
	// First fit from goal, over at most firstFitNear free extents; then
	// from where the last search that went that far ended (s.rover); then
	// from goal again, over everything, wrapping. The near scan keeps a file
	// close to its data. It is bounded because the extents near a goal are
	// often blocks freed since the last checkpoint and held (a random
	// rewrite frees one beside every goal): skipping thousands of them
	// took a fifth of the daemon's CPU under 8 KiB random writes.
	var best extent
	var bestCur xcur
	scan := func(from Block, limit int, wrap bool) (extent, xcur, bool, error) {
		for pass := 0; pass < 2; pass++ {
			if pass == 0 {
				c, ok, err = l.seekGE(uint64(from))
			} else if wrap {
				c, ok, err = l.first()
			} else {
				break
			}
			for n := 0; ok && err == nil; n++ {
				f := l.get(c)
				if pass == 1 && Block(f[0]) >= from || limit > 0 && n >= limit {
					break
				}
				s.scanned++
				x := s.usable(extent{Block(f[0]), Block(f[1])}, 0, want)
				if x.len() == want {
					return x, c, true, nil
				}
				if x.len() > best.len() {
					best, bestCur = x, c
				}
				c, ok, err = l.next(c)
			}
			if err != nil {
				return extent{}, xcur{}, false, err
			}
		}
		return extent{}, xcur{}, false, nil
	}
	x, xc, found, err := scan(goal, firstFitNear, false)
	if err == nil && !found && s.rover > 0 && uint64(s.rover) < s.super.Blocks {
		if x, xc, found, err = scan(s.rover, firstFitNear, false); found {
			s.rover = x.e
		}
	}
	if err == nil && !found {
		if x, xc, found, err = scan(goal, 0, true); found {
			s.rover = x.e
		}
	}
	if err != nil {
		return extent{}, err
	}
	if found {
		return x, s.takeExtent(tx, xc, x)
	}
	if best.len() == 0 {
		return extent{}, fmt.Errorf("%w: %d free blocks, all freed by this operation", ErrNoSpace, s.freeBlocks())
	}
	return best, s.takeExtent(tx, bestCur, best)
}

// StoreHeaderError is damage to the store's own records in the arena that
// the rest tells: the magic of the free map or of the stats record damaged
// in a byte or two, the free map's copy of the disk's geometry (block
// size and count) disagreeing with the disk superblock and the arena's
// parameters, which agree with each other, a checksum format word past
// any format (maxSumFormat), or a root slot of the free map or the stats
// record damaged in one byte (mendRoot). Only an Open for fsck
// (Options.ForCheck) gets this far; a mount refuses it. Callers get it
// with errors.As; Store.RewriteHeaders repairs it.
type StoreHeaderError struct {
	Problems []string
}

func (e *StoreHeaderError) Error() string {
	return fmt.Sprintf("%v: %s", ErrCorrupt, strings.Join(e.Problems, "; "))
}

// Unwrap returns ErrCorrupt.
func (e *StoreHeaderError) Unwrap() error { return ErrCorrupt }

// magicDamaged reports whether got looks like want damaged in a byte or two.
func magicDamaged(got, want uint64) bool {
	return got != want && sumBytesDiffer(got, want) <= maxSumDamageBytes
}

// headerErr reports the damage an Open (ForCheck) let through, or nil.
func (s *Store) headerErr() error {
	var p []string
	if r := pram.Off(s.a.Root(RootFreeMap)); r != s.fm {
		p = append(p, fmt.Sprintf("root slot %d points at %d, the free map is at %d", RootFreeMap, r, s.fm))
	}
	if r := pram.Off(s.a.Root(RootStats)); r != s.st {
		p = append(p, fmt.Sprintf("root slot %d points at %d, the stats record is at %d", RootStats, r, s.st))
	}
	if m := s.a.U64(s.fm); m != freeMapMagic {
		p = append(p, fmt.Sprintf("free map magic %#016x", m))
	}
	if m := s.a.U64(s.st); m != statsMagic {
		p = append(p, fmt.Sprintf("stats record magic %#016x", m))
	}
	if bs, n := s.a.U64(s.fm+fmOffBlockSize), s.a.U64(s.fm+fmOffBlocks); bs != uint64(s.super.BlockSize) || n != s.super.Blocks {
		p = append(p, fmt.Sprintf("free map for %d blocks of %d bytes, disk has %d of %d", n, bs, s.super.Blocks, s.super.BlockSize))
	}
	if f := s.a.U64(s.st + stOffSumFormat); f > maxSumFormat {
		p = append(p, fmt.Sprintf("checksum format word %#x (taken as %d)", f, sumFormat(f)))
	}
	if len(p) == 0 {
		return nil
	}
	return &StoreHeaderError{Problems: p}
}

// RewriteHeaders repairs a *StoreHeaderError: it writes the root slots of
// the free map and the stats record (as Open found them), their magics, the
// free map's copy of the geometry
// from the disk superblock, and a damaged checksum format word as the
// format the store was opened with.
func (s *Store) RewriteHeaders(tx *pram.Tx) {
	tx.Set64(pram.RootOff(RootFreeMap), uint64(s.fm))
	tx.Set64(pram.RootOff(RootStats), uint64(s.st))
	tx.Set64(s.fm, freeMapMagic)
	tx.Set64(s.st, statsMagic)
	if f := s.a.U64(s.st + stOffSumFormat); f > maxSumFormat {
		tx.Set64(s.st+stOffSumFormat, sumFormat(f))
	}
	tx.Set64(s.fm+fmOffBlockSize, uint64(s.super.BlockSize))
	tx.Set64(s.fm+fmOffBlocks, s.super.Blocks)
}
