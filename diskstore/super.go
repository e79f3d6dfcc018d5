package diskstore

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"time"

	farm "github.com/dgryski/go-farm"

	"conquest/pram"
)

// The disk holds a superblock in block 0 and large-file data in blocks 1..n-1,
// nothing else: the free map and every file's segment list live in the arena.
// Superblock layout (little endian, first SuperSize bytes of block 0):
const (
	DiskMagic          = "CONQDISK"
	DiskVersion uint32 = 1

	superOffMagic     = 0  // [8]byte
	superOffVersion   = 8  // uint32
	superOffBlockSize = 12 // uint32
	superOffUUID      = 16 // [16]byte: the arena's UUID
	superOffBlocks    = 32 // uint64: blocks on the disk, block 0 included
	superOffCreated   = 40 // int64: unix ns at format
	superOffChecksum  = 48 // uint64: farm.Hash64 of [0, 48)
	// SuperSize is the length of the encoded superblock.
	SuperSize = 56
	// superIO is how much of block 0 is read and written (aligned for O_DIRECT).
	superIO = 4096
	// superBackup is where block 0 keeps a copy of the superblock (see
	// RestoreSuper).
	superBackup = 2048
)

// Block sizes. The block is the unit of allocation, of checksumming and of
// holes; see doc.go for why 16 KiB is the default.
const (
	MinBlockSize     = 4096
	MaxBlockSize     = 1 << 20
	DefaultBlockSize = 16 << 10
	// MinBlocks is the smallest disk FormatDisk accepts: the superblock and
	// one data block.
	MinBlocks = 2
)

// Super is the decoded disk superblock.
type Super struct {
	Version   uint32
	BlockSize uint32
	UUID      [16]byte
	Blocks    uint64 // total, including block 0 (the superblock)
	CreatedNs int64
}

// DataBlocks is the number of blocks available for file data.
func (s Super) DataBlocks() uint64 { return s.Blocks - 1 }

// ValidBlockSize reports whether bs is a power of two in [MinBlockSize,
// MaxBlockSize].
func ValidBlockSize(bs uint64) bool {
	return bs >= MinBlockSize && bs <= MaxBlockSize && bs&(bs-1) == 0
}

// BlockCount is the number of blocks of size blockSize a device of devSize
// bytes holds, block 0 (the superblock) included. mkfs stores it in arena
// parameter ParamDiskBlocks.
func BlockCount(devSize int64, blockSize uint32) uint64 {
	if devSize <= 0 || blockSize == 0 {
		return 0
	}
	return uint64(devSize) / uint64(blockSize)
}

func encodeDiskSuper(s Super) []byte {
	page := AlignedBuffer(superIO)
	le := binary.LittleEndian
	copy(page[superOffMagic:], DiskMagic)
	le.PutUint32(page[superOffVersion:], s.Version)
	le.PutUint32(page[superOffBlockSize:], s.BlockSize)
	copy(page[superOffUUID:], s.UUID[:])
	le.PutUint64(page[superOffBlocks:], s.Blocks)
	le.PutUint64(page[superOffCreated:], uint64(s.CreatedNs))
	le.PutUint64(page[superOffChecksum:], farm.Hash64(page[:superOffChecksum]))
	copy(page[superBackup:superBackup+SuperSize], page[:SuperSize])
	return page
}

// The superblock never changes after FormatDisk, so block 0 also keeps a
// copy of it at superBackup (written by FormatDisk, and by Open on disks made
// before the copy existed). When the superblock fails validation and the
// copy passes, DecodeSuper says so (ErrSuperBackup) and RestoreSuper, run by
// `conquest fsck --repair`, writes the copy back. The copy holds the UUID,
// so the check that disk and arena belong together is kept.

// DecodeSuper parses and validates an encoded disk superblock against the
// size of the device it came from (0 skips that check). Errors wrap
// ErrNotConquestDisk, ErrVersion, ErrChecksum or ErrGeometry, and also
// ErrSuperBackup when the copy of page (at least superIO bytes) is sound.
func DecodeSuper(page []byte, devSize int64) (Super, error) {
	s, err := decodeSuper(page, devSize)
	if err != nil && len(page) >= superIO {
		if _, berr := decodeSuper(page[superBackup:], devSize); berr == nil {
			return s, fmt.Errorf("%w; %w", err, ErrSuperBackup)
		}
	}
	return s, err
}

// hasBackup reports whether page (superIO bytes, its superblock sound)
// holds an identical copy of it.
func hasBackup(page []byte) bool {
	return bytes.Equal(page[superBackup:superBackup+SuperSize], page[:SuperSize])
}

// RestoreSuper writes the copy of the superblock block 0 keeps back over the
// superblock, for `conquest fsck --repair` when DecodeSuper reports
// ErrSuperBackup, and syncs the device. It reports whether it wrote
// anything: false, nil when the superblock is sound.
func RestoreSuper(dev Device) (bool, error) {
	page, err := readSuperPage(dev)
	if err != nil {
		return false, err
	}
	if _, err := decodeSuper(page, dev.Size()); err == nil {
		return false, nil
	}
	if _, err := decodeSuper(page[superBackup:], dev.Size()); err != nil {
		return false, fmt.Errorf("%w: the disk superblock and its backup copy are both damaged (%v)", ErrCorrupt, err)
	}
	copy(page[:SuperSize], page[superBackup:superBackup+SuperSize])
	if _, err := dev.WriteAt(page, 0); err != nil {
		return false, fmt.Errorf("%w: restoring the disk superblock: %w", ErrIO, err)
	}
	if err := dev.Sync(); err != nil {
		return false, fmt.Errorf("%w: syncing the disk superblock: %w", ErrIO, err)
	}
	return true, nil
}

