package diskstore

import (
	"fmt"
)

// Rebuilding a disk superblock lost with its copy.
//
// Block 0 keeps the superblock and its copy in one 4 KiB page, so a
// damaged sector or page loses both, while the arena still holds what they
// say: the file system's UUID, the disk's block size and block count
// (arena parameters), and every large file's checksums. `conquest fsck
// --repair` then builds the superblock from the arena, opens the pair
// read-only through SuperOverlay, which shows that superblock in place of
// block 0, checks that the disk's data verifies against the arena's
// checksums (which a disk of another file system's would not), and only
// then writes it with RebuildSuper.

// overlay is the Device SuperOverlay returns.
type overlay struct {
	Device
	page []byte // superIO bytes: the superblock to show
}

// SuperOverlay returns a Device that reads the first superIO bytes of dev
// as the encoding of s (both copies) and everything else from dev. It
// refuses writes: it is for a read-only open. Its Close leaves dev open:
// the caller, which writes the superblock after the check, closes it.
func SuperOverlay(dev Device, s Super) Device {
	return &overlay{Device: dev, page: encodeDiskSuper(s)}
}

func (o *overlay) ReadAt(p []byte, off int64) (int, error) {
	if off >= 0 && off+int64(len(p)) <= superIO {
		return copy(p, o.page[off:]), nil // a damaged sector there may not read at all
	}
	n, err := o.Device.ReadAt(p, off)
	if off < superIO {
		k := copy(p, o.page[off:])
		if n < k {
			n, err = k, nil
		}
	}
	return n, err
}

func (o *overlay) Close() error { return nil }

func (o *overlay) WriteAt(p []byte, off int64) (int, error) {
	return 0, fmt.Errorf("%w: writing through a superblock overlay", ErrIO)
}

// RebuildSuper writes s over block 0's superblock and its copy, and syncs
// dev. The caller has checked that dev is the disk s describes.
func RebuildSuper(dev Device, s Super) error {
	if _, err := dev.WriteAt(encodeDiskSuper(s), 0); err != nil {
		return fmt.Errorf("%w: writing the disk superblock: %w", ErrIO, err)
	}
	if err := dev.Sync(); err != nil {
		return fmt.Errorf("%w: syncing the disk superblock: %w", ErrIO, err)
	}
	return nil
}
