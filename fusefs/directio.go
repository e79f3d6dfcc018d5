package fusefs

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

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
// What the kernel does for a cached write it leaves undone for a direct
// one, the daemon does:
//
//   - It removes no privileges before the write (file_remove_privs).
//     S_ISUID and S_ISGID still go, asked by FUSE_WRITE_KILL_SUIDGID for a
//     writer without CAP_FSETID, but security.capability, which any write
//     removes, stays: the core removes it with the data (conquest.KillCaps).
//   - It does not sync after an O_SYNC or O_DSYNC write (or one with
//     RWF_SYNC/RWF_DSYNC): a cached write ends with generic_write_sync, an
//     FSYNC to the daemon, a direct one does not. The WRITE carries the
//     flags, and the daemon syncs before it answers (syncDirect).
//   - It drops its cached pages of the range before it sends the WRITEs
//     (Linux 6.6 and later), and after them only since a 2025 fix ("fuse:
//     invalidate the page cache after direct write"). A read through
//     another handle, or a fault of a mapping, between the two can fetch the
//     old bytes from the daemon and cache them. So after the data is
//     stored, and before the reply, the daemon drops the range again if a
//     READ of the file was served since the kernel looked the inode up
//     (conquest.FS.ReadSinceLookup). A READ in flight holds its page locked,
//     and the invalidation waits for it (for dropWait at most: dropRaced).
//
// Kernels before 6.6 drop nothing before a direct write, so pages cached
// earlier (by a read, or a write through another handle) would outlive it,
// and a mapping's dirty page written back later would overwrite it: on
// those the adapter does not use direct writes (directIOKernel).
//
// One thing is lost that no daemon can give back: the kernel pins the
// writer's pages instead of copying them, and a buffer it cannot pin
// (memory of memfd_secret, a mapping of device memory) makes the write
// fail with EFAULT, where a cached write copies it (found by a review).

// directWrites reports whether a handle opened with flags writes past the
// kernel's page cache.
func (s *Server) directWrites(flags fuse.OpenFlags) bool {
	return !s.opt.WritebackCache && !s.opt.CachedWrites && directIOKernel &&
		flags&fuse.OpenAccessModeMask == fuse.OpenWriteOnly
}

// directIOKernel reports whether the running kernel drops its cached pages
// of a range before a direct write (Linux 6.6, "fuse: invalidate page cache
// pages before direct write"); 6.7 and later are taken, a release of margin.
var directIOKernel = kernelAtLeast(6, 7)

// kernelAtLeast reports whether the running kernel's release is at least
// major.minor; false when it cannot be read.
func kernelAtLeast(major, minor int) bool {
	var u unix.Utsname
	if unix.Uname(&u) != nil {
		return false
	}
	return releaseAtLeast(unix.ByteSliceToString(u.Release[:]), major, minor)
}

