package fusefs

import (
	"bazil.org/fuse"

	"conquest/conquest"
)

// Write-only handles bypass the kernel's page cache.
//
// Without the writeback cache, every write(2) reaches the daemon before it
// returns (write-through). Through a handle of the page cache the kernel
// also copies the data into its cache first, page by page, and keeps it
// there; a handle opened O_WRONLY gets FOPEN_DIRECT_IO instead, so the
// kernel hands the writer's own pages to the WRITE and caches nothing.
// Nothing can read through such a handle, nor map it (mmap needs read
// access), so all it loses is a page cache for later readers, who fetch
// what they read. Measured (session 47, 1 GiB of random data in 1 MiB
// writes with conv=fsync): 1.2–1.3 GB/s against 1.0 through the page
// cache; in bench/nullfuse, which stores nothing, 3.0–3.6 against 1.7.
// PostMark, whose writers open O_WRONLY, gained too (docs/DESIGN.md,
// "Session 47").
//
// Two things the kernel does for a cached write it leaves undone for a
// direct one, and the daemon does them:
//
//   - It removes no privileges before the write (file_remove_privs).
//     S_ISUID and S_ISGID still go, asked by FUSE_WRITE_KILL_SUIDGID for a
//     writer without CAP_FSETID, but security.capability, which any write
//     removes, stays: the core removes it with the data (conquest.KillCaps).
//   - It drops its cached pages of the range before it sends the WRITEs,
//     not after. A read through another handle, or a fault of a mapping,
//     between the two can fetch the old bytes from the daemon and cache
//     them, and they would outlive the write. So after the data is stored,
//     and before the reply, the daemon drops the range again if the kernel
//     may cache pages of the file: if a READ of it was served since the
//     kernel looked the inode up (noteCached; a FORGET of its last
//     reference ends that, the pages go with the inode). A READ in flight
//     holds its page locked, and the invalidation waits for it.

// directWrites reports whether a handle opened with flags writes past the
// kernel's page cache.
func (s *Server) directWrites(flags fuse.OpenFlags) bool {
	return !s.opt.WritebackCache && !s.opt.CachedWrites && flags&fuse.OpenAccessModeMask == fuse.OpenWriteOnly
}

// openFlags is the reply's flags for a handle opened with flags, given the
// cache flags already decided.
func (s *Server) openFlags(cache fuse.OpenResponseFlags, flags fuse.OpenFlags) fuse.OpenResponseFlags {
	if s.directWrites(flags) {
		cache |= fuse.OpenDirectIO
	}
	return cache
}

// directWrite reports whether r came through a handle that bypasses the
// page cache. Pages the kernel writes back (a shared mapping's) carry
// FUSE_WRITE_CACHE and come through a handle that can map, never such a
// one.
func (s *Server) directWrite(r *fuse.WriteRequest) bool {
	return r.Flags&fuse.WriteCache == 0 && s.directWrites(r.FileFlags)
}

// noteCached records, before a READ of node is served, that the kernel
// may cache pages of it from now on.
func (s *Server) noteCached(node conquest.Ino) {
	if _, ok := s.cached.Load(node); !ok {
		s.cached.Store(node, struct{}{})
	}
}

// forgotten notes that the kernel dropped node, and its pages with it.
func (s *Server) forgotten(node conquest.Ino) {
	s.cached.Delete(node)
}

// dropRaced drops the kernel's cached pages of node in [off, off+n) after a
// direct write stored them, if a READ may have cached old bytes there
// (see above). It runs before the reply: once write(2) returns, no read may
// find the old bytes.
func (s *Server) dropRaced(node conquest.Ino, off int64, n int) {
	if n <= 0 {
		return
	}
	if _, ok := s.cached.Load(node); !ok {
		return
	}
	start := off &^ (pageSize - 1)
	end := (off + int64(n) + pageSize - 1) &^ (pageSize - 1)
	if err := s.conn.InvalidateNode(fuse.NodeID(node), start, end-start); err != nil && err != fuse.ErrNotCached {
		s.opt.Logf("fusefs: dropping cached pages of inode %d after a direct write: %v", node, err)
	}
}
