// Package fusefs is the thin adapter between the Linux FUSE protocol and the
// Conquest core (package conquest). It speaks bazil.org/fuse's protocol layer
// (fuse.Mount, Conn.ReadRequest, each request's Respond) with a serve loop of
// its own, not bazil's fs package. bazil.org/fuse is built from
// third_party/bazil-fuse, patched to negotiate max_pages: READ and WRITE
// requests carry up to MaxRequestData (1 MiB; 128 KiB on kernels before
// 4.20), and reply buffers are sized by the request (reply.go).
//
// What fusefs owns:
//   - the serve loop (server.go): a small pool of reader goroutines (two
//     waiting by default), each of which reads a request and serves it
//     itself (no hand-off to a new goroutine per request, which cost ~75 µs
//     a round trip on two cores against ~19 µs). When every reader is busy
//     (a slow operation), the last one to go busy starts another, up to
//     Options.MaxReaders; readers beyond the idle target retire when they
//     find nothing to do. Two waiting readers measured faster than four,
//     most likely because the kernel wakes the one that has waited longest,
//     so each extra one is one more cold thread in the rotation. One reader
//     at a time reads (Server.readMu, since session 38), and registers a
//     RELEASE or FORGET before the next read, so a request read later finds
//     every free the kernel queued before it (frees.go);
//   - the mapping of FUSE node ids to inodes, which is the identity: a node id
//     is the inode number (root = 1) and the generation is the inode's, so
//     hard links share one node and no node map exists. Kernel references
//     (LOOKUP and the create family add one, FORGET/BATCH_FORGET drop n) are
//     counted by the core (FS.Lookup ... FS.Forget);
//   - the one errno table (errno.go): core sentinel errors to bare
//     syscall.Errno values;
//   - cache policy (options.go, entry.go, attr.go, file.go): long entry and
//     attribute lifetimes, negative lookups cached as node-id-0 entries,
//     KeepCache on open, except that when a read would update atime
//     (FS.KeepCache false: the first read after a change must reach the
//     core) a file of up to 1 MiB drops its cached pages, a larger one
//     only its first page (file.go, atimeCache),
//     readahead (raised to 1 MiB
//     through the mount's bdi, bdi.go) and async reads, HANDLE_KILLPRIV_V2, and invalidation of the attributes the
//     kernel cannot know changed (see invalidate notes in file.go). The
//     writeback cache is opt-in (Options.WritebackCache): it makes large
//     writes several times faster but small-file work ~20% slower (a SETATTR
//     at close of a written file, a GETATTR at every open because the kernel
//     then distrusts its block count), and leaves written data outside the
//     arena until close or fsync (figures in README, "Caching"). Without it,
//     a handle opened O_WRONLY bypasses the page cache (FOPEN_DIRECT_IO,
//     directio.go; Options.CachedWrites turns that off): such writes skip
//     the kernel's copy into cached pages, and the daemon does what the
//     kernel then skips (the capability's removal, the sync of an O_DSYNC
//     write, and dropping pages a READ cached during the write);
//   - directory pagination (dir.go): each dirent's offset is the core's
//     stable scan cursor, so a READDIR resumes where the last one stopped and
//     no directory is ever copied whole;
//   - directories opened without OPENDIR, their listings cached by the
//     kernel (dir.go, dircache.go; Linux >= 5.1): the first OPENDIR is
//     answered ENOSYS; a change to a listed directory's entries, a change
//     of its ctime and a move to another parent drop the kernel's listing
//     before the reply, so open streams, atime and ".." stay as on ext4;
//   - the few replies bazil encodes wrongly (reply.go): bazil's Attr drops
//     S_ISVTX, so entry and attribute replies are encoded here and written to
//     the device directly;
//   - the POLL primer (poll.go): Mount makes the kernel send one POLL, on a
//     phantom file the core never sees, and answers ENOSYS, so that a
//     process serving a mount can open its files with the os package
//     (netpoller, epoll_ctl) without deadlocking with the garbage collector;
//   - the caller's group membership for HANDLE_KILLPRIV_V2 (killpriv.go): a
//     write or truncate by a non-member without CAP_FSETID clears an
//     S_ISGID without group exec (Linux >= 6.2), which the core, knowing no
//     groups, keeps;
//   - the space attribute (space.go): getxattr of system.conquest.space on
//     any file answers the arena's and the disk's space (FS.Space), which
//     statfs can only add together; `conquest df` of a mount reads it;
//   - naming why a mount failed in fusermount3 (nofuse.go): /dev/fuse closed
//     to the user, or fuse3 not installed;
//   - the mount flags bazil cannot pass to fusermount3 (mountflags.go):
//     noexec and noatime are set by a bind remount once the mount is up;
//   - remounts (remount.go): the flags of a live mount, and the daemon told
//     by a root-only setxattr whether to update atimes.
//
// STATFS waits briefly for the RELEASEs and FORGETs that were in progress or
// queued when it arrived, and for the FORGETs the kernel queues when such a
// RELEASE is answered (frees.go), so that space freed by a close and
// unlink shows at once, and never for other ones; ECONNABORTED from
// the device ends serving like ENODEV (a lazy unmount's last close races a
// read and can return it).
//
// RENAME2 (renameat2 with flags), TMPFILE (O_TMPFILE) and LSEEK
// (SEEK_DATA and SEEK_HOLE), which bazil cannot parse, are decoded from
// the raw message it keeps for an unrecognized request (rename2.go,
// tmpfile.go, lseek.go; LSEEK is ENOSYS with the writeback cache).
// The other operations bazil cannot parse (READDIRPLUS,
// COPY_FILE_RANGE, IOCTL, BMAP), POLL and FLUSH are answered ENOSYS, after
// which the kernel falls back to its generic paths or, for POLL and FLUSH, stops sending them: POLL
// is asked once, at Mount, and there is nothing to do at close, and not
// sending FLUSH saves a round trip per close(2). INTERRUPT is acknowledged without a reply: no core operation
// waits on anything but the core's own short locks, so there is nothing to
// cancel.
//
// An OPEN whose read would update atime drops the file's first cached page
// unless another handle has it open for writing; the check and the drop
// hold a striped mutex (dropLock, file.go) that a writer's OPEN waits on,
// taken with no core lock held (the core's locks are taken inside it). A
// fault on the arena's mapping makes every later request EIO without a
// call into the core (conquest/lost.go).
//
// What fusefs must never do: keep file-system state of its own (names,
// attributes, data: all of it is the core's), interpret the arena, hold a
// request's buffers after responding, or let a panic in one request take the
// daemon down (dispatch recovers, answers EIO and logs).
package fusefs
