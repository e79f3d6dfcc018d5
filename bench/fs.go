package bench

import (
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
	"time"
)

// FS is the file-system surface the benchmarks use. OSFS is the real one;
// tests wrap it to inject faults.
type FS interface {
	OpenFile(name string, flag int, perm os.FileMode) (File, error)
	Remove(name string) error
	Mkdir(name string, perm os.FileMode) error
	RemoveAll(name string) error
}

// File is the part of *os.File the benchmarks use.
type File interface {
	io.Reader
	io.Writer
	io.ReaderAt
	io.WriterAt
	io.Seeker
	Stat() (os.FileInfo, error)
	Sync() error
	Close() error
}

// OSFS is FS on the operating system's files. Its files are bare file
// descriptors, not *os.File: opening an *os.File also costs four fcntl calls
// and a failing epoll_ctl (the runtime tries to make every file pollable),
// which C benchmarks such as PostMark do not make. With bare descriptors a
// benchmark here makes the same system calls as its C original: open, the
// reads and writes, close, and fstat where stdio does one.
type OSFS struct{}

var _ FS = OSFS{}

// OpenFile opens name with open(2).
func (OSFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	var fd int
	err := retry(func() (err error) {
		fd, err = syscall.Open(name, flag|syscall.O_CLOEXEC, uint32(perm.Perm()))
		return err
	})
	if err != nil {
		return nil, &fs.PathError{Op: "open", Path: name, Err: err}
	}
	return &rawFile{fd: fd, name: name}, nil
}

// Remove is unlink(2) (os.Remove, which tries rmdir after a failed unlink).
func (OSFS) Remove(name string) error { return os.Remove(name) }

// Mkdir is os.Mkdir.
func (OSFS) Mkdir(name string, perm os.FileMode) error { return os.Mkdir(name, perm) }

// RemoveAll is os.RemoveAll.
func (OSFS) RemoveAll(name string) error { return os.RemoveAll(name) }

// rawFile is a File on a bare descriptor. It is used by one goroutine.
type rawFile struct {
	fd   int
	name string
}

// retry runs f until it fails with something other than EINTR (the Go
// runtime preempts goroutines with signals, so slow calls can be
// interrupted).
func retry(f func() error) error {
	for {
		if err := f(); err != syscall.EINTR {
			return err
		}
	}
}

func (f *rawFile) wrap(op string, err error) error {
	if err == nil {
		return nil
	}
	return &fs.PathError{Op: op, Path: f.name, Err: err}
}

// Read is one read(2); 0 bytes means end of file.
func (f *rawFile) Read(p []byte) (int, error) {
	var n int
	err := retry(func() (err error) { n, err = syscall.Read(f.fd, p); return err })
	if err != nil {
		return 0, f.wrap("read", err)
	}
	if n == 0 && len(p) > 0 {
		return 0, io.EOF
	}
	return n, nil
}

// ReadAt is pread(2), repeated until p is full or the file ends.
func (f *rawFile) ReadAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		var n int
		err := retry(func() (err error) { n, err = syscall.Pread(f.fd, p[done:], off+int64(done)); return err })
		if err != nil {
			return done, f.wrap("pread", err)
		}
		if n == 0 {
			return done, io.EOF
		}
		done += n
	}
	return done, nil
}

// Write is write(2), repeated until all of p is written.
func (f *rawFile) Write(p []byte) (int, error) {
	done := 0
	for done < len(p) {
		var n int
		err := retry(func() (err error) { n, err = syscall.Write(f.fd, p[done:]); return err })
		if err != nil {
			return done, f.wrap("write", err)
		}
		if n == 0 {
			return done, f.wrap("write", io.ErrShortWrite)
		}
		done += n
	}
	return done, nil
}

// WriteAt is pwrite(2), repeated until all of p is written.
func (f *rawFile) WriteAt(p []byte, off int64) (int, error) {
	done := 0
	for done < len(p) {
		var n int
		err := retry(func() (err error) { n, err = syscall.Pwrite(f.fd, p[done:], off+int64(done)); return err })
		if err != nil {
			return done, f.wrap("pwrite", err)
		}
		if n == 0 {
			return done, f.wrap("pwrite", io.ErrShortWrite)
		}
		done += n
	}
	return done, nil
}

// Seek is lseek(2).
func (f *rawFile) Seek(off int64, whence int) (int64, error) {
	var pos int64
	err := retry(func() (err error) { pos, err = syscall.Seek(f.fd, off, whence); return err })
	return pos, f.wrap("seek", err)
}

// Sync is fsync(2).
func (f *rawFile) Sync() error {
	return f.wrap("fsync", retry(func() error { return syscall.Fsync(f.fd) }))
}

// Close is close(2); it is not retried on EINTR, since Linux has released the
// descriptor by then.
func (f *rawFile) Close() error {
	if f.fd < 0 {
		return f.wrap("close", fs.ErrClosed)
	}
	err := syscall.Close(f.fd)
	f.fd = -1
	return f.wrap("close", err)
}

// Stat is fstat(2).
func (f *rawFile) Stat() (os.FileInfo, error) {
	var st syscall.Stat_t
	if err := retry(func() error { return syscall.Fstat(f.fd, &st) }); err != nil {
		return nil, f.wrap("stat", err)
	}
	return &rawInfo{name: filepath.Base(f.name), st: st}, nil
}

// rawInfo is an os.FileInfo from a Stat_t; Sys returns the *syscall.Stat_t.
type rawInfo struct {
	name string
	st   syscall.Stat_t
}

func (i *rawInfo) Name() string       { return i.name }
func (i *rawInfo) Size() int64        { return i.st.Size }
func (i *rawInfo) ModTime() time.Time { return time.Unix(i.st.Mtim.Unix()) }
func (i *rawInfo) IsDir() bool        { return i.st.Mode&syscall.S_IFMT == syscall.S_IFDIR }
func (i *rawInfo) Sys() any           { return &i.st }

func (i *rawInfo) Mode() os.FileMode {
	m := os.FileMode(i.st.Mode & 0o777)
	switch i.st.Mode & syscall.S_IFMT {
	case syscall.S_IFDIR:
		m |= os.ModeDir
	case syscall.S_IFLNK:
		m |= os.ModeSymlink
	case syscall.S_IFIFO:
		m |= os.ModeNamedPipe
	case syscall.S_IFSOCK:
		m |= os.ModeSocket
	case syscall.S_IFCHR:
		m |= os.ModeDevice | os.ModeCharDevice
	case syscall.S_IFBLK:
		m |= os.ModeDevice
	}
	return m
}
