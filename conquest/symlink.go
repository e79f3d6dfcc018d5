package conquest

import (
	"conquest/pram"
)

// Symlink targets are stored in one arena allocation of exactly the
// target's length (iData), with iSize = length.

// Symlink creates a symbolic link to target and takes one kernel reference.
// An empty target is ErrNotFound and one over MaxSymlink bytes is
// ErrNameTooLong, as on Linux.
func (fs *FS) Symlink(parent Ino, name, target string, c Cred) (Attr, error) {
	switch {
	case target == "":
		return Attr{}, ErrNotFound
	case len(target) > MaxSymlink:
		return Attr{}, ErrNameTooLong
	}
	return fs.makeNode(parent, name, S_IFLNK|0o777, 0, c, func(tx *pram.Tx, in inode) error {
		off, err := fs.h.Alloc(tx, uint64(len(target)))
		if err != nil {
			return err
		}
		copy(fs.a.Bytes(off, uint64(len(target))), target) // fresh: unlogged
		b := fs.a.Bytes(in.off, inodeSize)                 // fresh record: unlogged
		putU64(b[iData:], uint64(off))
		putU64(b[iSize:], uint64(len(target)))
		return nil
	})
}

// Readlink returns a symlink's target (ErrInvalid for other inodes). It
// updates atime by the relatime rule, as Read does and as ext4 does.
func (fs *FS) Readlink(ino Ino) (string, error) {
	var s string
	atime := false
	err := fs.read(func() error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		if in.typ() != S_IFLNK {
			return ErrInvalid
		}
		n := in.size()
		if n == 0 || n > MaxSymlink || in.data() == 0 {
			return ErrIO
		}
		s = string(fs.a.View(in.data(), n))
		atime = fs.atimeDue(in)
		return nil
	})
	if err == nil && atime {
		fs.touchAtime(ino) // as ext4 does: reading a symlink accesses it
	}
	return s, err
}
