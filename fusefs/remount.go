package fusefs

import (
	"errors"
	"fmt"
	"syscall"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/conquest"
)

// Remounts.
//
// mount(8) hands `mount -o remount,...` of a fuse.conquest mount to the
// helper too (cmd/conquest, helper.go), which changes the mount point's
// flags with a bind remount (Remount). The kernel leaves a FUSE file's atime
// to the daemon, so a mount made read-only or noatime that way must also
// tell the daemon to stop updating it: the helper sets NoAtimeXattr on the
// mount's root to "1" (or "0" to go back to relatime). Like SpaceXattr it
// is in the system namespace, which the VFS leaves to the file system and
// the core never stores; only root may set it.
const NoAtimeXattr = "system.conquest.noatime"

// CommitXattr, set on the mount's root to a Go duration ("1.5s"), changes
// the commit interval (the mount's --commit, conquest.FS.SetCommit): the
// helper sets it at a remount with commit=. System namespace, root only,
// never stored, as NoAtimeXattr.
const CommitXattr = "system.conquest.commit"

// ReadOnlyXattr, read on the mount's root, is "1" when the daemon opened
// its images read-only (they could not be written: conquest.FS.ReadOnly),
// else "0". The helper reads it before a remount that would make the mount
// writable, and refuses that remount, as ext4 refuses to remount a
// write-protected device read-write. System namespace, never stored.
const ReadOnlyXattr = "system.conquest.readonly"

// ErrImagesReadOnly: Remount refused to make a mount of read-only images
// writable.
var ErrImagesReadOnly = errors.New("images opened read-only")

// getReadOnly serves a getxattr of ReadOnlyXattr.
func (s *Server) getReadOnly(r *fuse.GetxattrRequest) {
	v := []byte("0")
	if s.fs.ReadOnly() {
		v = []byte("1")
	}
	if r.Size != 0 && uint32(len(v)) > r.Size {
		r.RespondError(syscall.ERANGE)
		return
	}
	r.Respond(&fuse.GetxattrResponse{Xattr: v})
}

// setCommit serves a setxattr of CommitXattr.
func (s *Server) setCommit(r *fuse.SetxattrRequest) {
	d, err := time.ParseDuration(string(r.Xattr))
	switch {
	case r.Uid != 0:
		s.respondError(r, conquest.ErrPerm)
	case err != nil || d <= 0:
		s.respondError(r, conquest.ErrInvalid)
	default:
		if err := s.fs.SetCommit(d); err != nil {
			s.respondError(r, err)
			return
		}
		s.opt.Logf("commit interval now %v", d)
		r.Respond()
	}
}

// setNoAtime serves a setxattr of NoAtimeXattr.
func (s *Server) setNoAtime(r *fuse.SetxattrRequest) {
	switch {
	case r.Uid != 0:
		s.respondError(r, conquest.ErrPerm)
	case string(r.Xattr) == "1" || string(r.Xattr) == "0":
		s.fs.SetNoAtime(string(r.Xattr) == "1")
		r.Respond()
	default:
		s.respondError(r, conquest.ErrInvalid)
	}
}

// Remount sets and clears the flags MS_RDONLY, MS_NOSUID, MS_NODEV,
// MS_NOEXEC and MS_NOATIME of the mount on dir, keeping the others, and
// tells the daemon whether to update atimes (not while the mount is
// read-only or noatime). The daemon is told while the mount is writable (a
// setxattr on a read-only mount never reaches it): before a remount that
// ends read-only or noatime, after one that ends neither. It needs
// CAP_SYS_ADMIN. A commit interval (commit > 0) is passed on too, while
// the mount is writable: after the flags change when the mount ends
// writable (a failed remount changes nothing), before it when the remount
// makes it read-only; a mount read-only before and after keeps its
// interval (nothing is committed there, and mount(8) passes the fstab
// line's commit= again at the remount that makes it writable).
func Remount(dir string, set, clear uintptr, commit time.Duration) error {
	var sfs unix.Statfs_t
	if err := unix.Statfs(dir, &sfs); err != nil {
		return fmt.Errorf("statfs %s: %w", dir, err)
	}
	// No atime updates while read-only or noatime: before and after.
	was := sfs.Flags&(unix.ST_RDONLY|unix.ST_NOATIME) != 0
	ro := (sfs.Flags&unix.ST_RDONLY != 0 || set&unix.MS_RDONLY != 0) && clear&unix.MS_RDONLY == 0
	noatime := (sfs.Flags&unix.ST_NOATIME != 0 || set&unix.MS_NOATIME != 0) && clear&unix.MS_NOATIME == 0
	will := ro || noatime
	tell := func(on bool) error {
		v := []byte("0")
		if on {
			v = []byte("1")
		}
		if err := unix.Setxattr(dir, NoAtimeXattr, v, 0); err != nil {
			return fmt.Errorf("telling the daemon of %s about atimes: %w", dir, err)
		}
		return nil
	}
	wasRO := sfs.Flags&unix.ST_RDONLY != 0
	if wasRO && !ro {
		buf := make([]byte, 8)
		n, err := unix.Getxattr(dir, ReadOnlyXattr, buf)
		if err == nil && string(buf[:n]) == "1" {
			return fmt.Errorf("%s: cannot remount read-write: its images were opened read-only, as they cannot be written (unmount it, and mount it again once they can): %w", dir, ErrImagesReadOnly)
		}
	}
	setCommit := func() error {
		if err := unix.Setxattr(dir, CommitXattr, []byte(commit.String()), 0); err != nil {
			return fmt.Errorf("telling the daemon of %s its commit interval: %w", dir, err)
		}
		return nil
	}
	if commit > 0 && !wasRO && ro {
		if err := setCommit(); err != nil {
			return err
		}
	}
	if will && !was {
		if err := tell(true); err != nil {
			return err
		}
	}
	if err := setMountFlags(dir, set, clear, false); err != nil {
		if will && !was {
			tell(false)
		}
		return err
	}
	if was && !will {
		if err := tell(false); err != nil {
			return err
		}
	}
	if commit > 0 && !ro {
		return setCommit()
	}
	return nil
}
