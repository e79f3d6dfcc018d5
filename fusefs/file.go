package fusefs

import (
	"os"
	"sync"

	"bazil.org/fuse"

	"conquest/conquest"
)

// handleFlags are the open flags the core keeps for a handle: all but
// O_APPEND. The kernel places every write on an O_APPEND descriptor at the
// end of the file itself (at its i_size, which with the writeback cache
// only the kernel knows before its dirty pages come back), and it writes
// cached pages back through any writable handle, an O_APPEND one included,
// at their own offsets: the core must write where each WRITE says.
func handleFlags(f fuse.OpenFlags) uint32 {
	return uint32(f) &^ conquest.O_APPEND
}

func (s *Server) open(r *fuse.OpenRequest) {
	h, err := s.fs.Open(ino(r.Node), handleFlags(r.Flags))
	if err != nil {
		s.respondError(r, err)
		return
	}
	// KeepCache: every change to a file's data passes through the kernel's
	// page cache on its way here (there is no other writer), so what the
	// kernel cached at the last close is still right. But a read served
	// from that cache never reaches the core, which updates atime. When a
	// read now would update it (relatime), the first read must come here:
	// see atimeCache.
	node := ino(r.Node)
	flags := fuse.OpenKeepCache
	if uint32(r.Flags)&conquest.O_ACCMODE != 0 && !s.opt.WritebackCache {
		// The handle is counted as a writer (fs.Open); an atimeCache
		// in progress that did not see it ends before this open does,
		// so none drops a page this handle writes into (see there).
		s.lockDrop(node).Unlock()
	}
	if !s.fs.KeepCache(node) && !s.atimeCache(node, conquest.Handle(h), uint32(r.Flags)) {
		flags = 0
	}
	r.Respond(&fuse.OpenResponse{Handle: fuse.HandleID(h), Flags: s.openFlags(flags, r.Flags)})
}

// dropLock is the mutex that orders, for node, an atimeCache's check for
// writers and its invalidation against the open of a writer (a stripe of
// Server.dropMu).
func (s *Server) dropLock(node conquest.Ino) *sync.Mutex {
	return &s.dropMu[uint64(node)%uint64(len(s.dropMu))]
}

// atimeCache decides the open of a file whose atime a read would update
// (relatime). A file of at most atimeDropAll bytes has its cached pages
// invalidated now, before the open completes, so that its first read
// reaches the core (which updates atime). A larger file keeps all but its
// first page, so that a read from the start updates atime while the rest
// of the file is still served from the cache: a large file read again
// after it was written is not fetched again whole; a first read that does
// not start in its first page does not update atime then. Small files (up
// to 128 KiB) used to drop their whole cache by not keeping it (no
// FOPEN_KEEP_CACHE), and that drop
// raced an in-place rewrite by another process, leaving pages older than
// a write that had returned in the kernel's cache
// (TestNoStalePagesAfterAtimeOpen). It reports
// whether the cache may be kept. A handle that cannot read (O_WRONLY, or
// O_TRUNC, which modifies the file anyway) or whose reads leave atime alone
// (O_NOATIME) keeps the cache as it is.
//
// Nor is the first page dropped while another handle has the file open for
// writing (that read then leaves atime as it was). Without the writeback
// cache the kernel copies a write into its cached pages, unlocks them, and
// only then sends the WRITE; a page dropped in between was read back from
// the core as it was before the write, and stayed in the cache after the
// write returned (TestNoStalePagesAfterAtimeOpen saw 1 of 9,181 reads
// stale in a CI run). dropLock makes the check and the invalidation one
// step against the open of a writer, which cannot write before its open
// completes. The last writer's close counts once its RELEASE is served,
// so the open of a reader that follows that close first waits for the
// RELEASEs in progress (frees.await). An empty file keeps its
// cache too: not keeping it would have the kernel drop every page after
// this open, outside that lock. With the
// writeback cache there is no such window (a write stays in the kernel's
// dirty pages, which the invalidation writes back before it drops them),
// and the rule would cost more: the kernel sends a file's RELEASE only
// after writing its dirty pages back, so a file written and closed counted
// as open for writing a while longer, and a read right after the close
// left atime as it was (TestPosixWriteback's AtimeRelatime failed so once).
func (s *Server) atimeCache(node conquest.Ino, h conquest.Handle, openFlags uint32) bool {
	if openFlags&conquest.O_ACCMODE == conquest.O_WRONLY || openFlags&(conquest.O_TRUNC|conquest.O_NOATIME) != 0 {
		return true
	}
	if !s.opt.WritebackCache && s.fs.OpenForWrite(node, h) {
		// Perhaps only until a RELEASE already queued is served: the
		// kernel sends it once close(2) has returned, so the last
		// writer's RELEASE comes before the open of a reader that
		// followed that close, but another reader may still be serving
		// it. Waiting for it here, outside dropLock, keeps such a read
		// updating atime.
		s.frees.await(true)
	}
	defer s.lockDrop(node).Unlock()
	if !s.opt.WritebackCache && s.fs.OpenForWrite(node, h) {
		return true
	}
	a, err := s.fs.GetAttr(node)
	if err != nil {
		return false
	}
	if a.Size == 0 {
		return true // nothing cached to drop
	}
	// No lock of the kernel's that the OPEN in flight holds is needed to
	// invalidate pages; a page locked by a READ or WRITE in flight waits for
	// its reply, which another reader serves.
	drop := int64(pageSize)
	if a.Size <= atimeDropAll {
		drop = 0 // all of it
	}
	if err := s.dropPages(node, 0, drop); err != nil {
		s.opt.Logf("fusefs: invalidating the cached pages of inode %d: %v", node, err)
		return false
	}
	return true
}

