// Package diskstore is the large-file disk path of Conquest: the device
// interface, the disk superblock, the free-extent map, each large file's
// segment list with per-block checksums, writes that survive the death of
// the process (or, optionally, gathered in memory), crash recovery and
// sequential readahead.
//
// # What diskstore owns
//
// The disk (the --disk of mkfs, a regular file or a block device) holds a
// superblock in block 0 (magic "CONQDISK", version, block size, block count,
// the arena's UUID, a farm-hash checksum; see super.go) and large-file data
// in blocks 1..n-1, nothing else. All metadata lives in the arena:
//
//   - the free map (root slot 5): the free extents, sorted, disjoint and
//     always coalesced, in an xlist (a directory over small sorted leaves,
//     xlist.go); allocation takes the goal block when it is free (a growing
//     file continues where it ends on disk: O(log n)), else the first free
//     run of the wanted length among the 64 free extents after the goal,
//     else the first after where the last longer search ended (the rover),
//     else the first after the goal anywhere (a scan, O(n) in free extents
//     at worst), else the longest run. Extents held for a checkpoint or
//     staged for a write made without the core's lock (stage.go) do not
//     count (freemap.go). The free map also holds the list of
//     files with unsynced records and the quarantine (unsynced.go);
//   - the stats record (root slot 6): number of large files, counters of
//     checksum and I/O errors, the sync epoch, the quarantine's size, and
//     the intent area of in-place appends (inplace.go);
//   - one segment list per large file (its offset is kept with the inode):
//     segments {file block, disk block, count} in one xlist, the checksum of
//     every file block in pages of another xlist (seglist.go), and the
//     unsynced records of the blocks written since the last device sync in
//     a third (unsynced.go).
//
// Arena parameters (pram.Geometry().Params): ParamThreshold (the large-file
// threshold, DefaultThreshold = 1 MiB), ParamBlockSize and ParamDiskBlocks;
// Open refuses a disk whose UUID, block size or block count differs.
//
// What diskstore must never do: store metadata on the disk or a Go pointer in
// the arena; change the arena other than through a pram.Tx (the caller's, or
// its own at Open before the core begins any; the exceptions are fresh
// allocations of the same Tx, checked by freshBytes, two statistics
// counters, the sync epoch and the intent slots, all of which must survive a
// rollback); publish a segment or checksum before the data it describes is
// on the device, and, unless the device was synced since, without an
// unsynced record of the block; reuse a block whose contents a rollback or a
// power failure could still need (the transaction's quarantine and the
// persistent one); write into a block that holds data a rollback could bring
// back, except an append over zeros covered by an intent; return bytes whose
// checksum does not match; panic on a damaged arena or on bad input (errors
// wrap the sentinels of errors.go). It knows nothing of inodes, sizes or
// FUSE: the core keeps each file's size and calls in with its segment list.
//
// # Block size
//
// The block is the unit of allocation, of checksumming and of holes; mkfs
// chooses it (power of two, 4 KiB..1 MiB), the default is 16 KiB. Only files
// above the threshold (1 MiB) live on disk, so the tail block wastes at most
// 1/64 of a file; one 8-byte checksum per 16 KiB costs the arena 512 KiB
// per GiB of data; requests are large anyway (a run of blocks contiguous on
// disk is one request) and always aligned (O_DIRECT needs no bounce for
// block-aligned I/O into aligned buffers). A small write into a written
// block rewrites the whole block (read, merge, checksum, write elsewhere),
// and a small read reads and verifies the whole block: that is why the
// default is 16 KiB rather than 64 KiB, which measured 4 KiB random writes
// 1.5x and random reads 1.45x slower (fio through the mount, 1 GiB file),
// cold sequential reads about the same or 10% slower, and 1 MiB sequential
// writes within the noise (at most 6% faster). Appends, the common small
// write, are written in place (see below), and a block's checksum is a sum
// of per-page hashes, so an append hashes and copies only the pages it
// touches (checksum.go, appendFast in inplace.go; 8 KiB appends into 64 KiB
// blocks measured about 1.2x faster through the mount than with one hash of
// the block). Space is allocated in extents
// that grow with the file: about what the file already holds, at least
// 1 MiB and at most Options.MaxExtent (64 MiB); Trim drops what is left
// beyond the end when the file is closed.
//
// # Devices and O_DIRECT
//
// All disk I/O goes through Device (ReadAt, WriteAt, Sync, Size, Close):
// OpenDevice (a file or block device), MemDevice, FaultDevice (composable
// injectors: Nth operation, from the Nth on, probability, offset range;
// EIO, short transfers, ENOSPC, dropped writes, bit rot) and CrashDevice
// (unsynced writes are lost, kept in part, reordered or torn by Crash; a
// drop filter makes the disk lie). OpenDevice uses O_DIRECT on block devices
// (the store caches and gathers itself; the page cache would hold a second
// copy and reorder writes we must flush anyway) and the page cache on image
// files (usually on a cached file system; tmpfs refuses O_DIRECT), except
// for aligned reads of 256 KiB or more (readahead windows), which use a
// second, O_DIRECT descriptor where the file system allows it: cold reads
// through the image file's page cache measured 3-5x slower, and the FUSE
// page cache holds that data already; smaller reads use the image's page
// cache, which still holds recently written blocks. Its writeback is
// started every 8 MiB written (sync_file_range), so that the disk writes
// while data comes in rather than all at the next sync. A clean Open for a
// mount punches the free extents out of an image file, so that the space
// of deleted files goes back to the host (giveback.go).
// Unaligned direct transfers go through an aligned bounce buffer.
//
// # Durability
//
// A process crash (kill -9 of the daemon, the common "crash" of a user-space
// file system) keeps the kernel's page cache and the arena (a shared
// mapping) and rolls back the arena transaction in flight; a power failure
// or OS crash also loses what the device had not synced, in any subset and
// order, possibly torn (and a disk may lie about a sync). Options.Durability
// chooses what a completed Write promises:
//
//   - DurableOnProcessCrash (default). Write puts the data on the device
//     before it returns (pwrite: the page cache of an image file, the device
//     itself with O_DIRECT) and publishes segments and checksums in the
//     same transaction, without a device sync; the core publishes the size
//     in that transaction too. A completed write survives the death of the
//     process, like a write(2) on ext4. Every block published so is on its
//     file's unsynced list until the next device sync (Fsync of a file
//     written since the last sync, FlushAll, Close, or the sync Write
//     starts once Options.SyncBytes, 64 MiB, were written or quarantined
//     since the last one), which bounds the list, the quarantine and what a
//     power failure can lose. That periodic sync runs in the background
//     (bgsync.go): the writer goes on, and waits only if it writes another
//     SyncBytes first or rewrites a block the sync is making durable; the
//     writer used to wait for every one, which cost a sequential writer
//     through FUSE more than its own writes did. Tick (tick.go), which the
//     core calls every commit interval, starts the same background sync
//     when anything is unsynced, so that data does not stay unsynced on an
//     idle store. After a power failure Open reads back every
//     block on the list and verifies it; a block whose data did not reach
//     the disk reads as at the last sync (its copy of that time is kept in
//     the quarantine until the next sync) or as zeros if it was zeros or a
//     hole then; it is logged with inode, offset and disk block. Bytes
//     fsynced and not written since keep their contents even where a later
//     write to another part of their block was lost (on a disk that honours
//     syncs; a lying disk is caught by the checksums: EIO); no block ever
//     shows another file's data.
//   - GatherInMemory (the previous behaviour). Write gathers a file's writes
//     in memory (at most MaxRuns ranges and Options.FileBuffer bytes per
//     file, Options.TotalBuffer in all) and writes them out when the buffer
//     is full, at Flush/Fsync/Truncate/PunchHole/Writeback, syncing the
//     device before it publishes them. Gathered data is lost by any crash,
//     even of the process alone: the file then reads there as before the
//     write (zeros beyond the old data) even if the core had already
//     published a larger size (the core keeps such sizes volatile, see
//     Buffered).
//
// Fsync (and Flush) keep their strong meaning in both modes: the file's data
// is synced on the device when they return; after Store.Commit the core
// persists the arena metadata (Store.Persist and the inode) and the file is
// durable against power failure.
//
// # Writes, ordering points and crashes
//
// Writes go out as one request per run of blocks contiguous on disk (at
// most 8 MiB). Where the data goes:
//
//   - a block of zeros needs no disk block: its checksum is 0, holes stay
//     holes, and a block whose checksum is 0 is never read (a preallocated
//     block therefore reads as zeros whatever the disk holds: stale data of
//     a deleted file never shows); a check word per checksum page
//     (sumcheck.go) makes a checksum zeroed by damage fail the read instead
//     of reading as zeros;
//   - a mapped block whose checksum is 0 (preallocated, never written) is
//     written in place; so a block that held data and is written with
//     zeros is unmapped and freed, as a punched hole, never kept mapped
//     with checksum 0 (the last durable checkpoint may still map its old
//     contents there);
//   - Abort, after undoing appends written in place (below), syncs the
//     device: a sync that landed inside the transaction made the appends
//     durable and their records stale;
//   - a written block is replaced copy-on-write: new block, then the old one
//     is freed in the same Tx, or, if it holds the contents of the last
//     sync (DurableOnProcessCrash), put in the persistent quarantine until
//     the next sync. Blocks freed in a Tx stay in the Tx's quarantine until
//     it ends, so no later write of the same Tx lands on a block an abort
//     would give back;
//   - except an append (DurableOnProcessCrash): a written block that was
//     written since the last sync and holds zeros where the write goes is
//     written in place, only the aligned range under the write; an intent
//     in the arena lets Abort, or Open after a kill -9, zero that range
//     again if the transaction does not commit (inplace.go). Small appends
//     to a growing file thus cost one small write each, not a block.
//
// So after a crash (the arena rolls back the Tx in flight; the disk keeps
// what was synced, and after a power failure any subset of the rest, torn or
// reordered) every block of every file is its old or its new contents or
// zeros, never another file's, never a torn mix, and every checksum
// matches. Open does the repairs before it returns (Store.Recovery reports
// them); it needs no hint from the core: a store that did not sync at the
// end of its run left live records, and those are what Open verifies.
//
// Checksums are farm hashes seeded per file and per page (summed per
// block; checksum.go), so a misdirected write, a block of another file or
// of another offset never verifies. A
// mismatch fails the read with ErrIO+ErrDataChecksum, is logged with the
// inode, offset and disk block, and counted; the wrong bytes are never
// returned.
//
// # Transactions
//
// The store's volatile state (write buffers, quarantine, intents) follows
// the arena's transactions: a transaction that went through any Store method
// must end with Store.Commit(tx) or Store.Abort(tx) instead of
// tx.Commit/tx.Abort. On Abort, buffers are as before the Tx (data of
// earlier writes that this Tx flushed is buffered again; data of the failed
// write is gone), appends written in place by the Tx are undone on the
// device, and readahead caches are invalidated. A transaction that synced
// the device may have released the quarantine of earlier ones for reuse; an
// abort brings back only stale records, which nothing uses. The core may
// simply end every Tx through the Store. After an error from a Store method
// the caller aborts the Tx (device errors publish nothing and free what the
// failed flush allocated, but an operation may have completed earlier steps
// in the same Tx).
//
// # Concurrency and lock order
//
// Methods taking a *pram.Tx run under the core's write lock, one at a time.
// ReadAt, DiskBytes, Buffered, Stats run under the core's read lock,
// concurrently. Lock order: core fs.mu → Readahead.mu → Store.mu; the
// verified-block cache's mutex (blockcache.go) is a leaf. Readahead
// goroutines take no lock and never read the arena: the foreground read
// resolves blocks and checksums; cached data is tagged with the file's
// generation, which every published change bumps. The goroutines of
// background syncs and writeback starts take no lock either and touch only
// the device; a sync's result is applied by a writer (bgsync.go).
//
// # Using the store from the core
//
//	mkfs:    params[ParamThreshold], params[ParamBlockSize], params[ParamDiskBlocks] =
//	           threshold, bs, BlockCount(dev.Size(), bs)   // pram.Format(..., Features: FeatureDisk)
//	         dev, _ := OpenDevice(path, DeviceOptions{})      // CreateFile(path, size) for a new image
//	         s, _ := Format(tx, heap, dev, bs, opts); s.Commit(tx)
//	mount:   s, _ := Open(heap, dev, opts)                   // right after alloc.Open, before any other Tx:
//	         // on a dirty mount it verifies and repairs the blocks written since the last sync
//	         // by itself (own transactions); nothing else to call. s.Recovery() says what it did.
//	ops:     end every Tx with s.Commit(tx) / s.Abort(tx)
//	to disk: (size crosses ToDisk) seg, _ := s.NewFile(tx, ino); s.Write(tx, seg, 0, small);
//	         s.Flush(tx, seg); then the write itself; free the arena copy; point the inode
//	         at seg — one Tx (Flush syncs: the arena copy it replaces is durable). Several
//	         files with one sync and without the core's lock (stage.go): st, _ := s.Stage(ino,
//	         size, fill) for each (locked), s.WriteStaged(sts) (unlocked: writes, one sync),
//	         then per file seg, _ := s.Adopt(tx, st) if its data is unchanged (a Tx of its
//	         own), and s.Unstage(st) after the Tx, or instead of Adopt
//	write:   s.Write(tx, seg, off, data); the core updates size/mtime in the same Tx. In the
//	         default mode s.Buffered(seg) is 0 when Write returns, so the size is published
//	         at once; with GatherInMemory it stays volatile while Buffered(seg) > 0
//	read:    s.ReadAt(seg, p[:clipped to size], off, ra)  // ra from s.NewReadahead() per handle
//	truncate:s.Truncate(tx, seg, size) on every size change; if ToArena(size): copy out with
//	         ReadAt, s.Destroy(tx, seg), point the inode at the arena copy — one Tx
//	fallocate: s.Allocate(tx, seg, off, n) / s.PunchHole(tx, seg, off, n)
//	fsync:   s.Fsync(tx, seg); s.Commit(tx); s.Persist(seg) and persist the inode
//	release: (last handle) s.Writeback(tx, seg); s.Trim(tx, seg, size); ra.Close()
//	         (Flush would also sync the device, as fsync does: not needed at close)
//	unlink:  (last link, not open) s.Destroy(tx, seg)
//	unmount: s.FlushAll(tx); s.Commit(tx); s.Close()      // Close before closing the arena
//	stat:    s.DiskBytes(seg) for st_blocks; df: s.Stats()
//	fsck:    k := s.NewChecker(allocChecker, CheckOptions{VerifyData, Progress});
//	         k.File(seg, size) for every large file; k.Finish()
//
// # Checking and repair
//
// Checker (check.go) is the store's part of the file system's consistency
// walk (`conquest fsck`): every large file's lists, every disk block used
// by exactly one file or free, and with VerifyData every checksum. It
// reports what a repair can act on as typed errors (errors.go), and the
// repairs are Store methods the core applies each in its own transaction
// (repair.go): records that follow from others are recomputed (a list's
// structure, xmend.go; a segment list's count of blocks; a checksum record
// damaged in a byte or two, told from damaged data), the store's own lists
// are rebuilt from the files (rebuild.go), and what would lose data (a
// file's unreadable list of segments or checksums, a bad block) is changed
// only when the caller allows it. Open with Options.ForCheck lets fsck
// open a store whose list of files with unsynced blocks is damaged.
//
// # Limits
//
// Files up to MaxFileSize (1 PiB) of offsets. A list holds at most 4096
// leaves: about a million free extents, about 700,000 segments per file (11
// GiB even if every 16 KiB block of a file were its own segment, far more in
// practice); beyond, allocation fails with ErrNoSpace or ErrFileTooBig.
// Overwrites need free space (copy-on-write): growth stops short of the last
// overwriteReserve blocks (1/256 of the disk, 1 MiB to 64 MiB, at most an
// eighth), which only copy-on-write takes, so overwrites on a disk that
// growth filled go on at the pace of the syncs that free the old copies
// (freemap.go). Quarantined blocks count as used (Stats
// reports them) until the next sync; an allocation that finds no free block
// syncs first to release them. Records and quarantine are bounded by
// Options.SyncBytes (4096 blocks of 16 KiB by default); the release after a
// sync runs within the journal room a transaction can spare and continues in
// later ones. At most 16 appends in place per transaction (then
// copy-on-write).
package diskstore
