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
//     orphan list, inode count; see docs/DESIGN.md).
//   - Inode records: 256-byte allocations, Ino = offset >> 8, except the root
//     (RootIno = 1). Layout and pinned offsets in inode.go.
//   - File data (file_mem.go, the one seam for regular-file bytes): a small
//     block for files up to 2 KiB, else a single-level index of 4 KiB
//     blocks with holes. diskstore will add large files behind it.
//   - Directory semantics over dirhash (dir.go, namei.go, rename.go),
//     symlinks (symlink.go), xattr blobs (xattr.go), the orphan list
//     (orphan.go) and Check (check.go, `conquest fsck`).
//
// # Lock order
//
//  1. FS.mu (sync.RWMutex). Mutations, including writes of file data and the
//     atime update after a read, hold it exclusively; Lookup, GetAttr, Read,
//     ReadDir, Readlink, xattr reads, StatFS, Usage and Check hold it shared.
//     A read that finds atime due releases the shared lock and then takes the
//     exclusive one (never upgrades in place).
//  2. The pram transaction mutex (Arena.Begin), only under FS.mu held
//     exclusively, so it is never contended.
//  3. FS.vol.mu (volatile state: kernel references, open counts, handles),
//     taken alone or under FS.mu, never held while taking FS.mu or running
//     a callback. Forget and Release update it first and only then, if an
//     unlinked inode became unused, take FS.mu exclusively and recheck.
//
// ReadDir calls its callback with FS.mu held shared: the callback must not
// call back into the FS (a queued writer would deadlock it).
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
// File data is not journaled: bytes are copied into blocks unlogged, so a
// write interrupted by a crash may be partly applied (as POSIX allows), but
// the size and block map only change with the Tx. Data blocks are allocated
// before any byte is copied, so a write failing with ErrNoSpace changes
// nothing. A multi-chunk write (> 1 MiB) commits per chunk.
//
// Stores reach the page cache in program order; that survives a process
// crash. Fsync and FsyncDir msync the arena so that they also survive power
// loss on a disk-backed arena.
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
