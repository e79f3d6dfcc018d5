package diskstore

import "errors"

// Sentinel errors. Callers test them with errors.Is; returned errors wrap them
// with the file, offset, block or path involved. The core maps them to errno:
// ErrIO (and ErrDataChecksum, which wraps it) to EIO, ErrNoSpace to ENOSPC,
// ErrFileTooBig to EFBIG, everything else to EIO.
var (
	// ErrNotConquestDisk: the device does not start with the disk magic. It is
	// empty, another file system, or random bytes.
	ErrNotConquestDisk = errors.New("diskstore: not a Conquest disk (bad magic)")
	// ErrVersion: the disk superblock's format version is one this build
	// cannot read.
	ErrVersion = errors.New("diskstore: unsupported disk format version")
	// ErrChecksum: the disk superblock's checksum does not match its contents.
	ErrChecksum = errors.New("diskstore: disk superblock checksum mismatch")
	// ErrUUIDMismatch: the disk belongs to another arena (its superblock
	// records another file system's UUID).
	ErrUUIDMismatch = errors.New("diskstore: disk belongs to another file system (UUID mismatch)")
	// ErrGeometry: block size or block count of the disk and the arena's
	// parameters disagree, or a requested geometry is invalid (block size not
	// a power of two in [MinBlockSize, MaxBlockSize], device too small).
	ErrGeometry = errors.New("diskstore: disk geometry mismatch or invalid")
	// ErrCorrupt: a diskstore structure in the arena (free map, segment list,
	// checksum pages) is damaged: an offset out of range, a count beyond its
	// capacity, records out of order, a block freed twice.
	ErrCorrupt = errors.New("diskstore: arena metadata is corrupt")
	// ErrIO: the device returned an error, a short read or a short write. The
	// operation failed; the store's metadata is unchanged by it (the caller
	// aborts the transaction) and the store stays usable.
	ErrIO = errors.New("diskstore: disk I/O error")
	// ErrDataChecksum: data read from the disk does not match the checksum
	// kept in the arena. Errors carrying it also wrap ErrIO (EIO) and name the
	// file, offset and disk block; wrong bytes are never returned.
	ErrDataChecksum = errors.New("diskstore: data checksum mismatch")
	// ErrNoSpace: the disk has no free block left (ENOSPC), or its free map is
	// too fragmented to record another extent.
	ErrNoSpace = errors.New("diskstore: no space left on disk")
	// ErrFileTooBig: an offset or size beyond MaxFileSize (EFBIG), or a file
	// too fragmented for its segment list.
	ErrFileTooBig = errors.New("diskstore: file offset or size too large")
	// ErrClosed: the store or readahead handle was closed.
	ErrClosed = errors.New("diskstore: store is closed")
)
