package conquest

import (
	"errors"
	"fmt"

	"conquest/dirhash"
	"conquest/pram"
)

// Name-space operations that create and remove names. Each is one Tx; the
// kernel reference a creating operation hands out is taken under the
// exclusive lock, so no concurrent Unlink can free the new inode first.

// parentForCreate validates a directory that is to receive name.
// Preconditions: fs.mu held exclusively.
func (fs *FS) parentForCreate(parent Ino, name string) (inode, error) {
	d, err := fs.dirInode(parent)
	if err != nil {
		return d, err
	}
	if err := checkName(name); err != nil {
		return d, err
	}
	if d.nlink() == 0 || d.data() == 0 {
		return d, ErrNotFound // removed directory
	}
	switch _, _, err := fs.dir(d).Find([]byte(name)); {
	case err == nil:
		return d, ErrExists
	case !errors.Is(err, dirhash.ErrNotFound):
		return d, fmt.Errorf("directory %d: %w", d.ino, err) // damage: EIO (mapErr)
	}
	return d, nil
}

// createLocked makes a new inode of the given mode named name in d; init
// (may be nil) sets up its contents before it is linked in. reserve lets
// the inode take the arena's mapReserve (newInode): Repair's /lost+found.
// Preconditions: fs.mu held exclusively; parentForCreate(d, name) passed.
func (fs *FS) createLocked(tx *pram.Tx, d inode, name string, mode, rdev uint32, c Cred, now Timespec,
	init func(in inode) error, reserve bool) (inode, error) {
	isDir := mode&S_IFMT == S_IFDIR
	if isDir && d.nlink() >= maxDirNlink {
		return inode{}, ErrTooManyLinks
	}
	in, err := fs.newInode(tx, d, mode, rdev, c, now, reserve)
	if err != nil {
		return in, err
	}
	if init != nil {
		if err := init(in); err != nil {
			return in, err
		}
	}
	if err := fs.dir(d).Insert(tx, []byte(name), uint64(in.ino), in.dtype()); err != nil {
		return in, err
	}
	if isDir {
		d.set32(tx, iNlink, d.nlink()+1)
	}
	d.touchMC(tx, now)
	return in, nil
}

// Create creates and opens a regular file (one kernel reference, one
// handle). If the name exists: ErrExists with O_EXCL, ErrIsDir for a
// directory, else the existing file is opened (and truncated by O_TRUNC).
func (fs *FS) Create(parent Ino, name string, mode uint32, flags uint32, c Cred) (Attr, Handle, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return Attr{}, 0, ErrIO
	}
	if flags&O_TRUNC != 0 && flags&O_ACCMODE != 0 {
		// A cut an error left unfinished is finished before the file
		// changes again (finishCutLocked), here as in SetAttr: the
		// truncate below would find its storage half freed.
		if d, err := fs.parentForCreate(parent, name); errors.Is(err, ErrExists) {
			if in, _, err := fs.lookupLocked(d, name); err == nil {
				if err := fs.finishCutLocked(in.ino); err != nil {
					return Attr{}, 0, err
				}
			}
		}
	}
	now := fs.now()
	var at Attr
	var h Handle
	var ino Ino
	more := false
	err := fs.update(func(tx *pram.Tx) error {
		d, err := fs.parentForCreate(parent, name)
		var in inode
		switch {
		case errors.Is(err, ErrExists):
			if flags&O_EXCL != 0 {
				return ErrExists
			}
			if in, _, err = fs.lookupLocked(d, name); err != nil {
				return err
			}
			switch in.typ() {
			case S_IFDIR:
				return ErrIsDir
			case S_IFREG:
				if flags&O_TRUNC != 0 && flags&O_ACCMODE != 0 {
					in.touchMC(tx, now) // O_TRUNC of an existing file, as open(2)
					if more, err = fs.setSizeLocked(tx, in, 0); err != nil {
						return err
					}
				}
			}
		case err != nil:
			return err
		default:
			in, err = fs.createLocked(tx, d, name, S_IFREG|mode&0o7777, 0, c, now, nil, false)
			if err != nil {
				return err
			}
		}
		at, ino = in.attr(), in.ino
		fs.vol.ref(ino)
		h = fs.vol.open(ino, flags, false)
		return nil
	})
	if err == nil && more {
		fs.finishCutAfter(ino)
		at.Blocks = 0
	}
	return at, h, err
}

// Mknod creates a FIFO, socket, character or block device, or (type 0 or
// S_IFREG) a regular file, and takes one kernel reference.
func (fs *FS) Mknod(parent Ino, name string, mode, rdev uint32, c Cred) (Attr, error) {
	switch mode & S_IFMT {
	case 0:
		mode |= S_IFREG
	case S_IFREG, S_IFIFO, S_IFSOCK, S_IFCHR, S_IFBLK:
	default:
		return Attr{}, ErrInvalid
	}
	return fs.makeNode(parent, name, mode&(S_IFMT|0o7777), rdev, c, nil)
}