func decodeSuper(page []byte, devSize int64) (Super, error) {
	var s Super
	if len(page) < SuperSize {
		return s, fmt.Errorf("%w: only %d bytes", ErrNotConquestDisk, len(page))
	}
	if !bytes.Equal(page[superOffMagic:superOffMagic+8], []byte(DiskMagic)) {
		return s, ErrNotConquestDisk
	}
	le := binary.LittleEndian
	s.Version = le.Uint32(page[superOffVersion:])
	sum, want := le.Uint64(page[superOffChecksum:]), farm.Hash64(page[:superOffChecksum])
	if s.Version != DiskVersion {
		// As the arena's superblock (pram.PlausibleVersion): a version
		// that fails the checksum and could not be a later format's is
		// damage.
		if sum != want && !pram.PlausibleVersion(s.Version, DiskVersion) {
			return s, fmt.Errorf("%w: the version field reads %d and the checksum fails (stored %#x, computed %#x): the superblock is damaged", ErrChecksum, s.Version, sum, want)
		}
		return s, fmt.Errorf("%w: found version %d, this build reads %d", ErrVersion, s.Version, DiskVersion)
	}
	if sum != want {
		return s, fmt.Errorf("%w: stored %#x, computed %#x", ErrChecksum, sum, want)
	}
	s.BlockSize = le.Uint32(page[superOffBlockSize:])
	copy(s.UUID[:], page[superOffUUID:])
	s.Blocks = le.Uint64(page[superOffBlocks:])
	s.CreatedNs = int64(le.Uint64(page[superOffCreated:]))
	if !ValidBlockSize(uint64(s.BlockSize)) {
		return s, fmt.Errorf("%w: block size %d", ErrGeometry, s.BlockSize)
	}
	if s.Blocks < MinBlocks || s.Blocks > 1<<48 {
		return s, fmt.Errorf("%w: %d blocks", ErrGeometry, s.Blocks)
	}
	if devSize != 0 && s.Blocks > BlockCount(devSize, s.BlockSize) {
		return s, &ShortDeviceError{Blocks: s.Blocks, BlockSize: uint64(s.BlockSize), Size: uint64(devSize)}
	}
	return s, nil
}

// ShortDeviceError is a disk smaller than its superblock says (an image
// file cut short, say). It is ErrGeometry. `conquest fsck --repair` grows
// an image file back to its size; the lost part reads as zeros, and data
// that was there fails its checksums.
type ShortDeviceError struct {
	Blocks, BlockSize uint64 // the superblock's
	Size              uint64 // the device's, in bytes
}

func (e *ShortDeviceError) Error() string {
	return fmt.Sprintf("%v: superblock says %d blocks of %d bytes, device has %d bytes", ErrGeometry, e.Blocks, e.BlockSize, e.Size)
}

// Unwrap returns ErrGeometry.
func (e *ShortDeviceError) Unwrap() error { return ErrGeometry }

// FormatDisk writes a fresh superblock for the file system with the given
// UUID over the whole device and syncs it. Nothing else on the disk is
// touched: data blocks are free space, and the store never reads a block
// that no checksum vouches for.
func FormatDisk(dev Device, uuid [16]byte, blockSize uint32) (Super, error) {
	if !ValidBlockSize(uint64(blockSize)) {
		return Super{}, fmt.Errorf("%w: block size %d is not a power of two in [%d, %d]",
			ErrGeometry, blockSize, MinBlockSize, MaxBlockSize)
	}
	n := BlockCount(dev.Size(), blockSize)
	if n < MinBlocks {
		return Super{}, fmt.Errorf("%w: device of %d bytes holds %d blocks of %d, need %d",
			ErrGeometry, dev.Size(), n, blockSize, MinBlocks)
	}
	s := Super{Version: DiskVersion, BlockSize: blockSize, UUID: uuid, Blocks: n, CreatedNs: time.Now().UnixNano()}
	if _, err := dev.WriteAt(encodeDiskSuper(s), 0); err != nil {
		return Super{}, fmt.Errorf("%w: writing disk superblock: %w", ErrIO, err)
	}
	if err := dev.Sync(); err != nil {
		return Super{}, fmt.Errorf("%w: syncing disk superblock: %w", ErrIO, err)
	}
	return s, nil
}

// ReadSuper reads and validates the device's superblock.
func ReadSuper(dev Device) (Super, error) {
	page, err := readSuperPage(dev)
	if err != nil {
		return Super{}, err
	}
	return DecodeSuper(page, dev.Size())
}

// readSuperPage reads the first superIO bytes of the device.
func readSuperPage(dev Device) ([]byte, error) {
	if dev.Size() < superIO {
		return nil, fmt.Errorf("%w: device of %d bytes", ErrNotConquestDisk, dev.Size())
	}
	page := AlignedBuffer(superIO)
	if _, err := dev.ReadAt(page, 0); err != nil {
		return nil, fmt.Errorf("%w: reading disk superblock: %w", ErrIO, err)
	}
	return page, nil
}

// writeBackup gives a disk made before block 0 kept a copy of its
// superblock (or whose copy is damaged) the copy, and syncs it.
func writeBackup(dev Device) error {
	page, err := readSuperPage(dev)
	if err != nil {
		return err
	}
	if _, err := decodeSuper(page, dev.Size()); err != nil || hasBackup(page) {
		return err
	}
	copy(page[superBackup:superBackup+SuperSize], page[:SuperSize])
	if _, err := dev.WriteAt(page, 0); err != nil {
		return fmt.Errorf("%w: writing the disk superblock's copy: %w", ErrIO, err)
	}
	if err := dev.Sync(); err != nil {
		return fmt.Errorf("%w: syncing the disk superblock's copy: %w", ErrIO, err)
	}
	return nil
}
