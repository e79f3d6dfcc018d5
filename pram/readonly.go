package pram

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"

	"github.com/edsrzf/mmap-go"
	"golang.org/x/sys/unix"
)

// Read-only opens.
//
// An image that cannot be written (a read-only file or device, a file
// system mounted read-only, an immutable file) can still be checked,
// measured and mounted read-only: OpenOptions.ReadOnly opens it with
// O_RDONLY and maps it privately (MAP_PRIVATE). Every store the layers
// above make while opening (the mount counter, the superblock's state,
// an allocator's bookkeeping) lands in pages of this process's own memory
// and never reaches the image; Persist and Sync do nothing, and Close only
// unmaps. Nothing needs file blocks either, so Reserve does nothing.
//
// Only an image closed cleanly is opened so. One that a crash left open
// needs its recovery (rolling back the journal, applying the checkpoint
// that a shadowed image keeps after the arena, or using the RAM copy a
// killed daemon left), and that writes the image: the open is refused with
// ErrNeedsRecovery, as ext4 refuses to mount a read-only device whose
// journal needs replaying. (A shadowed image's first bytes say "clean"
// only after Close: its first checkpoint, made before Open returns,
// already records the dirty state, so no newer state can hide behind a
// clean superblock.) A device-DAX arena cannot be mapped privately.

// ErrNeedsRecovery: an image opened read-only was not closed cleanly.
var ErrNeedsRecovery = errors.New("the file system was not unmounted cleanly and needs recovery, which writes the image")

// openReadOnly is OpenWith for OpenOptions.ReadOnly.
func openReadOnly(path string) (*Arena, error) {
	f, kind, _, page, g, err := openLocked(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	if kind == KindDAX {
		f.Close()
		return nil, fmt.Errorf("%s: a device-DAX arena cannot be opened read-only (it can only be mapped shared)", path)
	}
	if st := binary.LittleEndian.Uint64(page[offState:]); st != StateClean {
		f.Close()
		return nil, fmt.Errorf("%s: cannot be opened read-only: %w", path, ErrNeedsRecovery)
	}
	m, err := mmap.MapRegion(f, int(g.Size), mmap.COPY, 0, 0)
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: mapping %d bytes read-only: %w", path, g.Size, err)
	}
	a := &Arena{path: path, f: f, m: m, geo: g, kind: kind, readOnly: true, inPlace: "opened read-only"}
	if !bytes.Equal(m[offBackup:offBackup+superStatic], m[:superStatic]) {
		copy(a.Bytes(offBackup, superStatic), m[:superStatic]) // as OpenWith, in this copy only
	}
	// A clean arena's journal is empty; recover refuses one that is not
	// (ErrJournal, a.dirty being false), which only a repair can empty.
	if _, err := a.recover(); err != nil {
		a.unmap(false)
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return a, nil
}

// ReadOnly reports whether the arena was opened with OpenOptions.ReadOnly:
// nothing is ever written to its image.
func (a *Arena) ReadOnly() bool { return a.readOnly }

// ReadOnlyDevice reports whether f is a block device set read-only
// (`losetup -r`, `blockdev --setro`): Linux opens one for writing all the
// same, and fails its writes and writable shared mappings.
func ReadOnlyDevice(f *os.File) bool {
	ro, err := unix.IoctlGetInt(int(f.Fd()), unix.BLKROGET)
	return err == nil && ro != 0
}

// LeftOpen reports whether the image at path was not closed cleanly (a
// crash left it open, or it is open now), reading only its superblock.
func LeftOpen(path string) (bool, error) {
	f, kind, devSize, err := openBackingMode(path, os.O_RDONLY, false)
	if err != nil {
		return false, err
	}
	defer f.Close()
	page := make([]byte, PageSize)
	if n, err := f.ReadAt(page, 0); n < superDynEnd {
		return false, fmt.Errorf("%s: %w: cannot read superblock: %v", path, ErrNotConquest, err)
	}
	if _, err := validateOn(page, kind, devSize); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return binary.LittleEndian.Uint64(page[offState:]) != StateClean, nil
}

// ReadGeometry returns the static geometry of the image at path, reading
// only its superblock (nothing is mapped or written).
func ReadGeometry(path string) (Geometry, error) {
	f, kind, devSize, err := openBackingMode(path, os.O_RDONLY, false)
	if err != nil {
		return Geometry{}, err
	}
	defer f.Close()
	page := make([]byte, PageSize)
	if n, err := f.ReadAt(page, 0); n < superDynEnd {
		return Geometry{}, fmt.Errorf("%s: %w: cannot read superblock: %v", path, ErrNotConquest, err)
	}
	g, err := validateOn(page, kind, devSize)
	if err != nil {
		return g, fmt.Errorf("%s: %w", path, err)
	}
	return g, nil
}
