package conquest

import (
	"errors"
	"fmt"

	"conquest/dirhash"
	"conquest/pram"
)

// The orphan list (root slot 3) is a doubly linked list, through iOrphNext
// and iOrphPrev, of inodes whose storage must still be released:
//
//   - nlink == 0: unlinked while the kernel still referenced it or had it
//     open, or too large to free in the unlink's own Tx. It is freed when
//     the last reference goes (Forget, Release) or, after a crash, by Open.
//   - nlink > 0: a truncate is freeing blocks past the size in several Txs,
//     or a file moved to disk is freeing its arena blocks. It leaves the
//     list when done; after a crash Open finishes the job.
//
// Membership changes in the same Tx as the operation that causes it, so a
// crash never loses storage.

// orphanAdd puts in at the head of the orphan list (idempotent).
func (fs *FS) orphanAdd(tx *pram.Tx, in inode) {
	if in.flags()&flagOrphan != 0 {
		return
	}
	head := pram.Off(fs.a.Root(slotOrphans))
	in.set64(tx, iOrphNext, uint64(head))
	in.set64(tx, iOrphPrev, 0)
	if head != 0 {
		tx.Set64(head+iOrphPrev, uint64(in.off))
	}
	tx.Set64(pram.RootOff(slotOrphans), uint64(in.off))
	in.set32(tx, iFlags, in.flags()|flagOrphan)
}

// orphanRemove takes in off the orphan list (idempotent).
func (fs *FS) orphanRemove(tx *pram.Tx, in inode) {
	if in.flags()&flagOrphan == 0 {
		return
	}
	next, prev := in.orphNext(), in.orphPrev()
	if prev == 0 {
		tx.Set64(pram.RootOff(slotOrphans), uint64(next))
	} else {
		tx.Set64(prev+iOrphNext, uint64(next))
	}
	if next != 0 {
		tx.Set64(next+iOrphPrev, uint64(prev))
	}
	in.set64(tx, iOrphNext, 0)
	in.set64(tx, iOrphPrev, 0)
	in.set32(tx, iFlags, in.flags()&^flagOrphan)
}

// dropLocked is called in the Tx that brought in's link count to zero. An
// inode still in use goes on the orphan list; an unused one is freed now if
// that is cheap, else it goes on the list and reap is true: after Commit the
// caller runs freeInodeLocked.
// Preconditions: fs.mu held exclusively.
func (fs *FS) dropLocked(tx *pram.Tx, in inode) (reap bool, err error) {
	busy := fs.vol.inUse(in.ino)
	if busy {
		fs.vol.markUnlinked(in.ino)
	}
	if busy || (in.isReg() && (in.allocd() > cheapFree || in.onDisk())) {
		fs.orphanAdd(tx, in)
		return !busy, nil
	}
	done, err := fs.freeStep(tx, in)
	if err == nil && !done {
		err = fmt.Errorf("%w: inode %d not freed in one step", ErrIO, in.ino)
	}
	return false, err
}

// freeStep releases part of an unlinked inode's storage within one Tx's
// budget; done reports that the inode record itself is gone.
// Preconditions: fs.mu held exclusively; in.nlink() == 0.
func (fs *FS) freeStep(tx *pram.Tx, in inode) (done bool, err error) {
	// Freeing may take the heap's free reserve: returning a large file's
	// extents to the disk's free map can need arena memory (see diskTruncate).
	err = fs.h.UsingReserve(func() error {
		var err error
		done, err = fs.freeStepReserved(tx, in)
		return err
	})
	return done, err
}

func (fs *FS) freeStepReserved(tx *pram.Tx, in inode) (done bool, err error) {
	switch in.typ() {
	case S_IFREG:
		if in.onDisk() {
			if gone, err := fs.diskFreeStep(tx, in); err != nil || !gone {
				return false, err
			}
		}
		more, err := fs.memShrink(tx, in, 0)
		if err != nil || more {
			return false, err
		}
	case S_IFDIR:
		if d := in.data(); d != 0 {
			if err := dirhash.Destroy(tx, fs.h, d); err != nil {
				return false, err
			}
			in.set64(tx, iData, 0)
		}
	case S_IFLNK:
		if d := in.data(); d != 0 {
			if err := fs.h.Free(tx, d); err != nil {
				return false, err
			}
			in.set64(tx, iData, 0)
		}
	}
	if x := in.xattr(); x != 0 {
		if err := fs.h.Free(tx, x); err != nil {
			return false, err
		}
		in.set64(tx, iXattr, 0)
	}
	fs.orphanRemove(tx, in)
	return true, fs.freeInodeRecord(tx, in)
}

// freeInodeLocked frees an orphan with nlink 0, one Tx per batch.
// Preconditions: fs.mu held exclusively; ino is on the orphan list.
func (fs *FS) freeInodeLocked(ino Ino) error {
	delete(fs.cutsLeft, ino) // unlinked: no cut left to finish (a reused number must not inherit it)
	for {
		done := false
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.inode(ino)
			if err != nil {
				return err
			}
			if in.nlink() != 0 || in.flags()&flagOrphan == 0 {
				return fmt.Errorf("%w: freeing inode %d with %d links, flags %#x", ErrIO, ino, in.nlink(), in.flags())
			}
			if fs.freeHook != nil {
				if err := fs.freeHook(ino); err != nil {
					return err
				}
			}
			done, err = fs.freeStep(tx, in)
			return err
		})
		if err != nil || done {
			if done {
				delete(fs.moveHeld, ino) // the number may be reused
			}
			return err
		}
	}
}

