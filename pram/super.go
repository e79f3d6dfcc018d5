package pram

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	farm "github.com/dgryski/go-farm"
)

// Superblock layout (page 0). The static part [0, superStaticLen) is written
// once by Format and covered by the checksum. The dynamic part (state, mount
// counter, root slots) changes while mounted and is protected by the journal,
// not the checksum; the consistency walk of the layers above checks it.
const (
	Magic          = "CONQPRAM"
	Version uint32 = 1

	offMagic      = 0    // [8]byte
	offVersion    = 8    // uint32
	offFeatures   = 12   // uint32
	offUUID       = 16   // [16]byte
	offSize       = 32   // uint64: arena bytes
	offJournal    = 40   // uint64: journal offset
	offJournalLen = 48   // uint64: journal length
	offHeap       = 56   // uint64: first heap byte
	offCreated    = 64   // int64: unix ns at format
	offParams     = 72   // [NumParams]uint64: static parameters of upper layers
	NumParams     = 8    //
	offChecksum   = 136  // uint64: farm.Hash64 of [0, offChecksum)
	superStatic   = 144  // length of the static part including checksum
	offBackup     = 2048 // a copy of the static part (see RestoreSuper)

	offState      = 512 // uint64: StateClean or StateDirty
	offMounts     = 520 // uint64: mount counter
	offBoot       = 528 // [16]byte: boot ID of the kernel that last opened the arena (zeros: unknown)
	offCheckDue   = 544 // uint64: non-zero when a full consistency check is due (boot.go)
	offCkptSeq    = 552 // uint64: sequence number of the checkpoint this image holds (checkpoint.go)
	offLoadEnd    = 560 // uint64: how much of a block device's arena a load reads (shadow.go; 0: all of it)
	offLoadCheck  = 568 // uint64: loadCheck of offLoadEnd (a damaged load end is ignored, not trusted)
	offRoots      = 576 // [NumRoots]uint64
	NumRoots      = 32
	superDynEnd   = offRoots + 8*NumRoots
	journalHeader = 64 // bytes of journal header before the entries

	// MinSize is the smallest arena Format accepts.
	MinSize = 1 << 20
)

// Arena state values kept in the superblock.
const (
	StateClean uint64 = 1 // closed by Close
	StateDirty uint64 = 2 // open, or the process died while it was open
)

// Feature flags (the superblock's feature word). Unknown bits are refused.
const (
	FeatureDisk   uint32 = 1 << 0 // a large-file disk is paired with this arena
	knownFeatures        = FeatureDisk
)

// Geometry is the static description of an arena, fixed at Format time.
type Geometry struct {
	UUID       [16]byte
	Size       uint64
	JournalOff Off
	JournalLen uint64
	HeapOff    Off
	Features   uint32
	CreatedNs  int64
	Params     [NumParams]uint64
}

// HeapEnd is the first byte past the heap.
func (g Geometry) HeapEnd() Off { return Off(g.Size) }

// UUIDString formats the UUID in the usual 8-4-4-4-12 form.
func (g Geometry) UUIDString() string { return FormatUUID(g.UUID) }

// FormatUUID formats a 16-byte UUID in the usual 8-4-4-4-12 form.
func FormatUUID(u [16]byte) string {
	return fmt.Sprintf("%x-%x-%x-%x-%x", u[0:4], u[4:6], u[6:8], u[8:10], u[10:16])
}

// encodeSuper writes the static superblock for g into page (len >= PageSize).
func encodeSuper(page []byte, g Geometry) {
	le := binary.LittleEndian
	copy(page[offMagic:], Magic)
	le.PutUint32(page[offVersion:], Version)
	le.PutUint32(page[offFeatures:], g.Features)
	copy(page[offUUID:], g.UUID[:])
	le.PutUint64(page[offSize:], g.Size)
	le.PutUint64(page[offJournal:], uint64(g.JournalOff))
	le.PutUint64(page[offJournalLen:], g.JournalLen)
	le.PutUint64(page[offHeap:], uint64(g.HeapOff))
	le.PutUint64(page[offCreated:], uint64(g.CreatedNs))
	for i, p := range g.Params {
		le.PutUint64(page[offParams+8*i:], p)
	}
	le.PutUint64(page[offChecksum:], farm.Hash64(page[:offChecksum]))
	copy(page[offBackup:offBackup+superStatic], page[:superStatic])
}

// The static part never changes after Format, so page 0 also keeps a copy of
// it at offBackup, written by Format (and by Open for arenas made before
// the copy existed, or whose copy was damaged). When the static part fails
// validation but its copy passes, Validate says so (ErrSuperBackup) and
// RestoreSuper, run by `conquest fsck --repair`, writes the copy back: a
// flipped bit in the superblock no longer loses the file system.