// atimeDropAll is the largest file whose whole cache atimeCache drops, so
// that a first read anywhere in it updates atime: an outside review (session
// 46) saw a read of the ninth page of a 64 KiB file leave atime as it was,
// where ext4 updates it. Reading such a file again from the core is cheap
// (it lives in the arena up to the large-file threshold, 1 MB by
// default); a larger file drops only its first page.
const atimeDropAll = 1 << 20

func (s *Server) read(r *fuse.ReadRequest) {
	buf := dataBuf(r.Size)
	size := min(r.Size, len(*buf)-outHeaderSize)
	if size < 0 {
		size = 0
	}
	n, err := s.fs.Read(ino(r.Node), conquest.Handle(r.Handle), r.Offset, (*buf)[outHeaderSize:outHeaderSize+size])
	if err != nil {
		putDataBuf(buf)
		s.respondError(r, err)
		return
	}
	s.replyData(r, buf, n)
}

func (s *Server) write(r *fuse.WriteRequest) {
	node := ino(r.Node)
	// With HANDLE_KILLPRIV_V2 the kernel flags writes by callers without
	// CAP_FSETID, and the core clears S_ISUID, and S_ISGID with group exec;
	// an S_ISGID without group exec is cleared here if the writer is not
	// in the file's group (killpriv.go). The kernel's cached mode would
	// keep the bits (it only invalidates times and size after a write), so
	// note whether they were set and invalidate if so.
	kill := r.Flags&fuse.WriteKillSUIDGID != 0
	privBefore, dropSGID := false, false
	if kill {
		if a, err := s.fs.GetAttr(node); err == nil && a.Mode&(conquest.S_ISUID|conquest.S_ISGID) != 0 {
			privBefore = true
			dropSGID = sgidKeptByCore(a.Mode) && !inGroup(&r.Header, a.Gid)
		}
	}
	direct := s.directWrite(r)
	var n int
	var err error
	switch {
	case s.opt.WritebackCache:
		// The kernel owns the times of a file it caches and sends them
		// with a SETATTR of its own, maybe before this WRITE, and for a
		// write that bypasses its cache (O_DIRECT, or one that clears
		// set-user-ID) not at all when its clock has not moved since
		// it last set them: it stamped them before sending this.
		n, err = s.fs.WriteKeepTimes(node, conquest.Handle(r.Handle), r.Offset, r.Data, kill)
	case direct:
		// The kernel removed no file capability before it (directio.go).
		k := conquest.KillCaps
		if kill {
			k |= conquest.KillSUIDGID
		}
		n, err = s.fs.WriteKill(node, conquest.Handle(r.Handle), r.Offset, r.Data, k)
	default:
		n, err = s.fs.Write(node, conquest.Handle(r.Handle), r.Offset, r.Data, kill)
	}
	// A write(2) that stopped part way is a short write, as on any file
	// system, and its caller sees the error on its next write. A write of
	// cached pages (the writeback cache) is another matter: the kernel
	// ignores the count of its reply, marks every page clean and reports
	// only an error (at the next fsync), so the part not written would be
	// lost silently. Those get the error.
	if err != nil && (n == 0 || r.Flags&fuse.WriteCache != 0) {
		if r.Flags&fuse.WriteCache != 0 {
			off, length := r.Offset, int64(len(r.Data))
			s.respondError(r, err)
			s.wg.Add(1) // this request's reader still counts
			go func() {
				defer s.wg.Done()
				s.dropUnstored(node, off, length)
			}()
			return
		}
		s.respondError(r, err)
		return
	}
	if dropSGID {
		// The data is written: failing the write now would mislead the
		// caller, so a failure here is only logged.
		if err := s.dropSGID(node, cred(&r.Header)); err != nil {
			s.opt.Logf("fusefs: clearing S_ISGID of inode %d after a write: %v", node, err)
		}
	}
	if privBefore {
		// Before the reply, so the writer cannot stat the file before the
		// kernel has dropped its cached mode (invalidation takes no lock
		// that the pending WRITE holds).
		s.invalidateAttr(node)
	}
	if direct {
		// As generic_write_sync after a cached write: the data is written
		// whatever the sync's outcome, and the error is the write's.
		serr := s.syncDirect(node, r.FileFlags)
		s.dropRaced(node, r.Offset, n)
		if serr != nil {
			s.respondError(r, serr)
			return
		}
	} else if oDirect(r) {
		s.dropRaced(node, r.Offset, n)
	}
	r.Respond(&fuse.WriteResponse{Size: n})
}

