package diskstore

import (
	"errors"
	"fmt"

	"conquest/pram"
)

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
	// ErrSuperBackup: the disk superblock is damaged and the copy of it that
	// block 0 keeps is intact; RestoreSuper writes it back.
	ErrSuperBackup = errors.New("diskstore: its backup copy is intact: `conquest fsck --repair` restores it")
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
	// ErrSpaceHeld (wraps ErrNoSpace): the disk's only free blocks were
	// freed since the arena's last checkpoint and are held until the next
	// one (watchCheckpoints). Returned only while the caller has said it
	// will abort, checkpoint and retry (SetCheckpointRetry).
	ErrSpaceHeld = fmt.Errorf("%w: the free blocks wait for the arena's next checkpoint", ErrNoSpace)
	// ErrFileTooBig: an offset or size beyond MaxFileSize (EFBIG), or a file
	// too fragmented for its segment list.
	ErrFileTooBig = errors.New("diskstore: file offset or size too large")
	// ErrClosed: the store or readahead handle was closed.
	ErrClosed = errors.New("diskstore: store is closed")
)

// The consistency walk (Checker) reports these problems as typed errors, so
// that a repair can act on them without parsing text: callers get them with
// errors.As, and errors.Is still finds the sentinels they wrap. Extension of
// DESIGN.md.

// DataChecksumError is a written block whose data fails its checksum, found
// by Checker.File with CheckOptions.VerifyData. It is ErrDataChecksum and
// ErrIO.
type DataChecksumError struct {
	Inode  uint64 // the file's inode number (its segment list's owner)
	Offset int64  // the byte offset in the file of the block
	Disk   Block  // the disk block holding it
	Err    error  // the read's error (ErrIO and ErrDataChecksum)
}

func (e *DataChecksumError) Error() string { return e.Err.Error() }

// Unwrap returns the read's error.
func (e *DataChecksumError) Unwrap() error { return e.Err }

// LeakedBlocksError is disk blocks that are neither free, quarantined nor
// used by any file the walk reached (Checker.Finish). It is ErrCorrupt. The
// walk reports the first ranges one per error; the ranges past those are
// carried by one last summary error (Summary set), so every leaked range is
// in some LeakedBlocksError.
type LeakedBlocksError struct {
	Ranges []BlockRange // the leaked ranges this error reports, in order
	// Summary: the error stands for the leaks of the whole walk ("N disk
	// blocks leaked in all").
	Summary bool
	Total   uint64 // blocks leaked: in Ranges, or in the whole walk (Summary)
}

func (e *LeakedBlocksError) Error() string {
	if e.Summary || len(e.Ranges) != 1 {
		return fmt.Sprintf("%v: %d disk blocks leaked in all", ErrCorrupt, e.Total)
	}
	return fmt.Sprintf("%v: disk blocks [%d, %d) are neither free nor used by a file (leaked)", ErrCorrupt, e.Ranges[0].Begin, e.Ranges[0].End)
}

// Unwrap returns ErrCorrupt.
func (e *LeakedBlocksError) Unwrap() error { return ErrCorrupt }

// BlockRange is the disk blocks [Begin, End).
type BlockRange struct{ Begin, End Block }

func (r BlockRange) len() uint64 { return uint64(r.End - r.Begin) }

// FileCountError is the stats record's count of large files disagreeing
// with the number of segment lists the walk reached (Checker.Finish). It is
// ErrCorrupt.
type FileCountError struct {
	Counted uint64 // what the stats record says
	Reached uint64 // what the walk found
}

func (e *FileCountError) Error() string {
	return fmt.Sprintf("%v: stats count %d large files, the walk reached %d", ErrCorrupt, e.Counted, e.Reached)
}

// Unwrap returns ErrCorrupt.
func (e *FileCountError) Unwrap() error { return ErrCorrupt }

