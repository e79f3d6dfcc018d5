package conquest

import "conquest/pram"

// CreateTmpfile creates and opens an unnamed regular file in the directory
// parent (open(2) with O_TMPFILE): its link count is 0, it is on the orphan
// list from the start, and it holds one kernel reference and one handle.
// It is freed when both are gone, unless Link first gives it a name
// (linkat(2) of the open file; the kernel refuses that for O_EXCL). The
// group and S_ISGID follow parent as for Create; parent's times do not
// change, since no entry is added.
func (fs *FS) CreateTmpfile(parent Ino, mode, flags uint32, c Cred) (Attr, Handle, error) {
	var at Attr
	var h Handle
	err := fs.write(func(tx *pram.Tx, now Timespec) error {
		d, err := fs.dirInode(parent)
		if err != nil {
			return err
		}
		if d.nlink() == 0 || d.data() == 0 {
			// A removed directory: EPERM, as ext4 gives (__ext4_new_inode
			// refuses a parent with no links).
			return ErrPerm
		}
		in, err := fs.newInode(tx, d, S_IFREG|mode&0o7777, 0, c, now, false)
		if err != nil {
			return err
		}
		in.set32(tx, iNlink, 0)
		fs.orphanAdd(tx, in)
		at = in.attr()
		fs.vol.ref(in.ino)
		h = fs.vol.open(in.ino, flags, false)
		return nil
	})
	return at, h, err
}