// releaseAtLeast parses a release such as "6.18.44-fc-v1272".
func releaseAtLeast(release string, major, minor int) bool {
	var ma, mi int
	if n, _ := fmt.Sscanf(release, "%d.%d", &ma, &mi); n != 2 {
		return false
	}
	return ma > major || ma == major && mi >= minor
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

// oDirect reports whether r is an O_DIRECT write of a handle of the page
// cache (not one the kernel writes back, which carries FUSE_WRITE_CACHE).
// The kernel drops its cached pages of the range before it sends such a
// write, and again after it, but only when the write was synchronous: an
// asynchronous one (io_submit, io_uring), which the kernel queues as
// FUSE_ASYNC_DIO allows (bazil.org/fuse asks for it), returns
// -EIOCBQUEUED, and generic_file_direct_write skips its drop then. A
// buffered read in between fetches the old bytes and keeps them after the
// write has completed: an outside review (session 50) saw it with 64
// io_uring requests at a time on random 4 KiB blocks of a 1 MiB file, half
// O_DIRECT writes, half buffered reads (7 of 60 runs here; ext4 never;
// dropping the cache ended it, the daemon held the new bytes), and a code
// review with a single io_submit write after a read. So the daemon drops
// the range too, before the reply, as after a direct write (dropRaced):
// 0 of 100 runs of the first reproducer.
func oDirect(r *fuse.WriteRequest) bool {
	return uint32(r.FileFlags)&unix.O_DIRECT != 0 && r.Flags&fuse.WriteCache == 0
}

// syncDirect syncs node after a direct write through a handle opened with
// flags, if they ask each write to be synchronous (O_DSYNC, which O_SYNC
// includes; the kernel adds it for RWF_DSYNC and a file or mount marked
// sync), as the kernel would have with an FSYNC after a cached write.
func (s *Server) syncDirect(node conquest.Ino, flags fuse.OpenFlags) error {
	if uint32(flags)&unix.O_DSYNC == 0 {
		return nil
	}
	s.syncWrites.Add(1)
	return s.fs.Fsync(node, uint32(flags)&(unix.O_SYNC&^unix.O_DSYNC) == 0)
}

// dropRaced drops the kernel's cached pages of node in [off, off+n) after a
// direct write stored them, if a READ may have cached old bytes there
// (see above). It runs before the reply: once write(2) returns, no read may
// find the old bytes.
//
// Except when many replies wait so. The kernel locks each page to drop it,
// and a page stays locked while a READ of it waits, and that READ may wait
// for the very WRITEs that wait here: asynchronous O_DIRECT writes
// (io_submit, io_uring) and readahead each take one of the connection's
// background slots (maxBackground), and a READ locks its pages before it
// gets one. With every slot held by a WRITE waiting in its drop, the READ
// was never sent and nothing moved again (a code review, session 50: 64
// such writes of a file and one buffered read of it hung the mount until
// an abort). So while congestedDrops replies wait here, a reply waits for
// its drop dropWait at most, then goes out anyway; it frees a slot, the
// READ is sent and answered (with the new bytes: it was not served before
// the write), its pages come unlocked and the drop, still running, ends. A
// page of old bytes past the locked one in the range may then outlive the
// reply by as long as that READ takes: the cost of never hanging, paid
// only then. Below congestedDrops, the waiting replies hold too few slots
// to keep a READ from its own. It must be called while serving a request.
func (s *Server) dropRaced(node conquest.Ino, off int64, n int) {
	if n <= 0 || !s.fs.ReadSinceLookup(node) {
		return
	}
	s.directDrops.Add(1)
	start := off &^ (pageSize - 1)
	end := (off + int64(n) + pageSize - 1) &^ (pageSize - 1)
	done := make(chan struct{})
	// Counted in the loop's wait group, whose end waits for it: a
	// request's handler, this one, still counts there (the loop cannot
	// have ended).
	s.wg.Add(1)
	go func() {
		defer s.wg.Done()
		defer close(done)
		if err := s.dropPages(node, start, end-start); err != nil {
			s.opt.Logf("fusefs: dropping cached pages of inode %d after a direct write: %v", node, err)
		}
	}()
	s.dropsWaiting.Add(1)
	defer s.dropsWaiting.Add(-1)
	// In slices of dropWait, each ending in a look at the congestion: a
	// reply that began to wait below it goes out once it is reached (the
	// slots may have been lowered, or others come to wait meanwhile).
	t := time.NewTimer(dropWait)
	defer t.Stop()
	for {
		select {
		case <-done:
			return
		case <-t.C:
		}
		if s.dropsWaiting.Load() >= s.congestedDrops() {
			s.lateDrops.Add(1)
			return
		}
		t.Reset(dropWait)
	}
}

// congestedDrops is how many replies waiting in dropRaced make them go out
// after dropWait: half the background slots, so that the rest stay free
// for the READs their drops may wait for. The slots are the connection's
// live limit (at most maxBackground, which the daemon asks for), which root
// may lower through fusectl (a third review: at 16, 16 writes waited
// without a bound and hung), read again at most once a second;
// maxBackground until read, or when it cannot be.
func (s *Server) congestedDrops() int64 {
	now := int64(time.Since(monoStart)) // monotonic: a clock step back stops no refresh
	if last := s.bgReadAt.Load(); (last == 0 || now-last > int64(time.Second)) && s.bgReadAt.CompareAndSwap(last, now) {
		n := int64(maxBackground)
		if id := s.connNumber(); id != "" {
			if b, err := os.ReadFile(fusectlDir + "/" + id + "/max_background"); err == nil {
				if k, err := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64); err == nil && k > 0 {
					n = min(k, maxBackground)
				}
			}
		}
		s.bgSlots.Store(n)
	}
	n := s.bgSlots.Load()
	if n == 0 {
		n = maxBackground // another call is reading it for the first time
	}
	return max(n/2, 1)
}

// monoStart anchors congestedDrops' monotonic clock.
var monoStart = time.Now()

// dropWait is how long dropRaced holds a reply for its drop once congested,
// and how often it looks at the congestion: far longer than a drop takes,
// or a READ in flight that it waits for.
const dropWait = 50 * time.Millisecond
