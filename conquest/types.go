package conquest

import (
	"time"

	"conquest/diskstore"
	"conquest/pram"
)

// Ino is an inode number as the kernel sees it (the FUSE node id). The root
// directory is RootIno; every other inode's number is its arena offset >> 8.
type Ino uint64

// RootIno is the root directory's inode number (the FUSE root node id).
const RootIno Ino = 1

// Handle identifies an open file or directory. 0 is never handed out.
type Handle uint64

// Timespec is a time with nanosecond resolution (Unix seconds + nanoseconds).
type Timespec struct {
	Sec  int64
	Nsec uint32
}

// Attr is the stat(2) view of an inode.
type Attr struct {
	Ino                         Ino
	Gen                         uint64 // generation: changes when an inode number is reused
	Mode                        uint32 // S_IFMT | 07777
	Nlink                       uint32
	Uid, Gid, Rdev              uint32
	Size                        uint64
	Blocks                      uint64 // 512-byte units actually allocated
	Blksize                     uint32
	Atime, Mtime, Ctime, Crtime Timespec
}

// Cred is the caller of an operation, as the kernel reports it.
type Cred struct {
	Uid, Gid uint32
	Pid      uint32
	// InGroup, if set, reports whether the caller is in group gid other
	// than through Gid (a supplementary group), or holds CAP_FSETID: the
	// kernel's in_group_or_capable, which decides whether a file created
	// in a setgid directory keeps a requested S_ISGID. It is called only
	// then, with fs.mu held. nil: only Gid (and uid 0) count.
	InGroup func(gid uint32) bool
}

// inGroupOrCapable reports whether c may keep S_ISGID on a file of group
// gid it creates (inode_init_owner's test).
func (c Cred) inGroupOrCapable(gid uint32) bool {
	return c.Uid == 0 || c.Gid == gid || c.InGroup != nil && c.InGroup(gid)
}

// SetAttr is a setattr request; Valid says which fields to apply.
type SetAttr struct {
	Valid               uint32 // Set* bits
	Mode, Uid, Gid      uint32
	Size                uint64
	Atime, Mtime, Ctime Timespec
	Handle              uint64 // the open file for ftruncate, or 0
}

// SetAttr.Valid bits.
const (
	SetMode        uint32 = 1 << iota // chmod: Mode's 07777 bits
	SetUID                            // chown: Uid
	SetGID                            // chown: Gid
	SetSize                           // truncate: Size
	SetAtime                          // Atime
	SetMtime                          // Mtime
	SetAtimeNow                       // atime = now (with or without SetAtime)
	SetMtimeNow                       // mtime = now
	SetCtime                          // Ctime (otherwise ctime = now on any change)
	SetKillSUIDGID                    // clear S_ISUID, and S_ISGID if group-exec is set
	SetTouch                          // ctime = now even if nothing else changes (chown(-1, -1), as ext4)
	SetKeepTimes                      // a regular file's mtime and ctime change only as given (see SetAttr)
)

// Rename flags (the values of renameat2(2)).
const (
	RenameNoReplace uint32 = 1 << 0 // RENAME_NOREPLACE: EEXIST if the target exists
	RenameExchange  uint32 = 1 << 1 // RENAME_EXCHANGE: swap the two names atomically
	RenameWhiteout  uint32 = 1 << 2 // RENAME_WHITEOUT: leave a whiteout at the old name (RenameWhiteout method)
)

// SetXattr flags (the values of setxattr(2)).
const (
	XattrCreate  uint32 = 1 // XATTR_CREATE: fail with EEXIST if the name exists
	XattrReplace uint32 = 2 // XATTR_REPLACE: fail with ENODATA if it does not
)

// Fallocate modes (the values of fallocate(2)).
const (
	FallocKeepSize  uint32 = 0x01 // FALLOC_FL_KEEP_SIZE
	FallocPunchHole uint32 = 0x02 // FALLOC_FL_PUNCH_HOLE (requires KEEP_SIZE)
	FallocZeroRange uint32 = 0x10 // FALLOC_FL_ZERO_RANGE
)

// File type and permission bits of Attr.Mode (the values of stat(2)).
const (
	S_IFMT   uint32 = 0o170000
	S_IFSOCK uint32 = 0o140000
	S_IFLNK  uint32 = 0o120000
	S_IFREG  uint32 = 0o100000
	S_IFBLK  uint32 = 0o060000
	S_IFDIR  uint32 = 0o040000
	S_IFCHR  uint32 = 0o020000
	S_IFIFO  uint32 = 0o010000
	S_ISUID  uint32 = 0o4000
	S_ISGID  uint32 = 0o2000
	S_ISVTX  uint32 = 0o1000
)

