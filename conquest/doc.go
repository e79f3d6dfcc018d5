// Package conquest is the file-system core: inodes, file data, directories,
// symlinks, extended attributes, rename, orphans and the consistency check,
// all kept in the persistent-RAM arena (package pram) through the allocator
// (alloc) and the directory tables (dirhash). It knows nothing of FUSE: it
// speaks in inode numbers and the sentinel errors of errors.go, with the
// errno semantics ext4 gives.
//
// # What the core owns
//
//   - Root slots 1-4 and 7-15 of the arena (root inode, generation counter,
//     orphan list, inode count; 7-10 an unfinished fallocate; 11 the heap's
//     copy of the superblock's static part, supercopy.go; see
//     docs/DESIGN.md).
//   - Inode records: 256-byte allocations, Ino = offset >> 8, except the root
//     (RootIno = 1). Layout and pinned offsets in inode.go.
//   - File data in the arena (file_mem.go): a small block for files up to
//     2 KiB, else a single-level index of 4 KiB blocks with holes, for
//     files up to the large-file threshold (mkfs --large-threshold, 1 MiB
//     by default; 512 MiB files without a disk).
//   - Large files on disk (file_disk.go) through diskstore: a file whose
//     size crosses the threshold moves to disk, one cut to half the
//     threshold or less moves back, each move in one transaction. The inode
//     keeps the segment list's offset (iSeg, flagDisk). Files up to
//     diskstore.MaxFileSize (1 PiB of offsets; holes take no space).
//     With the periodic disk commit, a file written across the threshold
//     but not past twice it waits in the arena for the next tick, which
//     moves the waiting files with one device sync (move.go).
//     When the arena runs down to a reserve kept for metadata, a file
//     that needs more arena storage moves to disk whatever its size
//     (spill.go), so that a full arena with a free disk is not ENOSPC.
//   - Directory semantics over dirhash (dir.go, namei.go, rename.go),
//     symlinks (symlink.go), xattr blobs (xattr.go), the orphan list
//     (orphan.go), Check (check.go, `conquest fsck`) and Repair (repair.go,
//     `conquest fsck --repair`: one Tx per fix, unnamed inodes go to
//     /lost+found).
//   - Read-only file systems (readonly.go): images that cannot be written,
//     opened so that nothing reaches them; every change is ErrReadOnly.
//
// # Lock order
//
//  1. FS.mu (sync.RWMutex). Mutations, including writes of file data and the
//     atime update after a read, hold it exclusively; Lookup, GetAttr, Read,
//     ReadDir, Readlink, xattr reads, StatFS, Space, Usage and Check hold it shared.
//     A read that finds atime due releases the shared lock and then takes the
//     exclusive one (never upgrades in place).
//  2. The pram transaction mutex (Arena.Begin), only under FS.mu held
//     exclusively, so only a checkpoint of a shadowed arena contends for
//     it: pram's background checkpointer (ckptMu, then txMu, without
//     FS.mu), and the checkpoints the FS asks for with FS.mu held and no
//     Tx open (Fsync, Sync, and update on a disk full but for blocks held
//     for a checkpoint).
//  3. diskstore.Readahead.mu, then diskstore.Store.mu, inside Store calls
//     (under FS.mu: Tx-taking calls with it held exclusively, ReadAt shared).
//  4. FS.vol.mu (volatile state: kernel references, open counts, handles
//     and their readahead, the large files to flush at last close), taken
//     alone or under FS.mu, never held while taking FS.mu or running
//     a callback. Forget and Release update it first and only then, if an
//     unlinked inode became unused, take FS.mu exclusively and recheck.
//  5. FS.moveFound's mutex (the files an Open found to move, move.go),
//     taken alone or under FS.mu, with nothing taken while it is held.
//
// The periodic disk commit's goroutine (disk_commit.go) takes FS.mu shared,
// then exclusively when the store has something to settle, and, for files
// waiting to move, once per file to copy its data and once per file to
// switch it to its blocks: the batch's disk writes and device sync run
// without FS.mu (move.go, diskstore.WriteStaged). Close, and an operation
// that finds the arena full (moveForSpace, fs.go), run batches with FS.mu
// held exclusively throughout, disk writes and sync included; a batch of
// the goroutine's in flight meanwhile finds the files moved when it takes
// FS.mu to switch them, and leaves them. Close stops it and waits
// for it before taking FS.mu. After a batch it calls the SetMovedHook
// function for each file moved, with FS.mu not held (the FUSE adapter
// writes an invalidation to the kernel there).
//
// fs.lsize (the unpublished sizes of large files, see file_disk.go),
// fs.moving (the files waiting to move, move.go), fs.moveHeld (files
// whose move at a write overflowed the journal) and fs.moveWait (the ticks
// left before moves are tried again after a failure) are guarded by FS.mu:
// written with it held exclusively, read shared.
//
// ReadDir calls its callback with FS.mu held shared: the callback must not
// call back into the FS (a queued writer would deadlock it).
//
// A fault on the arena's mapping (lost.go) may leave any of these held for
// good. Once the arena is lost, nothing takes them again: operations fail
// with ErrIO before their lock (the FUSE adapter checks Lost first), and
// Close takes none.
//
// # Durability contract
//
// Every metadata operation runs in one pram.Tx (undo journal) and is atomic
// with respect to a crash of the daemon at any instruction: after kill -9
// the next Open rolls back the interrupted Tx, so each operation either
// happened or did not, and Check is clean. Operations that must free more
// than one Tx can journal (unlinking or truncating a large file) first put
// the inode on the orphan list in the Tx that makes the change, then free
// in batches of self-consistent Txs; Open finishes the job after a crash.
// Likewise unlinked inodes still open or referenced stay on the orphan list
// and Open frees them (nothing is open after a restart).
//
// File data in the arena is not journaled: bytes are copied into blocks
// unlogged, so a write interrupted by a crash may be partly applied (as
// POSIX allows), but the size and block map only change with the Tx. Data
// blocks are allocated before any byte is copied, so a write failing with
// ErrNoSpace changes nothing. A write to an arena file commits per 1 MiB
// chunk (a FUSE write is at most 128 KiB, or 1 MiB with max_pages, so one
// Tx); a write to a large file is one Tx unless the journal runs low.
//
// Large-file data is written copy-on-write through diskstore: a crash
// leaves every block old or new, never torn, never another file's. With the
// store's default durability (diskstore.DurableOnProcessCrash) a write
// reaches the device before its Tx publishes the size and the segments
// that cover it, so it survives kill -9; a power failure may lose blocks
// written since the last device sync, which the store's recovery at Open
// turns back into their synced contents or zeros (the size stays). The
// device is synced every SyncBytes written, at fsync, and, with
// Options.DiskCommit, in the background every interval while anything is
// unsynced, so an idle file system does not keep unsynced data for long. With
// diskstore.GatherInMemory writes are gathered in memory and written in
// large requests; the store syncs the disk before the arena points at new
// data, and the core publishes a size only when no byte below it is still
// gathered (until then the larger size is volatile, like ext4's i_size
// beside i_disksize): after any crash a file's size covers only data on
// disk, and unflushed writes are lost (the file reads as before them).
// Fsync of a large file writes and syncs its data, commits its size and
// segment list, then persists the arena. The last close of a written large
// file writes back what is gathered and trims the preallocation; Sync and
// Close write everything and sync the disk. A device error fails the
// operation with ErrIO (ErrNoSpace for a full disk), aborts its Tx and
// leaves the file system mounted and consistent; gathered data that failed
// to flush stays gathered for a retry. A read whose data does not match its
// checksum fails with ErrIO and is logged with the inode, offset and disk
// block. Releasing much disk data (a large truncate, unlinking a large
// file, punching a large hole) takes one Tx per 1024 disk blocks; a
// truncate publishes the new size in the first and keeps the inode on the
// orphan list until the rest is released (Open finishes after a crash).
//
// Stores reach the page cache (or the arena's RAM copy in tmpfs) in program
// order; that survives a process crash. An arena image on a disk, or on a
// block device, is shadowed by pram (a RAM copy, checkpointed back through
// slots): after a power loss it is as of its last checkpoint, consistent.
// Fsync, FsyncDir and Sync make one (Arena.Sync), after the disk data they
// publish is synced, so what they covered survives a power loss; the store
// holds the disk blocks freed since the last checkpoint from reuse, so a
// file a power loss brings back still reads as it was. An arena mapped in place
// (device-DAX, tmpfs, a block device formatted by an older mkfs) is
// msynced at the same points.
//
// Every operation recovers a panic (journal full, a damaged arena making an
// accessor fail, a bug), aborts its Tx, logs the cause and returns ErrIO;
// an error returned after the Tx began also aborts it, so a failed
// operation leaves the arena unchanged.
//
// # What the core must never do
//
// Import unsafe or hold a Go pointer in the arena; store metadata other than
// through a Tx (data and fresh allocations excepted, as above); trust an
// inode number from the kernel or a directory entry without validation
// (ErrStale); crash on a damaged arena.
package conquest
