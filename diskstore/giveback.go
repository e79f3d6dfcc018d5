package diskstore

import "fmt"

// Free space given back to the image's file system.
//
// The allocator moves on through the disk (the goal after a file's end, the
// rover; freemap.go) and a freed block is not written again until it is
// reused, so an image file on the host takes the space of every block the
// store has ever used: in a soak review (session 50) a 2 GiB image took all
// 2 GiB on the host while use never passed about 70 MB, and deleting every
// file gave nothing back. ext4 on a loop file does the same unless it
// discards.
//
// So a mount (Options.PunchFree) calls GiveBack right after Open, once the
// core has checked what a crash may have damaged and before its first
// transaction, and it punches a hole in the image at every free extent: the
// host's file system frees those blocks, those of space reserved ahead of
// writes and never written included (fileDevice.punch). Only when Open found the store
// clean, with nothing written since the last device sync, nothing in
// quarantine, no append to undo and no damage (recover), so that recovery
// restored nothing; after a kill -9 of a daemon whose data was synced that
// is so too. A free map that does not add up, or a damaged orphan list (the
// core looks first), is not trusted either.
// Every free extent is then free in the durable state any later crash
// returns to: the arena as opened is durable (a reused RAM copy is
// checkpointed before the store opens, pram.OpenWith) and blocks freed
// after a checkpoint are held until the next (runsLocked leaves the hold
// and staged blocks out; the quarantine is not in the free map). The check
// comes first because a damaged free map may list a file's blocks as free:
// fsck --repair keeps their data, and a punch would have zeroed it (found by
// a review of the first version, which punched inside Open). A punched
// block reads as zeros, as a block never written does; nothing reads a free
// block anyway (a block is read only through a file's segment list, and
// only once its checksum is set). Space freed while mounted comes back at
// the next mount; a block device is left alone (fileDevice.punch).
//
// GiveBack does nothing after the first call or once a transaction has gone
// through the store, without PunchFree, on a store opened read-only or for
// fsck, or on a device that cannot punch.
func (s *Store) GiveBack() error {
	s.mu.Lock()
	clean := s.openedClean
	s.openedClean = false
	s.mu.Unlock()
	if !clean || !s.o.PunchFree || s.o.ReadOnly || s.o.ForCheck {
		return nil
	}
	p, ok := s.dev.(puncher)
	if !ok {
		return nil
	}
	before, measured := p.hostBytes()
	// A free map that does not add up is damage the punch must not trust
	// (it could list a file's blocks as free): nothing is punched, and the
	// error wraps ErrCorrupt (the core refuses the mount, which would
	// allocate from it, and marks it for a full check). ext4's FITRIM
	// likewise skips a group whose bitmap disagrees with its descriptor's
	// count (a second review).
	var runs []extent
	var free uint64
	var prev extent
	bad := ""
	err := s.freeList().walk(func(r rec) bool {
		x := extent{Block(r[0]), Block(r[1])}
		switch {
		case x.b < 1 || x.e <= x.b || uint64(x.e) > s.super.Blocks:
			bad = fmt.Sprintf("free extent [%d, %d) outside the disk's data blocks [1, %d)", x.b, x.e, s.super.Blocks)
		case prev.e != 0 && x.b <= prev.e:
			bad = fmt.Sprintf("free extents [%d, %d) and [%d, %d) overlap or touch", prev.b, prev.e, x.b, x.e)
		}
		if bad != "" {
			return false
		}
		prev = x
		free += x.len()
		s.mu.Lock()
		s.runsLocked(x, func(run extent) bool {
			runs = append(runs, run)
			return true
		})
		s.mu.Unlock()
		return true
	})
	if err == nil && bad == "" && free != s.freeBlocks() {
		bad = fmt.Sprintf("free map counts %d free blocks, its extents hold %d", s.freeBlocks(), free)
	}
	if err != nil {
		return fmt.Errorf("nothing punched: %w", err)
	}
	if bad != "" {
		return fmt.Errorf("%w: nothing punched: %s", ErrCorrupt, bad)
	}
	for _, run := range runs {
		ok, err := p.punch(int64(uint64(run.b)*s.bs), int64(run.len()*s.bs))
		if err != nil {
			return err
		}
		if !ok {
			return nil // the image's file system cannot punch holes
		}
	}
	if after, ok := p.hostBytes(); measured && ok && after < before {
		s.o.Logf("diskstore: gave %.1f MiB of free disk blocks back to the file system of %v", float64(before-after)/(1<<20), s.dev)
	}
	return nil
}
