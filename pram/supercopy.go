package pram

import (
	"bytes"
	"fmt"
)

// The superblock's static part has two copies in page 0 (at 0 and at
// offBackup), so one damaged page loses both: a zeroed page 0, or one
// overwritten with random bytes, made the arena unusable for good with
// every file intact. The layers above keep a third copy in the heap
// (conquest: root slot 11, found again by its magic when page 0 is lost),
// which needs the static part as bytes (StaticPart), a check of a copy
// against the image it is to restore (CheckStatic), and its restore
// (WriteStatic).

// StaticLen is the length of the superblock's static part, checksum
// included.
const StaticLen = superStatic

// StaticPart returns a copy of the superblock's static part as Format wrote
// it (it never changes after Format).
func (a *Arena) StaticPart() []byte {
	return bytes.Clone(a.Bytes(0, StaticLen))
}

// CheckStatic reports whether b is a sound static part (magic, version,
// checksum, a geometry that fits the image at path, which is not opened
// for writing) and returns the geometry it describes.
func CheckStatic(path string, b []byte) (Geometry, error) {
	if len(b) != StaticLen {
		return Geometry{}, fmt.Errorf("%w: a static part of %d bytes, want %d", ErrCorrupt, len(b), StaticLen)
	}
	f, kind, devSize, err := openBackingMode(path, 0, false)
	if err != nil {
		return Geometry{}, err
	}
	defer f.Close()
	page := make([]byte, superDynEnd)
	copy(page, b)
	return validateStatic(page, kind, devSize)
}

// WriteStatic writes b, a sound static part for the image at path (as
// CheckStatic says), over the superblock's static part and over its copy
// in page 0, for `conquest fsck --repair` when both are damaged and a copy
// kept elsewhere was found. The dynamic part (state, root slots) is left
// as it is: the layers' repairs mend what damage it took. It reports
// whether it wrote anything: false, nil when the static part is sound
// already; it refuses (ErrCorrupt) a static part that is sound but not b.
func WriteStatic(path string, b []byte) (bool, error) {
	if _, err := CheckStatic(path, b); err != nil {
		return false, fmt.Errorf("%s: the copy of the superblock: %w", path, err)
	}
	f, kind, devSize, page, err := lockedPage0(path)
	if err != nil {
		return false, err
	}
	defer f.Close()
	if _, err := validateStatic(page, kind, devSize); err == nil {
		if !bytes.Equal(page[:StaticLen], b) {
			return false, fmt.Errorf("%s: %w: the superblock is sound and differs from the copy: not overwriting it", path, ErrCorrupt)
		}
		return false, nil
	}
	for _, off := range []int64{0, offBackup} {
		if _, err := f.WriteAt(b, off); err != nil {
			return false, fmt.Errorf("%s: restoring the superblock: %w", path, err)
		}
	}
	if err := f.Sync(); err != nil {
		return false, fmt.Errorf("%s: restoring the superblock: %w", path, err)
	}
	return true, nil
}
