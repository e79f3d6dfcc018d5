package conquest

import (
	"errors"
	"fmt"

	"conquest/pram"
)

// A whiteout is a character device 0:0 with no permission bits (the
// kernel's WHITEOUT_MODE and WHITEOUT_DEV).
const (
	whiteoutMode = 0
	whiteoutDev  = 0
)

// maxDepth bounds the parent walk of the subtree check (a loop in a damaged
// arena must not hang the daemon).
const maxDepth = 1 << 20

// Rename moves oldName in oldParent to newName in newParent, replacing an
// existing target (a non-directory, or an empty directory if the source is a
// directory) as rename(2) does. RenameNoReplace fails with ErrExists if the
// target exists; RenameExchange swaps two existing names. The whole
// operation is one Tx, and an existing target name is switched with
// dirhash.Replace, so it never appears missing. Renaming a name onto another
// link of the same inode does nothing.
func (fs *FS) Rename(oldParent Ino, oldName string, newParent Ino, newName string, flags uint32) error {
	if flags&RenameWhiteout != 0 {
		return ErrInvalid // it needs the caller's identity: RenameWhiteout
	}
	_, err := fs.rename(oldParent, oldName, newParent, newName, flags, Cred{})
	return err
}

// RenameKept is Rename that also returns the attributes of the inode that
// the new name led to before, when it keeps other links (Nlink > 0: its
// nlink and ctime changed), or a zero Attr.
func (fs *FS) RenameKept(oldParent Ino, oldName string, newParent Ino, newName string, flags uint32) (Attr, error) {
	if flags&RenameWhiteout != 0 {
		return Attr{}, ErrInvalid
	}
	return fs.rename(oldParent, oldName, newParent, newName, flags, Cred{})
}

// RenameWhiteout is Rename with RENAME_WHITEOUT (overlayfs's upper layer
// uses it): in the same Tx as the move, a whiteout (a character device
// 0:0 with mode 0, owned by c as mknod would make it) takes the old name.
// flags may add RenameNoReplace; RenameExchange is ErrInvalid. The kernel
// has checked CAP_MKNOD.
func (fs *FS) RenameWhiteout(oldParent Ino, oldName string, newParent Ino, newName string, flags uint32, c Cred) error {
	_, err := fs.rename(oldParent, oldName, newParent, newName, flags|RenameWhiteout, c)
	return err
}

// rename implements Rename, RenameKept and RenameWhiteout; c is used only
// for the whiteout.
func (fs *FS) rename(oldParent Ino, oldName string, newParent Ino, newName string, flags uint32, c Cred) (kept Attr, err error) {
	if flags&^(RenameNoReplace|RenameExchange|RenameWhiteout) != 0 ||
		flags&RenameExchange != 0 && flags&(RenameNoReplace|RenameWhiteout) != 0 {
		return Attr{}, ErrInvalid
	}
	for _, n := range []string{oldName, newName} {
		if n == "." || n == ".." {
			return Attr{}, ErrBusy
		}
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return Attr{}, ErrIO
	}
	now := fs.now()
	reap := false
	var victim Ino
	err = fs.update(func(tx *pram.Tx) error {
		kept = Attr{} // fn may run again (update)
		od, err := fs.dirInode(oldParent)
		if err != nil {
			return err
		}
		nd, err := fs.dirInode(newParent)
		if err != nil {
			return err
		}
		if err := checkName(oldName); err != nil {
			return err
		}
		if err := checkName(newName); err != nil {
			return err
		}
		src, _, err := fs.lookupLocked(od, oldName)
		if err != nil {
			return err
		}
		if nd.nlink() == 0 || nd.data() == 0 {
			return ErrNotFound
		}
		dst, _, err := fs.lookupLocked(nd, newName)
		exists := err == nil
		if err != nil && !errors.Is(err, ErrNotFound) {
			return err
		}
		switch {
		case exists && flags&RenameNoReplace != 0:
			return ErrExists
		case !exists && flags&RenameExchange != 0:
			return ErrNotFound
		case exists && dst.ino == src.ino:
			return nil
		case flags&RenameExchange != 0:
			return fs.exchangeLocked(tx, od, oldName, src, nd, newName, dst, now)
		}
		cross := od.ino != nd.ino
		if src.isDir() {
			if exists {
				if !dst.isDir() {
					return ErrNotDir
				}
				if dst.data() != 0 && fs.dir(dst).Len() != 0 {
					return ErrNotEmpty
				}
			}
			if cross {
				if in, err := fs.isAncestor(src.ino, nd); err != nil || in {
					if err != nil {
						return err
					}
					return ErrInvalid
				}
				if !exists && nd.nlink() >= maxDirNlink {
					return ErrTooManyLinks
				}
			}
		} else if exists && dst.isDir() {
			return ErrIsDir
		}

		if exists {
			if _, _, err := fs.dir(nd).Replace(tx, []byte(newName), uint64(src.ino), src.dtype()); err != nil {
				return err
			}
		} else if err := fs.dir(nd).Insert(tx, []byte(newName), uint64(src.ino), src.dtype()); err != nil {
			return err
		}
		if _, _, err := fs.dir(od).Delete(tx, []byte(oldName)); err != nil {
			return err
		}
		if src.isDir() && cross {
			od.set32(tx, iNlink, od.nlink()-1)
			nd.set32(tx, iNlink, nd.nlink()+1)
			src.set64(tx, iParent, uint64(nd.ino))
		}
		src.setTime(tx, iCtime, now)
		od.touchMC(tx, now)
		nd.touchMC(tx, now)
		if flags&RenameWhiteout != 0 {
			if _, err := fs.createLocked(tx, od, oldName, S_IFCHR|whiteoutMode, whiteoutDev, c, now, nil, false); err != nil {
				return err
			}
		}
		if exists {
			victim = dst.ino
			if reap, err = fs.unlinkInodeLocked(tx, nd, dst, now); err == nil && dst.nlink() > 0 {
				kept = dst.attr()
			}
			return err
		}
		return nil
	})
	if err == nil && reap {
		fs.releaseLocked(victim)
	}
	if err != nil {
		kept = Attr{}
	}
	return kept, err
}

