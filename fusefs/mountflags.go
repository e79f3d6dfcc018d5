package fusefs

import (
	"fmt"

	"golang.org/x/sys/unix"
)

// setMountFlags adds the per-mount flags add (MS_NOEXEC, MS_NOATIME, which
// bazil.org/fuse cannot pass to fusermount3) to the mount on dir, and takes
// the flags clear away. With bind, only the mount point's flags change;
// without, the superblock's read-only flag too (a remount, as mount(8) does
// it: a mount made read-only is made writable again only so). A bind
// remount changes only the mount point's own flags (ro, nosuid, nodev,
// noexec, the atime flags), and it sets all of them at once, so the ones the
// mount already has are carried over from statfs(2). It needs CAP_SYS_ADMIN.
func setMountFlags(dir string, add, clear uintptr, bind bool) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	flags := uintptr(unix.MS_REMOUNT) | add
	if bind {
		flags |= unix.MS_BIND
	}
	for _, f := range []struct{ st, ms uintptr }{
		{unix.ST_RDONLY, unix.MS_RDONLY},
		{unix.ST_NOSUID, unix.MS_NOSUID},
		{unix.ST_NODEV, unix.MS_NODEV},
		{unix.ST_NOEXEC, unix.MS_NOEXEC},
		{unix.ST_NOATIME, unix.MS_NOATIME},
		{unix.ST_NODIRATIME, unix.MS_NODIRATIME},
		{unix.ST_RELATIME, unix.MS_RELATIME},
	} {
		if uintptr(sfs.Flags)&f.st != 0 {
			flags |= f.ms
		}
	}
	flags &^= clear
	if flags&unix.MS_NOATIME != 0 {
		flags &^= unix.MS_RELATIME
	} else if clear&unix.MS_NOATIME != 0 {
		// A remount without an atime flag keeps the mount's.
		flags |= unix.MS_RELATIME
	}
	if err := unix.Mount("", dir, "", flags, ""); err != nil {
		return fmt.Errorf("remounting %s: %w", dir, err)
	}
	return nil
}