// reapIfUnused frees ino if it is an orphan with no links, no kernel
// references and no open handles. Called when the last reference goes.
func (fs *FS) reapIfUnused(ino Ino) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed || fs.vol.inUse(ino) {
		return
	}
	orphan := false
	var err error
	func() {
		defer fs.guard(&err)
		in, e := fs.inode(ino)
		orphan = e == nil && in.nlink() == 0 && in.flags()&flagOrphan != 0
	}()
	if !orphan || err != nil {
		return
	}
	fs.releaseLocked(ino)
}

// releaseLocked frees ino, an orphan with no links that nothing uses any
// more. When that fails for lack of space it stays on the orphan list, and
// fs.stuck has the next successful free retry it.
// Preconditions: fs.mu held exclusively.
func (fs *FS) releaseLocked(ino Ino) {
	err := fs.freeInodeLocked(ino)
	switch {
	case errors.Is(err, ErrNoSpace):
		fs.stuck = true
	case err != nil:
		fs.logf("%s: freeing inode %d: %v", fs.a.Path(), ino, err)
	case fs.stuck:
		fs.retryStuckLocked()
	}
}

// retryStuckLocked frees the orphans that are unlinked and no longer in use
// (those a lack of space kept from being freed), now that a free made room,
// and keeps fs.stuck set while one still fails for lack of space.
// Preconditions: fs.mu held exclusively.
func (fs *FS) retryStuckLocked() {
	fs.stuck = false
	candidates := fs.orphansWhere(func(in inode) bool { return in.nlink() == 0 && !fs.vol.inUse(in.ino) })
	for _, ino := range candidates {
		if err := fs.freeInodeLocked(ino); errors.Is(err, ErrNoSpace) {
			fs.stuck = true
		}
	}
}

// orphansWhere returns the inodes on the orphan list for which keep is
// true, in list order. A damaged list ends the walk (the ones found before
// are returned; Check reports the damage).
// Preconditions: fs.mu held.
func (fs *FS) orphansWhere(keep func(in inode) bool) []Ino {
	var inos []Ino
	var err error
	func() {
		defer fs.guard(&err)
		seen := make(map[pram.Off]bool)
		for off := pram.Off(fs.a.Root(slotOrphans)); off != 0 && !seen[off]; {
			seen[off] = true
			in, e := fs.inodeAt(off)
			if e != nil {
				return
			}
			if keep(in) {
				inos = append(inos, in.ino)
			}
			off = in.orphNext()
		}
	}()
	return inos
}

// reapOrphansLocked processes the whole orphan list: frees every unlinked
// inode and finishes every interrupted truncate. Used by Open (nothing can
// be open after a restart) and Close. It returns the number of inodes
// freed. An inode it cannot free or finish (damaged storage) stays on the
// list and is reported in stuck, and the walk goes on to the next, so one
// damaged file does not keep the file system from mounting (fsck --repair
// drops the damage, and the next reap frees it). err reports a list that
// cannot be walked.
// Preconditions: fs.mu held exclusively; no kernel references exist.
func (fs *FS) reapOrphansLocked() (freed int, stuck []error, err error) {
	// Freeing one orphan can make the room another needed (freeing a large
	// file can take an arena page for the disk's free map): pass again as
	// long as a pass frees some and leaves some.
	for {
		n, s, err := fs.reapPassLocked()
		freed += n
		if err != nil || len(s) == 0 || n == 0 {
			fs.stuck = len(s) > 0
			return freed, s, err
		}
	}
}

// orphanAt is the inode at off of a walk of the orphan list that has met
// the offsets in seen (and adds off): ErrCorrupt if the walk met it
// before, or it is no inode or not flagged as an orphan.
func (fs *FS) orphanAt(off pram.Off, seen map[pram.Off]bool) (in inode, err error) {
	if seen[off] {
		return in, fmt.Errorf("%w: orphan list revisits inode at %d", ErrCorrupt, off)
	}
	seen[off] = true
	func() {
		defer fs.guard(&err)
		in, err = fs.inodeAt(off)
		if err == nil && in.flags()&flagOrphan == 0 {
			err = fmt.Errorf("%w: inode %d on the orphan list is not flagged", ErrCorrupt, in.ino)
		}
	}()
	if err != nil {
		return in, fmt.Errorf("%w: orphan list: %v", ErrCorrupt, err)
	}
	return in, nil
}

// orphanListSound walks the orphan list without changing anything and
// reports whether the reap would find it whole (Open: the disk's free space
// is given back only then).
func (fs *FS) orphanListSound() bool {
	seen := make(map[pram.Off]bool)
	for off := pram.Off(fs.a.Root(slotOrphans)); off != 0; {
		in, err := fs.orphanAt(off, seen)
		if err != nil {
			return false
		}
		off = in.orphNext()
	}
	return true
}

func (fs *FS) reapPassLocked() (freed int, stuck []error, err error) {
	seen := make(map[pram.Off]bool)
	for off := pram.Off(fs.a.Root(slotOrphans)); off != 0; {
		var in inode
		if in, err = fs.orphanAt(off, seen); err != nil {
			return freed, stuck, err
		}
		next := in.orphNext() // the inode leaves the list below
		var ferr error
		if in.nlink() == 0 {
			if ferr = fs.freeInodeLocked(in.ino); ferr == nil {
				freed++
			}
		} else {
			ferr = fs.finishShrinkLocked(in.ino)
		}
		if ferr != nil {
			stuck = append(stuck, fmt.Errorf("inode %d: %w", in.ino, ferr))
		}
		off = next
	}
	return freed, stuck, nil
}