// exchangeLocked swaps two existing names (RENAME_EXCHANGE).
// Preconditions: fs.mu held exclusively; src != dst.
func (fs *FS) exchangeLocked(tx *pram.Tx, od inode, oldName string, src inode,
	nd inode, newName string, dst inode, now Timespec) error {
	cross := od.ino != nd.ino
	if cross {
		for _, p := range []struct{ moved, into inode }{{src, nd}, {dst, od}} {
			if !p.moved.isDir() {
				continue
			}
			in, err := fs.isAncestor(p.moved.ino, p.into)
			if err != nil {
				return err
			}
			if in {
				return ErrInvalid
			}
		}
		if src.isDir() && !dst.isDir() && nd.nlink() >= maxDirNlink ||
			dst.isDir() && !src.isDir() && od.nlink() >= maxDirNlink {
			return ErrTooManyLinks
		}
	}
	if _, _, err := fs.dir(od).Replace(tx, []byte(oldName), uint64(dst.ino), dst.dtype()); err != nil {
		return err
	}
	if _, _, err := fs.dir(nd).Replace(tx, []byte(newName), uint64(src.ino), src.dtype()); err != nil {
		return err
	}
	if cross {
		if src.isDir() {
			src.set64(tx, iParent, uint64(nd.ino))
		}
		if dst.isDir() {
			dst.set64(tx, iParent, uint64(od.ino))
		}
		switch {
		case src.isDir() && !dst.isDir():
			od.set32(tx, iNlink, od.nlink()-1)
			nd.set32(tx, iNlink, nd.nlink()+1)
		case dst.isDir() && !src.isDir():
			nd.set32(tx, iNlink, nd.nlink()-1)
			od.set32(tx, iNlink, od.nlink()+1)
		}
	}
	src.setTime(tx, iCtime, now)
	dst.setTime(tx, iCtime, now)
	od.touchMC(tx, now)
	nd.touchMC(tx, now)
	return nil
}

// isAncestor reports whether directory a is d or one of d's ancestors.
// Preconditions: fs.mu held.
func (fs *FS) isAncestor(a Ino, d inode) (bool, error) {
	for i := 0; i < maxDepth; i++ {
		if d.ino == a {
			return true, nil
		}
		if d.ino == RootIno {
			return false, nil
		}
		p, err := fs.dirInode(d.parent())
		if err != nil {
			return false, fmt.Errorf("%w: parent of directory %d: %v", ErrIO, d.ino, err)
		}
		d = p
	}
	return false, fmt.Errorf("%w: directory %d is deeper than %d levels (parent loop?)", ErrIO, d.ino, maxDepth)
}
