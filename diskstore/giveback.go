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
// So Open, for a mount (Options.PunchFree), punches a hole in the image at
// every free extent, and the host's file system frees those blocks. It does
// so only when the store is clean (the last run ended with its data synced
// and nothing in quarantine, so recovery changed nothing) and before the
// core begins any transaction: every free extent is then free in the
// durable state, which is what any later crash rolls back to, and nothing
// can allocate meanwhile. Blocks in quarantine are not in the free map, and
// runsLocked leaves out the hold and staged blocks (empty at Open). A
// punched block reads as zeros, as a block never written does; nothing
// reads a free block anyway (a block is read only through a file's
// segment list, and only once its checksum is set). Space freed while
// mounted comes back at the next mount; a block device is left alone
// (fileDevice.punch).
func (s *Store) giveBack() error {
	p, ok := s.dev.(puncher)
	if !ok {
		return nil
	}
	before, measured := p.hostBytes()
	var runs []extent
	err := s.freeList().walk(func(r rec) bool {
		if r[0] >= r[1] || r[1] > s.super.Blocks || r[0] < 1 {
			return true // damage: fsck reports it; nothing is punched there
		}
		s.mu.Lock()
		s.runsLocked(extent{Block(r[0]), Block(r[1])}, func(run extent) bool {
			runs = append(runs, run)
			return true
		})
		s.mu.Unlock()
		return true
	})
	if err != nil {
		return err
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
		s.o.Logf("diskstore: gave %s of free disk blocks back to the file system of %v", mib(before-after), s.dev)
	}
	return nil
}

// mib formats n bytes in MiB for messages.
func mib(n int64) string { return fmt.Sprintf("%.1f MiB", float64(n)/(1<<20)) }
