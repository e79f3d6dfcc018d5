package posixtest

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"strconv"
	"testing"

	"golang.org/x/sys/unix"
)

// A data-integrity exerciser in the manner of fsx: random operations on one
// file, each checked against an in-memory model of its contents. Operations:
// pwrite, pread, ftruncate, fallocate (allocate, keep size, punch hole,
// zero range), writes and reads through a shared mapping, fsync, and
// closing and reopening the file. Sizes range to 4 MiB and cluster around
// 1 MiB, so on Conquest the file moves between the arena and the disk
// again and again. A mode the file system does not support (EOPNOTSUPP) is
// dropped; anything else that fails, or any byte that differs, fails the
// test with the last operations.
//
// The exerciser runs in a helper process (helper op "fsx"): a process that
// serves a FUSE mount must not touch a mapping of a file on it, since a page
// fault blocks a thread that holds a Go P, and a garbage collection that
// then stops the world can wait forever for the fault, which waits for the
// server.
var fsxTests = map[string]Test{
	"FsxSmall": func(t *testing.T, dir string) { fsxIn(t, dir, 1, 1500, 256<<10) },
	"FsxLarge": func(t *testing.T, dir string) { fsxIn(t, dir, 2, 1500, 4<<20) },
}

func fsxIn(t *testing.T, dir string, seed, ops int, maxLen int64) {
	out, err := RunAs(t, Root, "fsx", dir, strconv.Itoa(seed), strconv.Itoa(ops), strconv.FormatInt(maxLen, 10))
	if err != nil || out != "" {
		t.Fatalf("fsx (seed %d, %d operations, files up to %d bytes): %v\n%s", seed, ops, maxLen, err, out)
	}
}

// fsxFailed carries a failure out of the exerciser (see fsx.fail).
type fsxFailed struct{ msg string }

const (
	fallocKeepSize  = 0x01
	fallocPunchHole = 0x02
	fallocZeroRange = 0x10
)

type fsx struct {
	path     string
	fd       int
	model    []byte
	maxLen   int64
	rng      *rand.Rand
	log      []string
	disabled map[string]bool
	seq      byte
}

// runFsx runs the exerciser on dir and returns what went wrong, or "".
func runFsx(dir string, seed uint64, ops int, maxLen int64) (failure string) {
	f := &fsx{path: join(dir, "fsx"), maxLen: maxLen, rng: rand.New(rand.NewPCG(seed, 0x667378)),
		disabled: map[string]bool{}, fd: -1}
	defer func() {
		if f.fd >= 0 {
			unix.Close(f.fd)
		}
		if v := recover(); v != nil {
			e, ok := v.(fsxFailed)
			if !ok {
				panic(v)
			}
			failure = e.msg
		}
	}()
	fd, err := unix.Open(f.path, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	f.ok(err, "create")
	f.fd = fd
	for i := 0; i < ops; i++ {
		switch w := f.rng.IntN(100); {
		case w < 30:
			f.write()
		case w < 45:
			f.read()
		case w < 55:
			f.truncate()
		case w < 62:
			f.fallocate(fallocPunchHole|fallocKeepSize, "punch hole")
		case w < 67:
			f.fallocate(fallocZeroRange, "zero range")
		case w < 70:
			f.fallocate(fallocZeroRange|fallocKeepSize, "zero range keep size")
		case w < 73:
			f.fallocate(0, "allocate")
		case w < 75:
			f.fallocate(fallocKeepSize, "allocate keep size")
		case w < 83:
			f.mapWrite()
		case w < 90:
			f.mapRead()
		case w < 94:
			f.note("fsync")
			f.ok(unix.Fsync(f.fd), "fsync")
		default:
			f.reopen()
		}
		f.checkSize()
	}
	f.reopen()
	f.checkAll()
	return ""
}

// offLen picks a range: mostly small, sometimes large, often near 1 MiB.
func (f *fsx) offLen() (int64, int64) {
	var off int64
	switch f.rng.IntN(4) {
	case 0:
		off = (1 << 20) - 64<<10 + f.rng.Int64N(128<<10)
	default:
		off = f.rng.Int64N(f.maxLen)
	}
	n := 1 + f.rng.Int64N(64<<10)
	if f.rng.IntN(8) == 0 {
		n = 1 + f.rng.Int64N(1536<<10)
	}
	off = min(off, f.maxLen-1)
	return off, min(n, f.maxLen-off)
}

func (f *fsx) note(format string, args ...any) {
	f.log = append(f.log, fmt.Sprintf(format, args...))
	if len(f.log) > 20 {
		f.log = f.log[1:]
	}
}

func (f *fsx) fail(format string, args ...any) {
	panic(fsxFailed{fmt.Sprintf("%s\nlast operations (model size %d):\n  %s", fmt.Sprintf(format, args...), len(f.model),
		bytes.Join(func() [][]byte {
			var b [][]byte
			for _, l := range f.log {
				b = append(b, []byte(l))
			}
			return b
		}(), []byte("\n  ")))})
}

func (f *fsx) ok(err error, what string) {
	if err != nil {
		f.fail("%s: %v", what, err)
	}
}

func (f *fsx) fill(n int64) []byte {
	f.seq++
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) ^ f.seq
	}
	return b
}

