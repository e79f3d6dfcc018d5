package pram

import (
	"errors"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// ImageFile is all the I/O a shadowed arena (shadow.go) does on its image
// file: reading it at Open, and the writes and syncs of checkpoints. Tests
// wrap it (OpenOptions.WrapImage, CrashImage) to drop what was not synced,
// as a power loss does.
type ImageFile interface {
	ReadAt(p []byte, off int64) (int, error)
	WriteAt(p []byte, off int64) (int, error)
	// Sync makes every write so far durable (fdatasync).
	Sync() error
	// Allocate gives [off, off+n) blocks (fallocate), so that later writes
	// there cannot fail for lack of space; EOPNOTSUPP where the file system
	// has no fallocate.
	Allocate(off, n int64) error
	// Size is the file's length.
	Size() (int64, error)
	// Truncate sets the file's length (the image only ever grows: Open
	// appends the checkpoint slots to an image made without them).
	Truncate(n int64) error
	// Drop tells the kernel that [off, off+n) will not be read again soon
	// (a hint: the pages are in the RAM copy already).
	Drop(off, n int64)
}

// osImage is the ImageFile of a real file or block device (dev: a
// device's size, 0 for a file).
type osImage struct {
	f   *os.File
	dev uint64
}

func (o osImage) ReadAt(p []byte, off int64) (int, error) {
	n, err := o.f.ReadAt(p, off)
	if errors.Is(err, io.EOF) && n < len(p) {
		clear(p[n:]) // past the end of a short image: zeros, as a hole
		return len(p), nil
	}
	return n, err
}

func (o osImage) WriteAt(p []byte, off int64) (int, error) { return o.f.WriteAt(p, off) }

func (o osImage) Sync() error {
	for {
		err := unix.Fdatasync(int(o.f.Fd()))
		if err != unix.EINTR {
			return err
		}
	}
}

func (o osImage) Allocate(off, n int64) error {
	for {
		err := unix.Fallocate(int(o.f.Fd()), 0, off, n)
		if err != unix.EINTR {
			return err
		}
	}
}

// releaser is an ImageFile that can give blocks back to its file system.
type releaser interface {
	// Release deallocates [off, off+n) (it reads as zeros after); the
	// file's length does not change.
	Release(off, n int64) error
}

func (o osImage) Release(off, n int64) error {
	if o.dev != 0 {
		return nil // a device's blocks are its own
	}
	for {
		err := unix.Fallocate(int(o.f.Fd()), unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, off, n)
		if err != unix.EINTR {
			return err
		}
	}
}

func (o osImage) Size() (int64, error) {
	if o.dev != 0 {
		return int64(o.dev), nil
	}
	st, err := o.f.Stat()
	if err != nil {
		return 0, err
	}
	return st.Size(), nil
}

func (o osImage) Truncate(n int64) error { return o.f.Truncate(n) }

func (o osImage) Drop(off, n int64) {
	_ = unix.Fadvise(int(o.f.Fd()), off, n, unix.FADV_DONTNEED)
}
