package fusefs

import (
	"syscall"

	"bazil.org/fuse"

	"conquest/conquest"
)

// noOpenDirKernel reports whether the running kernel takes ENOSYS to
// OPENDIR as "opening a directory needs no request" (Linux 5.1,
// FUSE_NO_OPENDIR_SUPPORT); older ones fail the opendir(3) with it.
var noOpenDirKernel = kernelAtLeast(5, 1)

// opendir answers OPENDIR with ENOSYS where the kernel allows it. The
// kernel then opens directories without asking for the rest of the mount
// (fc->no_opendir): no OPENDIR and no RELEASEDIR, two round trips saved
// per opendir(3) (dbench spends half its requests on them), and it keeps
// each directory's listing in its page cache (FOPEN_KEEP_CACHE |
// FOPEN_CACHE_DIR), so a listing is read from the daemon once per change.
// Why that stays correct:
//   - READDIR needs no handle: its offset is the core's stable cursor, the
//     same whether the kernel resumes from its cache or from here.
//   - The kernel rereads a listing at opendir(3) and rewinddir(3) when the
//     directory's i_version (bumped by every create, link, unlink, rename
//     and rmdir in it through this mount) or mtime has changed; within one
//     open stream it may go on serving the entries it had, as POSIX allows
//     for entries added or removed after opendir; a position not in its
//     cache (seekdir) is asked for here.
//   - Entries change only through the kernel: the daemon renames, creates
//     and removes nothing on its own while mounted (fsck's repairs run
//     unmounted).
//   - What the kernel does not see, ".." of a directory moved to another
//     parent and relatime's atime due after a ctime change, is dropped
//     before the reply (dropCached, entry.go).
//
// A directory open for reading keeps its inode anyway: the open file pins
// the kernel's inode, so no FORGET comes while it is open, and the core's
// open count of directories was only ever that.
func (s *Server) opendir(r *fuse.OpenRequest) {
	if noOpenDirKernel {
		r.RespondError(syscall.ENOSYS)
		return
	}
	h, err := s.fs.OpenDir(ino(r.Node))
	if err != nil {
		s.respondError(r, err)
		return
	}
	// No OpenCacheDir: without FUSE_NO_OPENDIR_SUPPORT the kernel re-reads
	// the directory on each opendir.
	r.Respond(&fuse.OpenResponse{Handle: fuse.HandleID(h)})
}

// direntSize is the encoded size of a fuse_dirent with an n-byte name:
// ino u64, off u64, namelen u32, type u32, name, padded to 8 bytes.
func direntSize(n int) int { return (24 + n + 7) &^ 7 }

// putDirent encodes one fuse_dirent at the start of b, which must hold
// direntSize(len(name)) bytes. off is where the next READDIR resumes.
func putDirent(b []byte, ino conquest.Ino, off uint64, typ uint8, name string) int {
	n := direntSize(len(name))
	ne.PutUint64(b[0:], uint64(ino))
	ne.PutUint64(b[8:], off)
	ne.PutUint32(b[16:], uint32(len(name)))
	ne.PutUint32(b[20:], uint32(typ)) // DT_* values are the FUSE dirent types
	copy(b[24:], name)
	clear(b[24+len(name) : n])
	return n
}

// readdir fills one READDIR reply from the core's scan, starting at the
// cursor the kernel hands back (the offset of the last dirent it consumed,
// 0 at the start). Each dirent's offset is the core's stable next-cursor, so
// entries created or deleted between two READDIRs (rm -rf) never make the
// scan skip or repeat a surviving entry, and no directory is copied whole.
func (s *Server) readdir(r *fuse.ReadRequest) {
	buf := dataBuf(r.Size)
	room := min(r.Size, len(*buf)-outHeaderSize)
	out := (*buf)[outHeaderSize : outHeaderSize+max(room, 0)]
	used := 0
	list := s.fs.ReadDir
	if r.FileFlags&fuse.OpenFlags(syscall.O_NOATIME) != 0 {
		// The stream's own flags come with each READDIR. (The kernel
		// may keep what it lists for later streams without O_NOATIME,
		// which then leave atime alone too.)
		list = s.fs.ReadDirNoAtime
	}
	err := list(ino(r.Node), uint64(r.Offset), func(name string, child conquest.Ino, typ uint8, next uint64) bool {
		if used+direntSize(len(name)) > len(out) {
			return false
		}
		used += putDirent(out[used:], child, next, typ, name)
		return true
	})
	if err != nil && used == 0 {
		putDataBuf(buf)
		s.respondError(r, err)
		return
	}
	// An error after some entries: return those; the next READDIR resumes
	// at the failing entry and reports it.
	s.noteListed(ino(r.Node))
	s.replyData(r, buf, used)
}
