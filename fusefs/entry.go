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
	s.entryOrError(r, ino(r.Node), a, err)
}

func (s *Server) mkdir(r *fuse.MkdirRequest) {
	a, err := s.fs.Mkdir(ino(r.Node), r.Name, unixMode(r.Mode), cred(&r.Header))
	s.entryOrError(r, ino(r.Node), a, err)
}

func (s *Server) symlink(r *fuse.SymlinkRequest) {
	a, err := s.fs.Symlink(ino(r.Node), r.NewName, r.Target, cred(&r.Header))
	s.entryOrError(r, ino(r.Node), a, err)
}

func (s *Server) link(r *fuse.LinkRequest) {
	// The reply carries the inode's new nlink and ctime, which the kernel
	// stores in the one inode all of its names share.
	a, err := s.fs.Link(ino(r.OldNode), ino(r.Node), r.NewName)
	if err == nil {
		s.dropCached(a.Ino, a.Mode)
	}
	s.entryOrError(r, ino(r.Node), a, err)
}

// entryOrError replies to a request that made an entry in dir.
func (s *Server) entryOrError(r fuse.Request, dir conquest.Ino, a conquest.Attr, err error) {
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.dirChanged(dir)
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
	s.dirChanged(ino(r.Node))
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
	s.dropCached(kept.Ino, kept.Mode)
	s.dirChanged(ino(r.Node))
	r.Respond()
}

func (s *Server) rename(r *fuse.RenameRequest) {
	// Plain RENAME; renameat2 with flags arrives as RENAME2 (rename2.go).
	kept, err := s.fs.RenameKept(ino(r.Node), r.OldName, ino(r.NewDir), r.NewName, 0)
	if err != nil {
		s.respondError(r, err)
		return
	}
	s.dropCached(kept.Ino, kept.Mode) // the replaced inode, if it keeps names
	s.dropCachedRenamed(ino(r.NewDir), r.NewName)
	s.dirChanged(ino(r.Node), ino(r.NewDir))
	r.Respond()
}

// The kernel caches a symlink's target (CACHE_SYMLINKS) and a directory's
// listing (no OPENDIR, dir.go) and answers later readlinks, path walks and
// readdirs from them, so only the first READLINK or READDIR reaches the
// core, which updates atime (relatime). An operation that changes the
// inode's ctime or times (a chown or chmod, a rename, an xattr, a link
// made or removed) makes atime due again on ext4, and a directory moved to
// another parent has a new ".."; the kernel notices neither (it rereads a
// listing only when the directory's entries or mtime changed). dropCached,
// called before such an operation's reply, drops the cached target or
// listing so that the next readlink or readdir comes here. (An atime a day
// old, the third relatime rule, is not seen: the cache has no lifetime.)
func (s *Server) dropCached(node conquest.Ino, mode uint32) {
	switch mode & conquest.S_IFMT {
	case conquest.S_IFLNK:
	case conquest.S_IFDIR:
		if !s.unlisted(node) {
			return // the kernel holds no listing of it (dircache.go)
		}
	default:
		return
	}
	// Pages only (and the attributes): the kernel takes no inode lock for
	// this, and the request in flight holds none that a READLINK or READDIR
	// of the page would need.
	if err := s.dropPages(node, 0, 0); err != nil {
		s.opt.Logf("fusefs: invalidating the cached contents of inode %d: %v", node, err)
	}
}

// dropCachedIno is dropCached for an operation whose reply carries no
// attributes.
func (s *Server) dropCachedIno(node conquest.Ino) {
	if a, err := s.fs.GetAttr(node); err == nil {
		s.dropCached(node, a.Mode)
	}
}

// dropCachedRenamed is dropCached for what a rename moved to dir/name
// (whose ctime it marked, and whose ".." it may have changed).
func (s *Server) dropCachedRenamed(dir conquest.Ino, name string) {
	if a, err := s.fs.Peek(dir, name); err == nil {
		s.dropCached(a.Ino, a.Mode)
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