// BeyondEndError is the ErrCorrupt of a block past the end of a file
// (size bytes) that holds written data (it has a checksum and a disk
// block): the size is wrong, or the data should have been released.
// Callers get it with errors.As.
type BeyondEndError struct {
	Owner uint64 // the inode
	Seg   pram.Off
	Block uint64 // the file block
	Size  int64
}

func (e *BeyondEndError) Error() string {
	return fmt.Sprintf("%v: inode %d: file block %d beyond the end (size %d) holds data", ErrCorrupt, e.Owner, e.Block, e.Size)
}

// Unwrap returns ErrCorrupt.
func (e *BeyondEndError) Unwrap() error { return ErrCorrupt }

// StraySumError is the ErrCorrupt of a checksum recorded for a file block
// that maps no disk block (a hole, or past the last segment): nothing
// reads it, and Store.ClearStraySum zeroes it. Callers get it with
// errors.As.
type StraySumError struct {
	Owner     uint64 // the inode
	Seg       pram.Off
	Block     uint64 // the file block
	BeyondEnd bool   // the block also lies past the file's end
}

func (e *StraySumError) Error() string {
	msg := fmt.Sprintf("%v: inode %d: file block %d has a checksum but no disk block", ErrCorrupt, e.Owner, e.Block)
	if e.BeyondEnd {
		msg += " (and lies beyond the end)"
	}
	return msg
}

// Unwrap returns ErrCorrupt.
func (e *StraySumError) Unwrap() error { return ErrCorrupt }

// BadSumPageError is the ErrCorrupt of a damaged record of a file's
// checksum page (its base, pointer or capacity is impossible): the blocks
// it covers cannot be verified, so reads of them fail. Store.DropSumPage
// removes it, after which they read as zeros. Callers get it with
// errors.As.
type BadSumPageError struct {
	Owner uint64 // the inode
	Seg   pram.Off
	Base  uint64 // the first file block of the page, as recorded
	Page  pram.Off
	Cap   uint64
}

func (e *BadSumPageError) Error() string {
	return fmt.Sprintf("%v: inode %d: checksum page for file block %d at %d, capacity %d", ErrCorrupt, e.Owner, e.Base, e.Page, e.Cap)
}

// Unwrap returns ErrCorrupt.
func (e *BadSumPageError) Unwrap() error { return ErrCorrupt }

// BadUnsyncedError is the ErrCorrupt of an unsynced record (unsynced.go)
// that is not sane, or that names a file block mapping no disk block.
// Store.DropUnsynced removes it. Callers get it with errors.As.
type BadUnsyncedError struct {
	Owner uint64 // the inode
	Seg   pram.Off
	Block uint64 // the file block the record is keyed by
	Err   error  // what is wrong (wraps ErrCorrupt)
}

func (e *BadUnsyncedError) Error() string { return e.Err.Error() }

// Unwrap returns what is wrong, which wraps ErrCorrupt.
func (e *BadUnsyncedError) Unwrap() error { return e.Err }

// SegMagicError is the ErrCorrupt of a segment list whose magic is wrong
// (everything else in it may be intact). Store.RestoreMagic repairs it when
// the list still names its file. Callers get it with errors.As.
type SegMagicError struct {
	Seg   pram.Off
	Magic uint64
}

func (e *SegMagicError) Error() string {
	return fmt.Sprintf("%v: segment list %d: bad magic %#x", ErrCorrupt, e.Seg, e.Magic)
}

// Unwrap returns ErrCorrupt.
func (e *SegMagicError) Unwrap() error { return ErrCorrupt }

// The lists of a large file's segment list, for FileListError.List.
const (
	FileSegments = "segments"
	FileSums     = "checksum pages"
	FileUnsynced = "unsynced blocks"
)

// FileListError is damage to the structure of one of a large file's lists
// (its segments, its checksum pages or its unsynced records): the walk
// cannot read the list, so it does not account for the file's blocks.
// Store.ResetUnsynced empties a damaged unsynced list (it only guides
// recovery); Store.ResetSums and Store.ResetSegments empty the others,
// which loses the file's data (it reads as zeros). Callers get it with
// errors.As.
type FileListError struct {
	Owner uint64 // the inode
	Seg   pram.Off
	List  string // FileSegments, FileSums or FileUnsynced
	Err   error  // what is wrong (wraps ErrCorrupt)
}

