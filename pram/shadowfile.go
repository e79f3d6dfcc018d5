package pram

import (
	"fmt"
	"io"
	"os"

	"golang.org/x/sys/unix"
)

// The RAM copies' directory is read by every open of an image, and what
// is there need not be what this package put there: a FIFO under a copy's
// or a record's name made an open for reading wait forever for a writer
// (mount and fsck hung, the arena locked), and a character device such as
// a node of /dev/zero made reading a record whole take memory without
// end. So the files of that directory are opened without waiting and
// without following a link, and used only if they are regular files; a
// record is read only up to maxRecord bytes.

// maxRecord bounds a record: a path (at most PATH_MAX, 4096 bytes) and
// three short lines.
const maxRecord = 8 << 10

// openRegular opens the file at path (os.O_RDONLY or os.O_RDWR), without
// waiting in the open and without following a symbolic link, if it is a
// regular file; anything else is refused with an error naming what it is.
// The descriptor is blocking again once open.
func openRegular(path string, flag int) (*os.File, error) {
	fd, err := unix.Open(path, flag|unix.O_NONBLOCK|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, &os.PathError{Op: "open", Path: path, Err: err}
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "stat", Path: path, Err: err}
	}
	if st.Mode&unix.S_IFMT != unix.S_IFREG {
		unix.Close(fd)
		return nil, fmt.Errorf("%s: not a regular file (%s)", path, fileType(st.Mode))
	}
	if err := unix.SetNonblock(fd, false); err != nil {
		unix.Close(fd)
		return nil, &os.PathError{Op: "fcntl", Path: path, Err: err}
	}
	return os.NewFile(uintptr(fd), path), nil
}

// readRecord reads the record at path (a regular file of at most
// maxRecord bytes).
func readRecord(path string) ([]byte, error) {
	f, err := openRegular(path, os.O_RDONLY)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, maxRecord+1))
	if err != nil {
		return nil, err
	}
	if len(b) > maxRecord {
		return nil, fmt.Errorf("%s: larger than a record can be (%d bytes)", path, maxRecord)
	}
	return b, nil
}

// writeNew writes data to a new file at path, removing what was there (a
// file a kill left, or a FIFO, whose open would wait for a reader; an
// empty directory) and creating it afresh, never opening what it finds.
func writeNew(path string, data []byte) error {
	os.Remove(path)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL|unix.O_NOFOLLOW, 0o600)
	if err != nil {
		return err
	}
	_, err = f.Write(data)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// fileType names the type of a file of mode m.
func fileType(m uint32) string {
	switch m & unix.S_IFMT {
	case unix.S_IFREG:
		return "a regular file"
	case unix.S_IFDIR:
		return "a directory"
	case unix.S_IFLNK:
		return "a symbolic link"
	case unix.S_IFIFO:
		return "a FIFO"
	case unix.S_IFSOCK:
		return "a socket"
	case unix.S_IFCHR:
		return "a character device"
	case unix.S_IFBLK:
		return "a block device"
	}
	return fmt.Sprintf("file type %#o", m&unix.S_IFMT)
}
