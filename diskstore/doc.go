// Package diskstore is the large-file disk path of Conquest: the device
// interface, the disk superblock, the free-extent map, each large file's
// segment list with per-block checksums, gathered writes and sequential
// readahead.
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
//     run of the wanted length after the goal (a scan, O(n) in free extents
//     at worst), else the longest run;
//   - the stats record (root slot 6): number of large files, and counters of
//     checksum and I/O errors;
//   - one segment list per large file (its offset is kept with the inode):
//     segments {file block, disk block, count} in one xlist, and the
//     checksum of every file block in pages of another xlist (seglist.go).
//
// Arena parameters (pram.Geometry().Params): ParamThreshold (the large-file
// threshold, DefaultThreshold = 1 MiB), ParamBlockSize and ParamDiskBlocks;
// Open refuses a disk whose UUID, block size or block count differs.
//
// What diskstore must never do: store metadata on the disk or a Go pointer in
// the arena; change the arena other than through the caller's pram.Tx (the
// exceptions are fresh allocations of the same Tx, checked by freshBytes, and
// two statistics counters); publish a segment or checksum before the data it
// describes is durable; write into a block that holds data a rollback could
// bring back; return bytes whose checksum does not match; panic on a damaged
// arena or on bad input (errors wrap the sentinels of errors.go). It knows
// nothing of inodes, sizes or FUSE: the core keeps each file's size and calls
// in with its segment list.
//
// # Block size
//
// The block is the unit of allocation, of checksumming and of holes; mkfs
// chooses it (power of two, 4 KiB..1 MiB), the default is 64 KiB. Only files
// above the threshold (1 MiB) live on disk, so the tail block wastes at most
// 1/16 of a file; one 8-byte checksum per 64 KiB keeps the arena cost at
// 128 KiB per GiB of data and the checksum pass cheap; requests are large
// and always aligned (O_DIRECT needs no bounce for block-aligned I/O into
// aligned buffers). The price is that a small write into a written block
// rewrites the whole block (read, merge, checksum, write elsewhere), which
// large, mostly sequential files rarely need. Space is allocated in extents
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
// files (usually on a cached file system; tmpfs refuses O_DIRECT). Unaligned
// direct transfers go through an aligned bounce buffer.
//
// # Writes, ordering points and crashes
//
// Write gathers a file's writes in memory (at most MaxRuns ranges and
// Options.FileBuffer bytes per file, Options.TotalBuffer in all); reads see
// them at once. Flush (also from Write when a buffer is full, and from
// Fsync, Truncate, PunchHole) writes them as one request per run of blocks
// contiguous on disk, syncs the device, and only then publishes segments
// and checksums through the Tx: data reaches the disk before the arena
// points at it. Where the data goes:
//
//   - a block of zeros needs no disk block: its checksum is 0, holes stay
//     holes, and a block whose checksum is 0 is never read (a preallocated
//     block therefore reads as zeros whatever the disk holds: stale data of
//     a deleted file never shows);
//   - a mapped block whose checksum is 0 is written in place;
//   - a written block is replaced copy-on-write: new block, then the old one
//     is freed in the same Tx. Blocks freed in a Tx stay in quarantine until
//     it ends, so no later write of the same Tx lands on a block an abort
//     would give back.
//
// So after a crash (the arena rolls back the Tx in flight; the disk keeps
// only what was synced, or any subset of the rest, torn or reordered) every
// block of every file is its old or its new contents or zeros, never another
// file's, never a torn mix, and every checksum matches. Data gathered but
// never flushed is lost by a crash: the file reads there as before the write
// (zeros beyond the old data) even if the core had already published a
// larger size. Fsync flushes; when the core then commits and persists the
// arena metadata (Store.Persist for the segment list and free map, the core
// for the inode), the file is durable.
//
// Checksums are farm hashes seeded per file and per block, so a misdirected
// write, a block of another file or of another offset never verifies. A
// mismatch fails the read with ErrIO+ErrDataChecksum, is logged with the
// inode, offset and disk block, and counted; the wrong bytes are never
// returned.
//
// # Transactions
//
// The store's volatile state (write buffers, quarantine) follows the arena's
// transactions: a transaction that went through any Store method must end
// with Store.Commit(tx) or Store.Abort(tx) instead of tx.Commit/tx.Abort. On
// Abort, buffers are as before the Tx (data of earlier writes that this Tx
// flushed is buffered again; data of the failed write is gone) and readahead
// caches are invalidated. The core may simply end every Tx through the Store.
// After an error from a Store method the caller aborts the Tx (device errors
// publish nothing and free what the failed flush allocated, but an operation
// may have completed earlier steps in the same Tx).
//
// # Concurrency and lock order
//
// Methods taking a *pram.Tx run under the core's write lock, one at a time.
// ReadAt, DiskBytes, Buffered, Stats run under the core's read lock,
// concurrently. Lock order: core fs.mu → Readahead.mu → Store.mu. Readahead
// goroutines take no lock and never read the arena: the foreground read
// resolves blocks and checksums; cached data is tagged with the file's
// generation, which every published change bumps.
//
// # Using the store from the core
//
//	mkfs:    params[ParamThreshold], params[ParamBlockSize], params[ParamDiskBlocks] =
//	           threshold, bs, BlockCount(dev.Size(), bs)   // pram.Format(..., Features: FeatureDisk)
//	         dev, _ := OpenDevice(path, DeviceOptions{})      // CreateFile(path, size) for a new image
//	         s, _ := Format(tx, heap, dev, bs, opts); s.Commit(tx)
//	mount:   s, _ := Open(heap, dev, opts)                   // after alloc.Open
//	ops:     end every Tx with s.Commit(tx) / s.Abort(tx)
//	to disk: (size crosses ToDisk) seg, _ := s.NewFile(tx, ino); s.WriteThrough(tx, seg, 0, small);
//	         then the write itself; free the arena copy; point the inode at seg — one Tx
//	write:   s.Write(tx, seg, off, data); the core updates size/mtime in the same Tx
//	read:    s.ReadAt(seg, p[:clipped to size], off, ra)  // ra from s.NewReadahead() per handle
//	truncate:s.Truncate(tx, seg, size) on every size change; if ToArena(size): copy out with
//	         ReadAt, s.Destroy(tx, seg), point the inode at the arena copy — one Tx
//	fallocate: s.Allocate(tx, seg, off, n) / s.PunchHole(tx, seg, off, n)
//	fsync:   s.Fsync(tx, seg); s.Commit(tx); s.Persist(seg) and persist the inode
//	release: (last handle) s.Flush(tx, seg); s.Trim(tx, seg, size); ra.Close()
//	unlink:  (last link, not open) s.Destroy(tx, seg)
//	unmount: s.FlushAll(tx); s.Commit(tx); s.Close()
//	stat:    s.DiskBytes(seg) for st_blocks; df: s.Stats()
//	fsck:    k := s.NewChecker(allocChecker, CheckOptions{VerifyData, Progress});
//	         k.File(seg, size) for every large file; k.Finish()
//
// # Limits
//
// Files up to MaxFileSize (1 PiB) of offsets. A list holds at most 4096
// leaves: about a million free extents, about 700,000 segments per file (43
// GiB even if every 64 KiB block of a file were its own segment, far more in
// practice); beyond, allocation fails with ErrNoSpace or ErrFileTooBig.
// Overwrites need free space (copy-on-write): on a full disk they fail with
// ErrNoSpace and change nothing.
package diskstore