// Directory entry types (DT_* of dirent(5)), as ReadDir reports them.
const (
	DT_UNKNOWN uint8 = 0
	DT_FIFO    uint8 = 1
	DT_CHR     uint8 = 2
	DT_DIR     uint8 = 4
	DT_BLK     uint8 = 6
	DT_REG     uint8 = 8
	DT_LNK     uint8 = 10
	DT_SOCK    uint8 = 12
)

// Open flags the core looks at (the values of open(2) on Linux).
const (
	O_ACCMODE uint32 = 0o3
	O_WRONLY  uint32 = 0o1
	O_RDWR    uint32 = 0o2
	O_CREAT   uint32 = 0o100
	O_EXCL    uint32 = 0o200
	O_TRUNC   uint32 = 0o1000
	O_APPEND  uint32 = 0o2000
	O_NOATIME uint32 = 0o1000000 // reads through the handle leave atime alone
)

// Limits.
const (
	MaxName       = 255       // bytes in one name
	MaxSymlink    = 4095      // bytes in a symlink target
	MaxLinks      = 65000     // hard links per inode (EMLINK beyond), as ext4; see maxDirNlink
	MaxXattrName  = 255       // bytes in an xattr name including its namespace prefix
	MaxXattrValue = 64 << 10  // bytes in one xattr value (E2BIG beyond)
	MaxXattrTotal = 128 << 10 // bytes of all xattrs of one inode, encoded (ENOSPC beyond)
	MaxXattrList  = 64 << 10  // bytes of the NUL-separated name list (ENOSPC beyond)
	BlockSize     = 4096      // file data block and statfs block size
)

// maxDirNlink bounds a directory's link count (2 + its subdirectories). A
// directory may hold more than MaxLinks subdirectories, as on ext4 (its
// dir_nlink feature) and tmpfs; past MaxLinks its st_nlink reads 1, which
// tells programs such as find not to count on it (Attr). The core keeps the
// true count, which the check verifies. The bound only keeps the u32 count
// from wrapping (the arena runs out long before).
const maxDirNlink = 1<<32 - 2

// StatFS is the statfs(2) view of the file system.
type StatFS struct {
	Blocks, Bfree, Bavail, Files, Ffree uint64
	Bsize, Frsize, Namelen              uint32
}

// Usage is arena and disk usage and file counts for `conquest df`/`stat`.
// Space is what the arena and the disk hold, from the allocators' counters
// (no walk of the tree): what a mounted `conquest df` shows.
type Space struct {
	ArenaBytes uint64 // size of the arena
	HeapBytes  uint64 // bytes the allocator manages
	HeapUsed   uint64 // capacity of live allocations
	HeapFree   uint64 // bytes free in the heap for any use (the reserve for frees not counted, as in statfs's f_bavail)
	Inodes     uint64 // inodes in use
	DiskBytes  uint64 // bytes of the disk's data blocks (0 without a disk)
	DiskUsed   uint64 // bytes of disk blocks held by large files
	DiskFree   uint64 // bytes of free disk blocks
	DiskAvail  uint64 // DiskFree less the disk's overwrite reserve (statfs's f_bavail): what files may grow into
}

type Usage struct {
	ArenaBytes    uint64 // size of the arena
	HeapBytes     uint64 // bytes the allocator manages
	HeapUsed      uint64 // capacity of live allocations
	HeapFree      uint64 // as Space.HeapFree
	HeapObjects   uint64 // live allocations
	Inodes        uint64 // inodes in use (root slot 4)
	Files         uint64 // regular files
	Dirs          uint64 // directories
	Symlinks      uint64
	Specials      uint64 // FIFOs, sockets, devices
	Orphans       uint64 // unlinked inodes still open (or awaiting cleanup)
	FileBytes     uint64 // sum of regular file sizes
	FileAllocated uint64 // bytes of arena data blocks held by regular files (disk blocks: DiskUsed)
	DiskBytes     uint64 // bytes of the disk's data blocks (0 without a disk)
	DiskUsed      uint64 // bytes of disk blocks held by large files (data and preallocation)

	// The large-file path (all zero without a disk).
	LargeFileThreshold uint64 // files above it move to disk (mkfs --large-threshold)
	SmallFiles         uint64 // regular files whose data is in the arena
	SmallFileBytes     uint64 // sum of their sizes
	LargeFiles         uint64 // regular files whose data is on disk
	LargeFileBytes     uint64 // sum of their sizes
	DiskBlockSize      uint64
	DiskFree           uint64 // bytes of free disk blocks
	DiskAvail          uint64 // as Space.DiskAvail
	DiskFreeExtents    uint64 // fragmentation of the free disk space
	DiskBuffered       uint64 // bytes written but not yet on disk (diskstore.GatherInMemory)
	DiskUnsynced       uint64 // bytes written to the disk since its last sync (a power failure may lose them)
	DiskQuarantined    uint64 // old copies of blocks rewritten since the last sync (used until it)
	DiskChecksumErrors uint64 // data checksum mismatches seen since mkfs
	DiskIOErrors       uint64 // device errors seen since mkfs
}

