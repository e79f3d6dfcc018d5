package conquest

import (
	"errors"
	"fmt"

	"conquest/dirhash"
)

// Directories are dirhash tables (root offset in iData) plus the parent's
// inode number in iParent for "..". A directory's link count is 2 plus its
// subdirectories. A removed directory (nlink 0, possibly still open) has no
// table: lookups fail and ReadDir yields nothing.

// dir is the dirhash table of a directory inode.
func (fs *FS) dir(in inode) dirhash.Dir { return dirhash.Open(fs.h, in.data()) }

// lookupLocked finds name in directory d and returns its inode.
// Preconditions: fs.mu held; d is a directory.
func (fs *FS) lookupLocked(d inode, name string) (inode, uint8, error) {
	if d.nlink() == 0 || d.data() == 0 {
		return inode{}, 0, ErrNotFound
	}
	ino, typ, err := fs.dir(d).Find([]byte(name))
	if errors.Is(err, dirhash.ErrNotFound) {
		return inode{}, 0, ErrNotFound
	}
	if err != nil {
		return inode{}, 0, fmt.Errorf("directory %d: %w", d.ino, err) // damage: EIO (mapErr)
	}
	in, err := fs.inode(Ino(ino))
	if err != nil {
		return inode{}, 0, fmt.Errorf("%w: entry %q of directory %d names a bad inode: %v", ErrIO, name, d.ino, err)
	}
	return in, typ, nil
}

// Lookup finds name in parent and returns its attributes, taking one kernel
// reference on success. "." and ".." are resolved too.
func (fs *FS) Lookup(parent Ino, name string) (Attr, error) {
	return fs.lookup(parent, name, true)
}

// Peek is Lookup without the kernel reference: the attributes of what a
// name is now (fusefs, after a rename).
func (fs *FS) Peek(parent Ino, name string) (Attr, error) {
	return fs.lookup(parent, name, false)
}

func (fs *FS) lookup(parent Ino, name string, ref bool) (Attr, error) {
	var at Attr
	err := fs.read(func() error {
		d, err := fs.dirInode(parent)
		if err != nil {
			return err
		}
		var in inode
		switch name {
		case ".":
			in = d
		case "..":
			if in, err = fs.inode(d.parent()); err != nil {
				return err
			}
		default:
			if err := checkName(name); err != nil {
				return err
			}
			if in, _, err = fs.lookupLocked(d, name); err != nil {
				return err
			}
		}
		at = in.attr()
		if ref {
			fs.vol.ref(in.ino)
		}
		return nil
	})
	return at, err
}

// ReadDir calls fn for the entries of dir from cursor on: "." (next 1), ".."
// (next 2), then the table's entries (next = the table's cursor + 2), until
// fn returns false. Cursors stay valid while entries are added and removed.
//
// An entry whose stored name is damaged (empty, ".", "..", or holding '/'
// or NUL) is left out and logged: a program would read a name holding NUL
// as a shorter one, perhaps "", which means the directory itself. fsck
// reports and removes such entries.
func (fs *FS) ReadDir(dir Ino, cursor uint64, fn func(name string, ino Ino, typ uint8, next uint64) bool) error {
	return fs.readDir(dir, cursor, true, fn)
}

// ReadDirNoAtime is ReadDir for a stream opened with O_NOATIME: it leaves
// the directory's atime alone, as ext4 does.
func (fs *FS) ReadDirNoAtime(dir Ino, cursor uint64, fn func(name string, ino Ino, typ uint8, next uint64) bool) error {
	return fs.readDir(dir, cursor, false, fn)
}

// readDir is ReadDir, updating atime (relatime) if touch is set.
func (fs *FS) readDir(dir Ino, cursor uint64, touch bool, fn func(name string, ino Ino, typ uint8, next uint64) bool) error {
	atime := false
	var bad []string
	err := fs.read(func() error {
		d, err := fs.dirInode(dir)
		if err != nil {
			return err
		}
		atime = touch && fs.atimeDue(d)
		if d.nlink() == 0 || d.data() == 0 {
			return nil
		}
		if cursor == 0 && !fn(".", d.ino, DT_DIR, 1) {
			return nil
		}
		if cursor <= 1 && !fn("..", d.parent(), DT_DIR, 2) {
			return nil
		}
		c := uint64(0)
		if cursor > 2 {
			c = cursor - 2
		}
		return fs.dir(d).Scan(c, func(e dirhash.Entry, next uint64) bool {
			name := string(e.Name)
			if checkName(name) != nil || name == "." || name == ".." {
				bad = append(bad, name)
				return true
			}
			return fn(name, Ino(e.Ino), e.Type, next+2)
		})
	})
	if len(bad) > 0 {
		fs.logf("%s: directory %d: left out %d entries with a damaged name, such as %q (run `conquest fsck`)",
			fs.a.Path(), dir, len(bad), bad[0])
	}
	if err == nil && atime {
		fs.touchAtime(dir)
	}
	return err
}