func (e *FileListError) Error() string { return e.Err.Error() }

// Unwrap returns what is wrong, which wraps ErrCorrupt.
func (e *FileListError) Unwrap() error { return e.Err }

// SumDamageError is a written block whose data fails its checksum where
// the checksum the arena records differs from the data's in at most
// maxSumDamageBytes of its 8 bytes: the record is damaged, not the data.
// (Damaged data hashes to an unrelated value, which agrees with the record
// in 6 or more bytes with a probability below 2^-40.) Found by
// Checker.File with CheckOptions.VerifyData; Store.RewriteSum repairs it.
// It is ErrCorrupt, not ErrDataChecksum: the data is sound. Callers get it
// with errors.As.
type SumDamageError struct {
	Owner  uint64 // the inode
	Seg    pram.Off
	Block  uint64 // the file block
	Disk   Block
	Stored uint64 // the checksum the arena records
	Data   uint64 // the checksum of the data on disk
}

func (e *SumDamageError) Error() string {
	return fmt.Sprintf("%v: inode %d, file block %d (disk block %d): the recorded checksum %#016x differs from its data's %#016x in %d byte(s): the record is damaged, not the data",
		ErrCorrupt, e.Owner, e.Block, e.Disk, e.Stored, e.Data, sumBytesDiffer(e.Stored, e.Data))
}

// Unwrap returns ErrCorrupt.
func (e *SumDamageError) Unwrap() error { return ErrCorrupt }

// maxSumDamageBytes bounds the bytes in which a damaged checksum record
// may differ from its data's for SumDamageError.
const maxSumDamageBytes = 2

// sumBytesDiffer counts the bytes in which a and b differ.
func sumBytesDiffer(a, b uint64) int {
	n := 0
	for x := a ^ b; x != 0; x >>= 8 {
		if x&0xff != 0 {
			n++
		}
	}
	return n
}

// sumDamaged reports whether stored, the recorded checksum of a block
// whose data sums to data, looks like a damaged copy of data.
func sumDamaged(stored, data uint64) bool {
	d := sumBytesDiffer(stored, data)
	return stored != 0 && data != 0 && d > 0 && d <= maxSumDamageBytes
}

// SegBlocksError is a segment list whose count of blocks disagrees with
// the blocks its segments map (which the walk checked). The count follows
// from the segments: Store.SetSegBlocks repairs it. Callers get it with
// errors.As.
type SegBlocksError struct {
	Owner           uint64 // the inode
	Seg             pram.Off
	Counted, Mapped uint64
}

func (e *SegBlocksError) Error() string {
	return fmt.Sprintf("%v: inode %d: segment list counts %d blocks, segments map %d", ErrCorrupt, e.Owner, e.Counted, e.Mapped)
}

// Unwrap returns ErrCorrupt.
func (e *SegBlocksError) Unwrap() error { return ErrCorrupt }

// MissingRecordError: Open found no free map (root slot 5) or no stats
// record (root slot 6) where the root slot points, nor, for fsck, one
// place in the heap that holds it (its magic and the fields the disk
// superblock gives). It is ErrCorrupt. A missing free map holds nothing of
// its own (every list in it follows from the files): NewFreeMap lays an
// empty one for `conquest fsck --repair`, whose walk then frees the blocks
// no file uses.
type MissingRecordError struct {
	Slot int      // RootFreeMap or RootStats
	What string   // "free map", "stats record"
	Off  pram.Off // what the root slot holds
}

func (e *MissingRecordError) Error() string {
	return fmt.Sprintf("%v: no %s at root slot %d (%d)", ErrCorrupt, e.What, e.Slot, e.Off)
}

// Unwrap returns ErrCorrupt.
func (e *MissingRecordError) Unwrap() error { return ErrCorrupt }
