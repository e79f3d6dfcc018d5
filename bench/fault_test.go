package bench

import (
	"bytes"
	"os"
	"sync/atomic"
)

// faultFS is OSFS with a fault injected into every file it opens. It stands
// for a corrupting directory: what reaches the disk (or comes back from it)
// is not what the benchmark wrote.
type faultFS struct {
	OSFS
	fault  fault
	active atomic.Bool // faults happen only while set
}

type fault int

const (
	flipWrite  fault = iota + 1 // every Write/WriteAt lands with one byte inverted
	extraWrite                  // every Write lands with one byte more
	dropWrite                   // WriteAt (an overwrite) is lost
	flipRead                    // every Read returns one byte inverted
)

func newFaultFS(f fault) *faultFS {
	fs := &faultFS{fault: f}
	fs.active.Store(true)
	return fs
}

func (fs *faultFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := fs.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &faultFile{File: f, fs: fs}, nil
}

type faultFile struct {
	File
	fs *faultFS
}

func (f *faultFile) on(k fault) bool { return f.fs.fault == k && f.fs.active.Load() }

func flipped(p []byte) []byte {
	q := bytes.Clone(p)
	q[len(q)/2] ^= 0xff
	return q
}

func (f *faultFile) Write(p []byte) (int, error) {
	switch {
	case len(p) > 0 && f.on(flipWrite):
		return f.File.Write(flipped(p))
	case len(p) > 0 && f.on(extraWrite):
		n, err := f.File.Write(append(bytes.Clone(p), '!'))
		return min(n, len(p)), err
	}
	return f.File.Write(p)
}

func (f *faultFile) WriteAt(p []byte, off int64) (int, error) {
	switch {
	case len(p) > 0 && f.on(flipWrite):
		return f.File.WriteAt(flipped(p), off)
	case f.on(dropWrite):
		return len(p), nil
	}
	return f.File.WriteAt(p, off)
}

func (f *faultFile) Read(p []byte) (int, error) {
	n, err := f.File.Read(p)
	if n > 0 && f.on(flipRead) {
		p[n/2] ^= 0xff
	}
	return n, err
}

func (f *faultFile) ReadAt(p []byte, off int64) (int, error) {
	n, err := f.File.ReadAt(p, off)
	if n > 0 && f.on(flipRead) {
		p[n/2] ^= 0xff
	}
	return n, err
}
