package conquest

import (
	"fmt"

	"conquest/pram"
)

// An extending fallocate (mode 0 or ZERO_RANGE past the end) takes one
// transaction per step and changes the size in its last step only, so that
// a crash leaves the size as before or after. What the steps before the
// last reserve lies past the old size: a disk file keeps it as KEEP_SIZE's
// (iKeepEnd, so that the next steps' trims keep it), an arena file simply
// holds the blocks. If the fallocate never finishes (a crash, or a step
// that fails with ENOSPC), that reservation would stay for good, counted
// in st_blocks and df. So the first step records the fallocate in the root
// slots below, the last step clears them, and whoever finds them set gives
// the reservation back: Fallocate itself after a failed step, Open after a
// crash. One fallocate runs at a time (it holds fs.mu throughout), so one
// record is enough.
const (
	slotFalloc     = 7  // inode number of the file under an unfinished extending fallocate (0: none)
	slotFallocFrom = 8  // its range's start (bytes)
	slotFallocEnd  = 9  // its range's end (bytes)
	slotFallocKeep = 10 // the file's iKeepEnd before it (a disk file; 0 for an arena file)
)

// noteFallocLocked records, in tx, the extending fallocate of [from, end)
// on in about to take its first step.
// Preconditions: fs.mu held exclusively; no fallocate is recorded.
func (fs *FS) noteFallocLocked(tx *pram.Tx, in inode, from, end uint64) {
	keep := uint64(0)
	if in.onDisk() {
		keep = in.u64(iKeepEnd)
	}
	tx.Set64(pram.RootOff(slotFallocFrom), from)
	tx.Set64(pram.RootOff(slotFallocEnd), end)
	tx.Set64(pram.RootOff(slotFallocKeep), keep)
	tx.Set64(pram.RootOff(slotFalloc), uint64(in.ino))
}

// clearFalloc forgets the recorded fallocate, in tx.
func clearFalloc(tx *pram.Tx) {
	for _, s := range []int{slotFalloc, slotFallocFrom, slotFallocEnd, slotFallocKeep} {
		tx.Set64(pram.RootOff(s), 0)
	}
}

// fallocPending reports whether an unfinished fallocate is recorded.
func (fs *FS) fallocPending() bool { return fs.a.Root(slotFalloc) != 0 }

// undoFallocLocked gives back what the recorded unfinished fallocate
// reserved past its file's size, and forgets it: a disk file's iKeepEnd
// goes back to what it was and its blocks past max(size, iKeepEnd) are
// trimmed (as at a last close; room for data still buffered stays); an
// arena file's whole blocks past the size inside the range are freed. Each
// transaction frees at most one fallocate step's worth, so that a long
// reservation fits the journal. Blocks inside the file stay.
// Preconditions: fs.mu held exclusively.
func (fs *FS) undoFallocLocked() error {
	ino := Ino(fs.a.Root(slotFalloc))
	if ino == 0 {
		return nil
	}
	from, end, keep := fs.a.Root(slotFallocFrom), fs.a.Root(slotFallocEnd), fs.a.Root(slotFallocKeep)
	cur := end // a disk file: blocks at and past cur are trimmed already
	for {
		more := false
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.regInode(ino)
			if err != nil || end <= from {
				clearFalloc(tx) // the file is gone: nothing to give back
				return nil
			}
			if in.onDisk() {
				target := max(in.size(), keep)
				if in.u64(iKeepEnd) > keep {
					in.set64(tx, iKeepEnd, keep)
				}
				if step := fs.diskStepBytes(); cur > target+step {
					cur = fs.roundUp(cur) - step
					more = true
					return fs.diskTruncateTrim(tx, in.seg(), cur)
				}
				if err := fs.diskTruncateTrim(tx, in.seg(), target); err != nil {
					return err
				}
			} else if lo, hi := max(in.size(), from), (end+BlockSize-1)/BlockSize*BlockSize; lo < hi {
				if more, err = fs.memPunch(tx, in, lo, hi); err != nil || more {
					return err
				}
			}
			clearFalloc(tx)
			return nil
		})
		if err != nil {
			return fmt.Errorf("inode %d: giving back what an unfinished fallocate reserved: %w", ino, err)
		}
		if !more {
			return nil
		}
	}
}

// diskTruncateTrim drops a disk file's blocks wholly past size bytes
// (Store.Trim), drawing on the heap's free reserve as a cut does
// (diskTruncate): a full arena must still be able to give space back.
// Preconditions: fs.mu held exclusively.
func (fs *FS) diskTruncateTrim(tx *pram.Tx, seg pram.Off, size uint64) error {
	return fs.h.UsingReserve(func() error { return fs.ds.Trim(tx, seg, int64(size)) })
}