// backupValid reports whether page holds a sound copy of the static part
// at offBackup, and returns the geometry it describes.
func backupValid(page []byte, kind Kind, deviceSize uint64) (Geometry, bool) {
	if len(page) < PageSize {
		return Geometry{}, false
	}
	cp := make([]byte, superDynEnd)
	copy(cp, page[offBackup:offBackup+superStatic])
	g, err := validateStatic(cp, kind, deviceSize)
	return g, err == nil
}

// RestoreSuper writes the copy of the superblock's static part that page 0
// keeps back over the static part, for `conquest fsck --repair` when
// Validate reports ErrSuperBackup. It reports whether it wrote anything:
// false, nil when the static part is sound. Nothing else is read or
// changed.
func RestoreSuper(path string) (bool, error) {
	f, kind, devSize, page, err := lockedPage0(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := validateStatic(page, kind, devSize); err == nil {
		return false, nil
	}
	if _, ok := backupValid(page, kind, devSize); !ok {
		return false, fmt.Errorf("%s: %w: the superblock and its backup copy are both damaged", path, ErrCorrupt)
	}
	if _, err := f.WriteAt(page[offBackup:offBackup+superStatic], 0); err != nil {
		return false, fmt.Errorf("%s: restoring the superblock: %w", path, err)
	}
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("%s: restoring the superblock: %w", path, err)
	}
	return true, nil
}