// CheckOptions tunes CheckWith.
type CheckOptions struct {
	// VerifyData reads every written disk block and verifies its checksum
	// (Check sets it). Without it only the metadata is walked.
	VerifyData bool
	// Progress, if set, is called as disk blocks are accounted for, with the
	// number done and the total (used blocks). It runs with the file
	// system's shared lock held: it must not call back into the FS.
	Progress func(done, total uint64)
	// VerifiedBlocks, if set, receives the number of written disk blocks
	// whose data verified against their checksums (VerifyData).
	VerifiedBlocks *uint64
	// crashed: the arena was just recovered from a crash and its orphans
	// are not freed yet (Open's check after a system crash, which runs
	// before that): unlinked files that were open at the crash and
	// truncates in progress are expected on the orphan list.
	crashed bool
}

// MkfsOptions tunes Mkfs.
type MkfsOptions struct {
	PramSize   uint64 // bytes of the arena (required for a new image file)
	JournalLen uint64 // 0: pram's default
	RootMode   uint32 // permission bits of the root directory; 0 means 0755
	RootUid    uint32
	RootGid    uint32
	// LargeFileThreshold is the size above which a file's data moves to
	// the disk (pram Params[0]); 0 picks diskstore.DefaultThreshold (1 MiB).
	// It must lie in [MinLargeFileThreshold, MaxLargeFileThreshold].
	LargeFileThreshold uint64
	// DiskSize is the size in bytes of a new disk image file: Mkfs creates
	// (or resizes) a regular file at diskPath to it; of a block device, Mkfs
	// uses that much from its start (no more than it holds). 0 keeps the
	// size of an existing file or device.
	DiskSize uint64
	// DiskBlockSize is the disk block size (the unit of allocation and
	// checksums): a power of two in [4 KiB, 1 MiB]; 0 picks
	// diskstore.DefaultBlockSize (16 KiB).
	DiskBlockSize uint32
	// Device, if set, is used as the disk instead of opening diskPath (tests
	// pass in-memory, fault-injecting or crashable devices). Mkfs leaves it
	// open; the caller owns it.
	Device diskstore.Device
}

// Limits of MkfsOptions.LargeFileThreshold. Below the minimum every file
// would live on disk in whole disk blocks; above the maximum a move to disk
// copies more than one transaction should carry.
const (
	MinLargeFileThreshold = 4 << 10
	MaxLargeFileThreshold = 64 << 20
)

// Options tunes Open.
type Options struct {
	// Logf receives recovery and cleanup messages; nil discards them.
	Logf func(format string, args ...any)
	// SkipDamagedOrphans opens the file system for fsck --repair when its
	// orphan list is damaged (ErrOrphanList): the orphans are left for
	// Repair, which cuts the list where it breaks, instead of failing Open.
	SkipDamagedOrphans bool
	// Now is the clock for timestamps; nil means time.Now. Tests set it.
	Now func() Timespec
	// NoAtime disables atime updates on read and readdir (relatime otherwise).
	NoAtime bool
	// Device, if set, is used as the disk instead of opening diskPath (tests,
	// tools). Close closes it.
	Device diskstore.Device
	// Disk tunes the large-file store (write buffers, readahead window,
	// extent size); zero values pick diskstore's defaults. Its Logf is
	// replaced by Logf.
	Disk diskstore.Options
	// OnCrashCheck, if set, makes Open walk the whole file system when its
	// arena was open when the system went down (pram.Arena.CheckDue: a
	// power loss or a kernel crash) or an operation met damage while it
	// was last mounted (MarkDamaged), before anything is changed (orphans
	// are freed after it), and refuse it with a *CrashDamageError if the
	// walk finds problems; a consistent one is marked checked. It is
	// called with a message as the walk begins (the mount reports it).
	// fsck leaves it nil: it must open damaged file systems to repair them.
	OnCrashCheck func(msg string)
	// DiskCommit is how often the large-file disk's blocks written since
	// its last sync are synced in the background (and what that sync made
	// stale freed), as an ext4 journal commit writes ordered data: a
	// writer that never calls fsync then risks to a power loss what it
	// wrote in about the last interval plus the time the disk takes to
	// sync, however long the file system stays idle after it. 0 or less:
	// never (only SyncBytes and fsync sync the disk). The mount sets it to
	// its --commit interval; tests that count journaled stores leave it 0.
	DiskCommit time.Duration
	// Arena tunes how the arena is opened (its RAM copy and checkpoints,
	// pram/shadow.go); its Logf, when nil, is Logf.
	Arena pram.OpenOptions
	// ReadOnly opens the file system without ever writing its images
	// (readonly.go): for images that cannot be written. Only a file system
	// unmounted cleanly opens so; every change fails with ErrReadOnly.
	ReadOnly bool
}