// dropUnstored invalidates the kernel's cached pages of node in [off,
// off+length), which a write of cached pages (a store through a shared
// mapping, or the writeback cache) failed to store (ENOSPC, EIO). The
// kernel marks such pages clean and keeps them, so reads went on returning
// bytes the file system never stored until the pages were evicted, and
// after a remount the file read otherwise (an outside review, session 46:
// msync said ENOSPC, later reads showed the stores). Dropped, they are read
// back as the file holds them; the writer learns of the loss from msync or
// fsync, as before. It runs after the reply: the pages stay locked for
// writeback until then, and invalidation waits for them.
func (s *Server) dropUnstored(node conquest.Ino, off, length int64) {
	start := off &^ (pageSize - 1)
	end := (off + length + pageSize - 1) &^ (pageSize - 1)
	if err := s.dropPages(node, start, end-start); err != nil {
		s.opt.Logf("fusefs: dropping the cached pages of inode %d that a failed write did not store: %v", node, err)
	}
}

func (s *Server) fsync(r *fuse.FsyncRequest) {
	// Flags bit 0 is FUSE_FSYNC_FDATASYNC.
	var err error
	if r.Dir {
		err = s.fs.FsyncDir(ino(r.Node))
	} else {
		err = s.fs.Fsync(ino(r.Node), r.Flags&1 != 0)
	}
	if err != nil {
		s.respondError(r, err)
		return
	}
	if s.opt.WritebackCache && !r.Dir {
		// The kernel wrote its dirty pages before this FSYNC, so the
		// allocation (st_blocks) it cached is stale now; with write-through
		// every WRITE reply already led it to refetch. Before the reply, so
		// a stat after fsync sees the blocks.
		s.invalidateAttr(ino(r.Node))
	}
	r.Respond()
}

func (s *Server) fallocate(r *fuse.FAllocateRequest) {
	node := ino(r.Node)
	fallocate := s.fs.Fallocate
	if s.opt.WritebackCache {
		// The kernel owns the times of a file it caches: it stamped
		// them before this request and sends them with a SETATTR.
		fallocate = s.fs.FallocateKeepTimes
	}
	if err := fallocate(node, int64(r.Offset), int64(r.Length), uint32(r.Mode)); err != nil {
		// Steps before the one that failed may have reserved blocks: drop
		// the kernel's cached st_blocks before the caller can stat.
		s.invalidateAttr(node)
		s.respondError(r, err)
		return
	}
	r.Respond()
	// Size and blocks changed; recent kernels invalidate them after
	// FALLOCATE themselves, older ones do not.
	s.invalidateAttr(node)
}

// invalidateAttr drops the kernel's cached attributes of node (not its
// data: a negative offset means attributes only). It takes no inode lock in
// the kernel, so it is safe to send while the kernel holds one.
func (s *Server) invalidateAttr(node conquest.Ino) {
	if err := s.conn.InvalidateNode(fuse.NodeID(node), -1, 0); err != nil && err != fuse.ErrNotCached {
		s.opt.Logf("fusefs: invalidating attributes of inode %d: %v", node, err)
	}
}

// pageSize is the kernel's page size, the unit of its page cache.
var pageSize = int64(os.Getpagesize())