func (f *fsx) setModel(off int64, data []byte) {
	if end := off + int64(len(data)); end > int64(len(f.model)) {
		f.model = append(f.model, make([]byte, end-int64(len(f.model)))...)
	}
	copy(f.model[off:], data)
}

func (f *fsx) write() {
	off, n := f.offLen()
	data := f.fill(n)
	f.note("pwrite %d+%d", off, n)
	for done := int64(0); done < n; {
		m, err := unix.Pwrite(f.fd, data[done:], off+done)
		f.ok(err, "pwrite")
		done += int64(m)
	}
	f.setModel(off, data)
}

func (f *fsx) compare(what string, off int64, got []byte) {
	want := []byte{}
	if off < int64(len(f.model)) {
		want = f.model[off:min(off+int64(len(got)), int64(len(f.model)))]
	}
	if !bytes.Equal(got, want) {
		i := 0
		for i < len(got) && i < len(want) && got[i] == want[i] {
			i++
		}
		f.fail("%s at %d: %d bytes, want %d; first difference at offset %d", what, off, len(got), len(want), off+int64(i))
	}
}

func (f *fsx) read() {
	off, n := f.offLen()
	f.note("pread %d+%d", off, n)
	buf := make([]byte, n)
	got := int64(0)
	for got < n {
		m, err := unix.Pread(f.fd, buf[got:], off+got)
		f.ok(err, "pread")
		if m == 0 {
			break
		}
		got += int64(m)
	}
	f.compare("pread", off, buf[:got])
}

func (f *fsx) truncate() {
	var size int64
	switch f.rng.IntN(4) {
	case 0:
		size = (1 << 20) - 4096 + f.rng.Int64N(8192)
	case 1:
		size = f.rng.Int64N(64 << 10)
	default:
		size = f.rng.Int64N(f.maxLen)
	}
	f.note("ftruncate %d", size)
	f.ok(unix.Ftruncate(f.fd, size), "ftruncate")
	if size < int64(len(f.model)) {
		f.model = f.model[:size]
	} else {
		f.model = append(f.model, make([]byte, size-int64(len(f.model)))...)
	}
}

func (f *fsx) fallocate(mode uint32, name string) {
	if f.disabled[name] {
		return
	}
	off, n := f.offLen()
	f.note("fallocate %s %d+%d", name, off, n)
	err := unix.Fallocate(f.fd, mode, off, n)
	if err == unix.EOPNOTSUPP {
		f.disabled[name] = true
		f.note("fallocate %s: not supported", name)
		return
	}
	f.ok(err, "fallocate "+name)
	size := int64(len(f.model))
	if mode&(fallocPunchHole|fallocZeroRange) != 0 {
		if end := min(off+n, size); off < end {
			clear(f.model[off:end])
		}
	}
	if mode&fallocKeepSize == 0 && off+n > size {
		f.model = append(f.model, make([]byte, off+n-size)...)
	}
}

// mapping maps the whole file shared (writable if write) and picks a range
// of at most maxN bytes in it; ok is false for an empty file.
func (f *fsx) mapping(write bool, what string, maxN int64) (m []byte, off, n int64, ok bool) {
	size := int64(len(f.model))
	if size == 0 {
		return nil, 0, 0, false
	}
	prot := unix.PROT_READ
	if write {
		prot |= unix.PROT_WRITE
	}
	m, err := unix.Mmap(f.fd, 0, int(size), prot, unix.MAP_SHARED)
	f.ok(err, "mmap")
	Prefault(m, write)
	off = f.rng.Int64N(size)
	n = min(1+f.rng.Int64N(maxN), size-off)
	f.note("%s %d+%d", what, off, n)
	return m, off, n, true
}

func (f *fsx) mapWrite() {
	m, off, n, ok := f.mapping(true, "mapwrite", 64<<10)
	if !ok {
		return
	}
	data := f.fill(n)
	copy(m[off:], data)
	f.ok(unix.Msync(m, unix.MS_SYNC), "msync")
	f.ok(unix.Munmap(m), "munmap")
	f.setModel(off, data)
}

func (f *fsx) mapRead() {
	m, off, n, ok := f.mapping(false, "mapread", 256<<10)
	if !ok {
		return
	}
	got := append([]byte(nil), m[off:off+n]...)
	f.ok(unix.Munmap(m), "munmap")
	f.compare("mapread", off, got)
}

func (f *fsx) reopen() {
	f.note("close, reopen")
	f.ok(unix.Close(f.fd), "close")
	fd, err := unix.Open(f.path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	f.ok(err, "reopen")
	f.fd = fd
}

func (f *fsx) checkSize() {
	var st unix.Stat_t
	f.ok(unix.Fstat(f.fd, &st), "fstat")
	if st.Size != int64(len(f.model)) {
		f.fail("size %d, want %d", st.Size, len(f.model))
	}
}

func (f *fsx) checkAll() {
	got, err := ReadFile(f.path)
	f.ok(err, "read back")
	f.compare("whole file", 0, got)
	if len(got) != len(f.model) {
		f.fail("whole file: %d bytes, want %d", len(got), len(f.model))
	}
}