// Mkdir creates a directory and takes one kernel reference. In a setgid
// directory the new one inherits the group and S_ISGID.
func (fs *FS) Mkdir(parent Ino, name string, mode uint32, c Cred) (Attr, error) {
	return fs.makeNode(parent, name, S_IFDIR|mode&0o7777, 0, c, func(tx *pram.Tx, in inode) error {
		root, err := dirhash.Create(tx, fs.h)
		if err != nil {
			return err
		}
		putU64(fs.a.Bytes(in.off+iData, 8), uint64(root)) // fresh record: unlogged
		return nil
	})
}

// makeNode is the common body of Mknod, Mkdir and Symlink.
func (fs *FS) makeNode(parent Ino, name string, mode, rdev uint32, c Cred, init func(*pram.Tx, inode) error) (Attr, error) {
	var at Attr
	err := fs.write(func(tx *pram.Tx, now Timespec) error {
		d, err := fs.parentForCreate(parent, name)
		if err != nil {
			return err
		}
		var fn func(inode) error
		if init != nil {
			fn = func(in inode) error { return init(tx, in) }
		}
		in, err := fs.createLocked(tx, d, name, mode, rdev, c, now, fn, false)
		if err != nil {
			return err
		}
		at = in.attr()
		fs.vol.ref(in.ino)
		return nil
	})
	return at, err
}

// Link gives inode ino the additional name newName in newParent and takes
// one kernel reference. Directories cannot be linked (ErrPerm). An
// unlinked file still in use can be linked: the kernel asks only for a file
// made by CreateTmpfile (O_TMPFILE without O_EXCL), and refuses any other
// file with no links itself.
func (fs *FS) Link(ino, newParent Ino, newName string) (Attr, error) {
	var at Attr
	err := fs.write(func(tx *pram.Tx, now Timespec) error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		d, err := fs.parentForCreate(newParent, newName)
		if err != nil {
			return err
		}
		relink := in.nlink() == 0
		switch {
		case in.isDir():
			return ErrPerm
		case relink && (in.flags()&flagOrphan == 0 || !fs.vol.inUse(in.ino)):
			return ErrNotFound
		case in.nlink() >= MaxLinks:
			return ErrTooManyLinks
		}
		if err := fs.dir(d).Insert(tx, []byte(newName), uint64(in.ino), in.dtype()); err != nil {
			return err
		}
		if relink {
			fs.orphanRemove(tx, in)
		}
		in.set32(tx, iNlink, in.nlink()+1)
		in.setTime(tx, iCtime, now)
		d.touchMC(tx, now)
		at = in.attr()
		fs.vol.ref(in.ino)
		return nil
	})
	return at, err
}

// Unlink removes a non-directory name. The inode is freed when its last
// link, kernel reference and open handle are gone.
func (fs *FS) Unlink(parent Ino, name string) error {
	_, err := fs.remove(parent, name, false)
	return err
}

// UnlinkKept is Unlink that also returns the attributes of the inode the
// name led to when it keeps other links (Nlink > 0: its nlink and ctime
// changed), or a zero Attr when it has none left.
func (fs *FS) UnlinkKept(parent Ino, name string) (Attr, error) {
	return fs.remove(parent, name, false)
}

// Rmdir removes an empty directory.
func (fs *FS) Rmdir(parent Ino, name string) error {
	switch name {
	case ".":
		return ErrInvalid
	case "..":
		return ErrNotEmpty
	}
	_, err := fs.remove(parent, name, true)
	return err
}

func (fs *FS) remove(parent Ino, name string, isDir bool) (kept Attr, err error) {
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
		d, err := fs.dirInode(parent)
		if err != nil {
			return err
		}
		if err := checkName(name); err != nil {
			return err
		}
		in, _, err := fs.lookupLocked(d, name)
		if err != nil {
			return err
		}
		victim = in.ino
		if isDir {
			if !in.isDir() {
				return ErrNotDir
			}
			if in.data() != 0 && fs.dir(in).Len() != 0 {
				return ErrNotEmpty
			}
		} else if in.isDir() {
			return ErrIsDir
		}
		if _, _, err := fs.dir(d).Delete(tx, []byte(name)); err != nil {
			return err
		}
		d.touchMC(tx, now)
		if reap, err = fs.unlinkInodeLocked(tx, d, in, now); err == nil && in.nlink() > 0 {
			kept = in.attr()
		}
		return err
	})
	if err == nil && reap {
		fs.releaseLocked(victim)
	}
	if err != nil {
		kept = Attr{}
	}
	return kept, err
}

// unlinkInodeLocked drops one link of in, whose name in directory d is
// already gone: a directory loses all its links and its (empty) table, and
// d loses the subdirectory's "..". See dropLocked for reap.
// Preconditions: fs.mu held exclusively.
func (fs *FS) unlinkInodeLocked(tx *pram.Tx, d, in inode, now Timespec) (reap bool, err error) {
	in.setTime(tx, iCtime, now)
	if in.isDir() {
		if d.nlink() > 2 {
			d.set32(tx, iNlink, d.nlink()-1)
		}
		in.set32(tx, iNlink, 0)
		if root := in.data(); root != 0 {
			if err := dirhash.Destroy(tx, fs.h, root); err != nil {
				return false, err
			}
			in.set64(tx, iData, 0)
		}
	} else if n := in.nlink(); n > 0 {
		in.set32(tx, iNlink, n-1)
	}
	if in.nlink() > 0 {
		return false, nil
	}
	return fs.dropLocked(tx, in)
}
