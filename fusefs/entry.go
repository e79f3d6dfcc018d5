package fusefs

import (
	"errors"

	"bazil.org/fuse"

	"conquest/conquest"
)

// Entry and attribute caching.
//
// Every change to the file system passes through this daemon and, except for
// the cases below, through the kernel's own VFS bookkeeping, which already
// updates or invalidates what it cached:
//   - create/mkdir/mknod/symlink/link replies carry the new inode's attrs and
//     turn a cached negative entry positive; the parent's attrs are
//     invalidated by the kernel (fuse_dir_changed);
//   - unlink/rmdir drop the kernel inode's nlink and invalidate its ctime.
//     Hard links share one node id, hence one kernel inode, so the other
//     names see the new nlink too;
//   - rename invalidates both parents and the moved inode's ctime, and
//     drops nlink of an inode it replaced (fuse_entry_unlinked);
//   - setattr replies carry the new attrs; setxattr/removexattr invalidate
//     ctime; reads invalidate atime; writes invalidate mtime/ctime/size.
//
// What the kernel cannot know is handled where it happens (file.go): a write
// that clears S_ISUID/S_ISGID (HANDLE_KILLPRIV_V2) and fallocate invalidate
// the node's attributes. A failed lookup is answered with a negative entry
// (node id 0, NegativeTTL), so the create that usually follows does not pay
// for a second LOOKUP, and the kernel turns that entry positive on create.

func (s *Server) lookup(r *fuse.LookupRequest) {
	a, err := s.fs.Lookup(ino(r.Node), r.Name)
	if err != nil {
		if errors.Is(err, conquest.ErrNotFound) && s.opt.NegativeTTL > 0 {
			s.replyEntry(r, conquest.Attr{}, s.opt.NegativeTTL, nil)
			return
		}
		s.respondError(r, err)
		return
	}
	s.replyEntry(r, a, s.opt.EntryTTL, nil)
}

func (s *Server) mknod(r *fuse.MknodRequest) {
	a, err := s.fs.Mknod(ino(r.Node), r.Name, unixMode(r.Mode), r.Rdev, cred(&r.Header))
	s.entryOrError(r, a, err)
}

func (s *Server) mkdir(r *fuse.MkdirRequest) {
	a, err := s.fs.Mkdir(ino(r.Node), r.Name, unixMode(r.Mode), cred(&r.Header))
	s.entryOrError(r, a, err)
}

func (s *Server) symlink(r *fuse.SymlinkRequest) {
	a, err := s.fs.Symlink(ino(r.Node), r.NewName, r.Target, cred(&r.Header))
	s.entryOrError(r, a, err)
}

func (s *Server) link(r *fuse.LinkRequest) {
	// The reply carries the inode's new nlink and ctime, which the kernel
	// stores in the one inode all of its names share.
	a, err := s.fs.Link(ino(r.OldNode), ino(r.Node), r.NewName)
	if err == nil {
		s.retargetLink(a.Ino, a.Mode)
	}
	s.entryOrError(r, a, err)
}

func (s *Server) entryOrError(r fuse.Request, a conquest.Attr, err error) {
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.replyEntry(r, a, s.opt.EntryTTL, nil)
}

func (s *Server) create(r *fuse.CreateRequest) {
	// The kernel has applied the umask already (we do not negotiate
	// FUSE_DONT_MASK).
	a, h, err := s.fs.Create(ino(r.Node), r.Name, unixMode(r.Mode), handleFlags(r.Flags), cred(&r.Header))
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.replyEntry(r, a, s.opt.EntryTTL, &fuse.OpenResponse{
		Handle: fuse.HandleID(h),
		Flags:  s.openFlags(fuse.OpenKeepCache, r.Flags),
	})
}

func (s *Server) remove(r *fuse.RemoveRequest) {
	var err error
	var kept conquest.Attr // a hard-linked symlink's other names: its ctime changed
	if r.Dir {
		err = s.fs.Rmdir(ino(r.Node), r.Name)
	} else {
		kept, err = s.fs.UnlinkKept(ino(r.Node), r.Name)
	}
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.retargetLink(kept.Ino, kept.Mode)
	r.Respond()
}

func (s *Server) rename(r *fuse.RenameRequest) {
	// Plain RENAME; renameat2 with flags arrives as RENAME2 (rename2.go).
	kept, err := s.fs.RenameKept(ino(r.Node), r.OldName, ino(r.NewDir), r.NewName, 0)
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.retargetLink(kept.Ino, kept.Mode) // the replaced inode, if it keeps names
	s.retargetRenamed(ino(r.NewDir), r.NewName)
	r.Respond()
}

// The kernel caches a symlink's target (CACHE_SYMLINKS) and answers later
// readlinks and path walks from it, so only the first READLINK reaches the
// core, which updates atime (relatime). An operation that changes the
// symlink's ctime or times (a chown, a rename, an xattr, a link made or
// removed) makes atime due again on ext4; retargetLink,
// called before such an operation's reply, drops the cached target so that
// the next readlink comes here. (An atime a day old, the third relatime
// rule, is not seen: the cached target has no lifetime.)
func (s *Server) retargetLink(node conquest.Ino, mode uint32) {
	if mode&conquest.S_IFMT != conquest.S_IFLNK {
		return
	}
	// Pages only: the kernel takes no inode lock for this, and the request
	// in flight holds none that a READLINK of the page would need.
	if err := s.conn.InvalidateNode(fuse.NodeID(node), 0, 0); err != nil && err != fuse.ErrNotCached {
		s.opt.Logf("fusefs: invalidating the target of symlink %d: %v", node, err)
	}
}

// retargetLinkIno is retargetLink for an operation whose reply carries no
// attributes.
func (s *Server) retargetLinkIno(node conquest.Ino) {
	if a, err := s.fs.GetAttr(node); err == nil {
		s.retargetLink(node, a.Mode)
	}
}

// retargetRenamed is retargetLink for what a rename moved to dir/name
// (whose ctime it marked).
func (s *Server) retargetRenamed(dir conquest.Ino, name string) {
	if a, err := s.fs.Peek(dir, name); err == nil {
		s.retargetLink(a.Ino, a.Mode)
	}
}

func (s *Server) readlink(r *fuse.ReadlinkRequest) {
	t, err := s.fs.Readlink(ino(r.Node))
	if err != nil {
		s.respondError(r, err)
		return
	}
	r.Respond(t)
}