// FixImageLength sets the length of an image file that Validate refuses
// with ErrSizeMismatch (cut short, or grown) to one an arena of its
// superblock's size can have, for `conquest fsck --repair`. One cut inside
// the arena is grown back to the arena (the lost part reads as zeros; the
// check that follows finds what it held). One longer than the arena is
// given the arena's checkpoint slots if a slot's header is there (a slot
// cut short is applied only if every part of it still verifies against
// its hashes), and is cut back to the arena if not (bytes added to an
// image closed cleanly). It says what it did ("" if nothing); nothing
// else is changed. A device is not resized.
func FixImageLength(path string) (string, error) {
	f, kind, devSize, page, err := lockedPage0(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	if kind != KindFile {
		return "", fmt.Errorf("%s: a device smaller than its superblock says cannot be grown", path)
	}
	g, err := validateStatic(page, kind, 0)
	if err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	to, what := g.Size, "the arena's size: no checkpoint slot follows it"
	if devSize < g.Size {
		what = "the arena's size; the lost part reads as zeros, and the check finds what it held"
	}
	sl := fileSlots(g.Size)
	for i := uint64(0); i < 2 && devSize > g.Size; i++ {
		h := make([]byte, slotHeader)
		if _, err := f.ReadAt(h, sl.off(i)); err != nil {
			continue // past the end
		}
		if _, ok := parseSlotHead(h, g, sl, i); ok {
			to, what = g.Size+TailLen(g.Size), "the arena and its checkpoint slots; a slot cut short is not applied"
		}
	}
	if devSize == to {
		return "", nil
	}
	if err := f.Truncate(int64(to)); err != nil {
		return "", fmt.Errorf("%s: setting its length to %d bytes: %w", path, to, err)
	}
	if err := f.Sync(); err != nil {
		return "", fmt.Errorf("%s: setting its length to %d bytes: %w", path, to, err)
	}
	how := "cut it"
	if to > devSize {
		how = "grew it"
	}
	return fmt.Sprintf("%s from %d to %d bytes, %s", how, devSize, to, what), nil
}

// lockedPage0 opens the image at path for writing, locks it, and reads its
// page 0, for the repairs that write the superblock's static part back.
// The caller closes f.
func lockedPage0(path string) (f *os.File, kind Kind, devSize uint64, page []byte, err error) {
	f, kind, devSize, err = openBacking(path, false)
	if err != nil {
		return nil, 0, 0, nil, err
	}
	if err := lockFile(f); err != nil {
		f.Close()
		return nil, 0, 0, nil, fmt.Errorf("%s: %w", path, err)
	}
	page = make([]byte, PageSize)
	if n, err := f.ReadAt(page, 0); n < PageSize {
		f.Close()
		return nil, 0, 0, nil, fmt.Errorf("%s: %w: reading the superblock: %v", path, ErrNotConquest, err)
	}
	return f, kind, devSize, page, nil
}

// Validate checks a superblock image (the first page of an arena) against
// the size of the image file it was read from (0 skips the size check), and
// returns the geometry. Errors wrap ErrNotConquest, ErrVersion, ErrChecksum,
// ErrSizeMismatch or ErrCorrupt.
func Validate(page []byte, fileSize uint64) (Geometry, error) {
	return validateOn(page, KindFile, fileSize)
}

// validateOn is Validate for an image of the given kind: an image file is
// the arena, or the arena and its checkpoint slots (shadow.go); a device
// holds the arena at its start and may be larger (a block device keeps the
// checkpoint slots after it, slot.go).
func validateOn(page []byte, kind Kind, deviceSize uint64) (Geometry, error) {
	g, err := validateStatic(page, kind, deviceSize)
	if err != nil && !errors.Is(err, ErrSizeMismatch) {
		if _, ok := backupValid(page, kind, deviceSize); ok {
			return g, fmt.Errorf("%w; %w", err, ErrSuperBackup)
		}
	}
	return g, err
}

// validateStatic is validateOn of the static part at the start of page.
func validateStatic(page []byte, kind Kind, deviceSize uint64) (Geometry, error) {
	var g Geometry
	if len(page) < superDynEnd {
		return g, fmt.Errorf("%w: image is only %d bytes", ErrNotConquest, len(page))
	}
	if !bytes.Equal(page[offMagic:offMagic+8], []byte(Magic)) {
		return g, ErrNotConquest
	}
	le := binary.LittleEndian
	sum, want := le.Uint64(page[offChecksum:]), farm.Hash64(page[:offChecksum])
	if v := le.Uint32(page[offVersion:]); v != Version {
		if sum != want && !PlausibleVersion(v, Version) {
			return g, fmt.Errorf("%w: the version field reads %d and the checksum fails (stored %#x, computed %#x): the superblock is damaged", ErrChecksum, v, sum, want)
		}
		return g, fmt.Errorf("%w: found version %d, this build reads %d", ErrVersion, v, Version)
	}
	if sum != want {
		return g, fmt.Errorf("%w: stored %#x, computed %#x", ErrChecksum, sum, want)
	}
	g.Features = le.Uint32(page[offFeatures:])
	copy(g.UUID[:], page[offUUID:])
	g.Size = le.Uint64(page[offSize:])
	g.JournalOff = Off(le.Uint64(page[offJournal:]))
	g.JournalLen = le.Uint64(page[offJournalLen:])
	g.HeapOff = Off(le.Uint64(page[offHeap:]))
	g.CreatedNs = int64(le.Uint64(page[offCreated:]))
	for i := range g.Params {
		g.Params[i] = le.Uint64(page[offParams+8*i:])
	}
	if g.Features&^knownFeatures != 0 {
		return g, fmt.Errorf("%w: unknown feature flags %#x", ErrVersion, g.Features&^knownFeatures)
	}
	switch {
	case deviceSize == 0:
	case kind == KindFile && g.Size != deviceSize && deviceSize != g.Size+TailLen(g.Size):
		return g, fmt.Errorf("%w: superblock says %d bytes, image file has %d", ErrSizeMismatch, g.Size, deviceSize)
	case kind != KindFile && g.Size > deviceSize:
		return g, fmt.Errorf("%w: superblock says %d bytes, device has only %d", ErrSizeMismatch, g.Size, deviceSize)
	}
	if err := g.check(); err != nil {
		return g, err
	}
	return g, nil
}

// PlausibleVersion reports whether v, read from a superblock whose
// checksum fails in this build's layout, could be a later format's version
// (whose layout this build does not know) rather than damage: a later
// version is a small number above ours. Version 0, and the likes of
// 1831600129 that a damaged page holds, are damage, and are reported as
// such (ErrChecksum), not as a format this build cannot read. A version
// whose checksum passes in this layout was written on purpose, and is
// ErrVersion whatever its value.
func PlausibleVersion(v, ours uint32) bool {
	return v > ours && v <= ours+maxVersionsAhead
}

// maxVersionsAhead bounds how many format versions past this build's a
// superblock may claim before its version field is taken for damage.
const maxVersionsAhead = 255

// check verifies that the regions of g are ordered, aligned and in range.
func (g Geometry) check() error {
	switch {
	case g.Size < MinSize:
		return fmt.Errorf("%w: size %d below minimum %d", ErrTooSmall, g.Size, MinSize)
	case g.JournalOff != PageSize:
		return fmt.Errorf("%w: journal at %d, want %d", ErrCorrupt, g.JournalOff, PageSize)
	case g.JournalLen < 2*PageSize || g.JournalLen%PageSize != 0:
		return fmt.Errorf("%w: journal length %d", ErrCorrupt, g.JournalLen)
	case uint64(g.HeapOff) != uint64(g.JournalOff)+g.JournalLen:
		return fmt.Errorf("%w: heap at %d does not follow the journal", ErrCorrupt, g.HeapOff)
	case uint64(g.HeapOff) >= g.Size:
		return fmt.Errorf("%w: heap at %d beyond size %d", ErrCorrupt, g.HeapOff, g.Size)
	}
	return nil
}
