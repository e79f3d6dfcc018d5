package posixtest

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// Creating, opening, reading and writing regular files.
var ioTests = map[string]Test{
	"CreateReadWrite":     testCreateReadWrite,
	"OpenExcl":            testOpenExcl,
	"OpenTrunc":           testOpenTrunc,
	"OpenAppend":          testOpenAppend,
	"AppendStored":        testAppendStored,
	"OpenFlagsErrors":     testOpenFlagsErrors,
	"OpenCreateDangling":  testOpenCreateDangling,
	"PreadPwrite":         testPreadPwrite,
	"WritePastEOFHole":    testWritePastEOFHole,
	"SparseFile":          testSparseFile,
	"LargeOffset":         testLargeOffset,
	"MaxFileSize":         testMaxFileSize,
	"UnlinkOpenFile":      testUnlinkOpenFile,
	"ReadWriteLarge":      testReadWriteLarge,
	"SharedOffsetDup":     testSharedOffsetDup,
	"FsyncFdatasync":      testFsync,
	"FsyncDir":            testFsyncDir,
	"ReadOnlyWriteOnlyFd": testReadOnlyWriteOnlyFd,
}

func testCreateReadWrite(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0640)
	st := fstat(t, fd)
	if st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != 0 || st.Nlink != 1 {
		t.Fatalf("new file: mode %o size %d nlink %d", st.Mode, st.Size, st.Nlink)
	}
	if perm := st.Mode & 07777; perm&^0640 != 0 {
		t.Fatalf("new file mode %o has bits beyond 0640", perm)
	}
	if int(st.Uid) != unix.Geteuid() || int(st.Gid) != unix.Getegid() {
		t.Fatalf("new file owned by %d:%d, want %d:%d", st.Uid, st.Gid, unix.Geteuid(), unix.Getegid())
	}
	data := pattern(1, 10000)
	n, err := unix.Write(fd, data)
	ok(t, err, "write")
	if n != len(data) {
		t.Fatalf("short write %d", n)
	}
	if st := fstat(t, fd); st.Size != int64(len(data)) {
		t.Fatalf("size after write %d, want %d", st.Size, len(data))
	}
	// The file offset advanced: a read now is at EOF.
	buf := make([]byte, 10)
	n, err = unix.Read(fd, buf)
	ok(t, err, "read at EOF")
	if n != 0 {
		t.Fatalf("read at EOF returned %d bytes", n)
	}
	_, err = unix.Seek(fd, 0, 0)
	ok(t, err, "seek")
	got := make([]byte, len(data)+100)
	total := 0
	for {
		n, err := unix.Read(fd, got[total:])
		ok(t, err, "read")
		if n == 0 {
			break
		}
		total += n
	}
	if !bytes.Equal(got[:total], data) {
		t.Fatalf("read back: %s", describeDiff(got[:total], data))
	}
	wantContent(t, p, data)
	// Overwrite in the middle keeps the size.
	pwrite(t, fd, []byte("hello"), 5000)
	copy(data[5000:], "hello")
	wantContent(t, p, data)
}

func testOpenExcl(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY, 0644)
	pwrite(t, fd, []byte("x"), 0)
	_, err := unix.Open(p, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.EEXIST, "O_EXCL on existing file")
	mkdir(t, join(dir, "d"), 0755)
	_, err = unix.Open(join(dir, "d"), unix.O_CREAT|unix.O_EXCL|unix.O_RDONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.EEXIST, "O_EXCL on existing directory")
	// O_CREAT without O_EXCL opens the existing file and keeps its data.
	fd2 := open(t, p, unix.O_CREAT|unix.O_RDONLY, 0600)
	if got := pread(t, fd2, 10, 0); string(got) != "x" {
		t.Fatalf("O_CREAT on existing file: content %q", got)
	}
	// O_EXCL does not follow a symlink, even a dangling one.
	ok(t, unix.Symlink("nowhere", join(dir, "l")), "symlink")
	_, err = unix.Open(join(dir, "l"), unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.EEXIST, "O_EXCL on dangling symlink")
	var st unix.Stat_t
	wantErr(t, unix.Lstat(join(dir, "nowhere"), &st), unix.ENOENT, "O_EXCL must not create the symlink target")
}

func testOpenTrunc(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, pattern(2, 5000), 0644)
	old := unix.Timespec{Sec: 1000000000, Nsec: 5}
	ok(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, old}, 0), "utimens")
	fd := open(t, p, unix.O_WRONLY|unix.O_TRUNC, 0)
	st := fstat(t, fd)
	if st.Size != 0 {
		t.Fatalf("size after O_TRUNC %d", st.Size)
	}
	if !tsAfter(st.Mtim, old) || !tsAfter(st.Ctim, old) {
		t.Fatalf("O_TRUNC did not update mtime/ctime: %v %v", tsTime(st.Mtim), tsTime(st.Ctim))
	}
	pwrite(t, fd, []byte("ab"), 0)
	wantContent(t, p, []byte("ab"))
	// O_TRUNC on an empty file and together with O_CREAT on an existing one.
	fd2 := open(t, p, unix.O_CREAT|unix.O_TRUNC|unix.O_RDWR, 0644)
	if st := fstat(t, fd2); st.Size != 0 {
		t.Fatalf("O_CREAT|O_TRUNC on existing file left size %d", st.Size)
	}
	// O_TRUNC with O_RDONLY is unspecified by POSIX; Linux truncates.
	writeFile(t, p, []byte("abc"), 0644)
	fd3 := open(t, p, unix.O_RDONLY|unix.O_TRUNC, 0)
	if st := fstat(t, fd3); st.Size != 0 {
		t.Fatalf("O_RDONLY|O_TRUNC: size %d, Linux truncates", st.Size)
	}
}

// Appends through an O_APPEND descriptor are stored where the file ended,
// after a write past the end through another one: checked after fsync and
// with the file's page cache dropped, so that what is read is what the file
// system stored, not what the kernel cached. (A FUSE writeback cache writes
// dirty pages back through any writable handle, an O_APPEND one included,
// at their own offsets.)
func testAppendStored(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, []byte("0123456789"), 0644)
	fd := open(t, p, unix.O_WRONLY, 0)
	pwrite(t, fd, []byte("Z"), 8192)
	ok(t, unix.Close(fd), "close")
	a := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
	pwrite(t, a, []byte("END"), 0) // appends: Linux ignores the offset
	_, err := unix.Write(a, []byte("!"))
	ok(t, err, "write")
	ok(t, unix.Fsync(a), "fsync")
	ok(t, unix.Close(a), "close")
	r := open(t, p, unix.O_RDONLY, 0)
	ok(t, unix.Fadvise(r, 0, 0, unix.FADV_DONTNEED), "fadvise DONTNEED")
	want := make([]byte, 8197)
	copy(want, "0123456789")
	copy(want[8192:], "ZEND!")
	wantContent(t, p, want)
}

func testOpenAppend(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, []byte("0123"), 0644)
	a := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
	b := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
	w := open(t, p, unix.O_WRONLY, 0)
	mustWrite := func(fd int, s string) {
		t.Helper()
		n, err := unix.Write(fd, []byte(s))
		ok(t, err, "write")
		if n != len(s) {
			t.Fatalf("short write")
		}
	}
	mustWrite(a, "aa")
	mustWrite(b, "bbb")
	mustWrite(a, "c")
	// A plain fd writes at its own offset 0, overwriting.
	mustWrite(w, "W")
	// The append fds follow the end of file even though another fd wrote.
	mustWrite(b, "d")
	wantContent(t, p, []byte("W123aabbbcd"))
	// Linux: pwrite on an O_APPEND fd appends, ignoring the offset.
	n, err := unix.Pwrite(a, []byte("P"), 0)
	ok(t, err, "pwrite on O_APPEND fd")
	if n != 1 {
		t.Fatalf("pwrite: %d", n)
	}
	wantContent(t, p, []byte("W123aabbbcdP"))
	// pwrite leaves the file offset alone; a write(2) leaves it at the end.
	off, err := unix.Seek(a, 0, 1)
	ok(t, err, "seek")
	if off != 10 {
		t.Fatalf("offset after pwrite %d, want 10 (from the last write)", off)
	}
	mustWrite(a, "Q")
	if off, _ := unix.Seek(a, 0, 1); off != 13 {
		t.Fatalf("offset after append %d, want 13", off)
	}
	// Creating with O_APPEND.
	q := join(dir, "g")
	c := open(t, q, unix.O_CREAT|unix.O_WRONLY|unix.O_APPEND, 0644)
	mustWrite(c, "x")
	mustWrite(c, "y")
	wantContent(t, q, []byte("xy"))
}

func testOpenFlagsErrors(t *testing.T, dir string) {
	f := join(dir, "f")
	writeFile(t, f, []byte("x"), 0644)
	d := join(dir, "d")
	mkdir(t, d, 0755)
	_, err := unix.Open(join(dir, "missing"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.ENOENT, "open missing file")
	_, err = unix.Open(join(dir, "nodir", "x"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.ENOENT, "O_CREAT in a missing directory")
	_, err = unix.Open(join(f, "x"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.ENOTDIR, "O_CREAT under a regular file")
	_, err = unix.Open(f, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.ENOTDIR, "O_DIRECTORY on a regular file")
	_, err = unix.Open(f+"/", unix.O_RDONLY|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.ENOTDIR, "trailing slash on a regular file")
	_, err = unix.Open(d, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.EISDIR, "open directory for writing")
	_, err = unix.Open(d, unix.O_RDWR|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.EISDIR, "open directory O_RDWR")
	_, err = unix.Open(d, unix.O_CREAT|unix.O_RDONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.EISDIR, "O_CREAT on an existing directory")
	// Linux >= 6.4 rejects O_CREAT|O_DIRECTORY with EINVAL.
	_, err = unix.Open(join(dir, "new"), unix.O_CREAT|unix.O_DIRECTORY|unix.O_RDONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.EINVAL, "O_CREAT|O_DIRECTORY")
	fd := open(t, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	if st := fstat(t, fd); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("O_DIRECTORY opened mode %o", st.Mode)
	}
	_, err = unix.Read(fd, make([]byte, 10))
	wantErr(t, err, unix.EISDIR, "read(2) on a directory")
	_, err = unix.Open(join(dir, "x")+"/", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.EISDIR, "O_CREAT with a trailing slash")
}

func testOpenCreateDangling(t *testing.T, dir string) {
	// O_CREAT without O_EXCL through a dangling symlink creates the target.
	ok(t, unix.Symlink("target", join(dir, "l")), "symlink")
	fd := open(t, join(dir, "l"), unix.O_CREAT|unix.O_WRONLY, 0644)
	pwrite(t, fd, []byte("via link"), 0)
	wantContent(t, join(dir, "target"), []byte("via link"))
	if st := lstat(t, join(dir, "l")); st.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatalf("link replaced: mode %o", st.Mode)
	}
	// With O_NOFOLLOW the same open fails with ELOOP.
	_, err := unix.Open(join(dir, "l"), unix.O_CREAT|unix.O_WRONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.ELOOP, "O_CREAT|O_NOFOLLOW on a symlink")
}

func testPreadPwrite(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	want := make([]byte, 0)
	put := func(off int, data []byte) {
		pwrite(t, fd, data, int64(off))
		if end := off + len(data); end > len(want) {
			want = append(want, make([]byte, end-len(want))...)
		}
		copy(want[off:], data)
	}
	put(0, pattern(3, 4096))
	put(4095, pattern(4, 3))       // across a page boundary
	put(100, pattern(5, 10))       // inside
	put(8192+17, pattern(6, 5000)) // leaves a gap of zeros
	put(1, []byte{})               // empty write changes nothing
	if st := fstat(t, fd); st.Size != int64(len(want)) {
		t.Fatalf("size %d, want %d", st.Size, len(want))
	}
	// pread/pwrite do not move the file offset.
	if off, err := unix.Seek(fd, 0, 1); err != nil || off != 0 {
		t.Fatalf("file offset %d (%v) after pwrite, want 0", off, err)
	}
	for _, r := range [][2]int{{0, len(want)}, {4090, 20}, {5000, 4000}, {len(want) - 3, 10}, {len(want), 10}, {len(want) + 100, 10}} {
		got := pread(t, fd, r[1], int64(r[0]))
		lo, hi := min(r[0], len(want)), min(r[0]+r[1], len(want))
		if !bytes.Equal(got, want[lo:hi]) {
			t.Fatalf("pread(%d, %d): %s", r[0], r[1], describeDiff(got, want[lo:hi]))
		}
	}
	_, err := unix.Pread(fd, make([]byte, 1), -1)
	wantErr(t, err, unix.EINVAL, "pread at negative offset")
	_, err = unix.Pwrite(fd, []byte("x"), -1)
	wantErr(t, err, unix.EINVAL, "pwrite at negative offset")
}

func testWritePastEOFHole(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	pwrite(t, fd, []byte("head"), 0)
	_, err := unix.Seek(fd, 70000, 0)
	ok(t, err, "seek past EOF")
	if st := fstat(t, fd); st.Size != 4 {
		t.Fatalf("seek past EOF changed size to %d", st.Size)
	}
	_, err = unix.Write(fd, []byte("tail"))
	ok(t, err, "write past EOF")
	want := make([]byte, 70004)
	copy(want, "head")
	copy(want[70000:], "tail")
	wantContent(t, p, want)
}

func testSparseFile(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	const off = 8 << 20
	pwrite(t, fd, []byte("end"), off)
	ok(t, unix.Fsync(fd), "fsync")
	st := fstat(t, fd)
	if st.Size != off+3 {
		t.Fatalf("size %d", st.Size)
	}
	// A hole of 8 MiB must not be allocated.
	if st.Blocks*512 >= off/2 {
		t.Fatalf("sparse file of size %d uses %d blocks of 512 B: hole allocated", st.Size, st.Blocks)
	}
	got := pread(t, fd, 1<<20, 3<<20)
	if len(got) != 1<<20 || !isZero(got) {
		t.Fatalf("hole does not read as zeros")
	}
	if got := pread(t, fd, 10, off-2); !bytes.Equal(got, []byte{0, 0, 'e', 'n', 'd'}) {
		t.Fatalf("around the data: %q", got)
	}
}

func testLargeOffset(t *testing.T, dir string) {
	// 256 MiB: must work on any file system that holds a few sparse MiB.
	// Past 4 GiB (offsets that overflow 32 bits): ext4 allows it; a file
	// system with a smaller maximum file size must refuse with EFBIG and
	// change nothing.
	for i, off := range []int64{256<<20 + 12345, 5<<30 + 12345} {
		p := join(dir, "f"+itoa(i))
		fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
		data := pattern(7, 9000)
		n, err := unix.Pwrite(fd, data, off)
		if errors.Is(err, unix.EFBIG) && off > 1<<32 {
			if st := fstat(t, fd); st.Size != 0 {
				t.Fatalf("EFBIG write at %d changed size to %d", off, st.Size)
			}
			t.Logf("pwrite at %d: EFBIG (maximum file size below 5 GiB)", off)
			continue
		}
		ok(t, err, "pwrite at "+formatInt(off))
		if n != len(data) {
			t.Fatalf("pwrite at %d: %d bytes", off, n)
		}
		if st := fstat(t, fd); st.Size != off+9000 {
			t.Fatalf("size %d, want %d", st.Size, off+9000)
		}
		if got := pread(t, fd, 9000, off); !bytes.Equal(got, data) {
			t.Fatalf("read back at %d: %s", off, describeDiff(got, data))
		}
		if got := pread(t, fd, 4096, off/2); len(got) != 4096 || !isZero(got) {
			t.Fatalf("hole at %d not zero", off/2)
		}
		// Data must not alias a lower offset (offset truncated somewhere).
		if got := pread(t, fd, 9000, off%(1<<20)); !isZero(got) {
			t.Fatalf("data written at %d visible at %d", off, off%(1<<20))
		}
		end, err := unix.Seek(fd, 0, 2)
		ok(t, err, "SEEK_END")
		if end != off+9000 {
			t.Fatalf("SEEK_END %d", end)
		}
		if st := fstat(t, fd); st.Blocks*512 > 1<<20 {
			t.Fatalf("sparse file at %d uses %d blocks", off, st.Blocks)
		}
	}
}

// testMaxFileSize finds the file system's maximum file size M (the largest
// size ftruncate accepts; one more is EFBIG) and uses the file's last bytes:
// they can be written and read back, the rest of the file stays a hole, a
// write at M is EFBIG and one across M is short.
func testMaxFileSize(t *testing.T, dir string) {
	p := join(dir, "max")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	maxSize := MaxFileSize(t, fd)
	if maxSize < 1<<20 {
		t.Fatalf("maximum file size %d", maxSize)
	}
	t.Logf("maximum file size %d", maxSize)
	if n, err := unix.Pwrite(fd, []byte("xyz"), maxSize-3); err != nil || n != 3 {
		t.Fatalf("pwrite of the last 3 bytes: %d, %v", n, err)
	}
	check := func(when string) {
		t.Helper()
		if st := fstat(t, fd); st.Size != maxSize || st.Blocks*512 > 1<<20 {
			t.Fatalf("%s: size %d blocks %d, want size %d and a sparse file", when, st.Size, st.Blocks, maxSize)
		}
		if got := pread(t, fd, 8192, maxSize-8192); len(got) != 8192 || !isZero(got[:8189]) || string(got[8189:]) != "xyz" {
			t.Fatalf("%s: the last 8 KiB read back as %d bytes ending in %q", when, len(got), got[max(0, len(got)-3):])
		}
		if got := pread(t, fd, 4096, maxSize/2); len(got) != 4096 || !isZero(got) {
			t.Fatalf("%s: the hole in the middle is not zero", when)
		}
	}
	check("after the write")
	// At the largest loff_t (tmpfs) the VFS refuses the end offset as
	// EINVAL before any file system limit applies.
	beyond, last := unix.EFBIG, "xab"
	if maxSize == 1<<63-1 {
		beyond, last = unix.EINVAL, "xyz"
	}
	_, err := unix.Pwrite(fd, []byte("!"), maxSize)
	wantErr(t, err, beyond, "pwrite at the maximum size")
	n, err := unix.Pwrite(fd, []byte("abcd"), maxSize-2)
	if beyond == unix.EINVAL {
		wantErr(t, err, unix.EINVAL, "pwrite past the largest offset")
	} else if err != nil || n != 2 {
		t.Fatalf("pwrite across the maximum size: %d, %v (want a short write of 2)", n, err)
	}
	if got := pread(t, fd, 3, maxSize-3); string(got) != last {
		t.Fatalf("after writing across the end: %q, want %q", got, last)
	}
	ok(t, unix.Fsync(fd), "fsync")
	ok(t, unix.Close(fd), "close")
	fd = open(t, p, unix.O_RDWR, 0)
	defer unix.Close(fd)
	if got := pread(t, fd, 3, maxSize-3); string(got) != last {
		t.Fatalf("after reopening: %q, want %q", got, last)
	}
	ok(t, unix.Ftruncate(fd, maxSize-2), "ftruncate below the end")
	if got := pread(t, fd, 4, maxSize-4); string(got) != "\x00x" {
		t.Fatalf("after truncating off the last 2 bytes: %q", got)
	}
}

// MaxFileSize returns the largest size ftruncate gives the open file fd
// (one byte more is EFBIG), and leaves the file empty.
func MaxFileSize(t testing.TB, fd int) int64 {
	t.Helper()
	lo, hi := int64(0), int64(1<<63-1)
	for lo < hi {
		mid := int64((uint64(lo) + uint64(hi) + 1) / 2)
		switch err := unix.Ftruncate(fd, mid); {
		case err == nil:
			lo = mid
		case errors.Is(err, unix.EFBIG):
			hi = mid - 1
		default:
			t.Fatalf("ftruncate to %d: %v", mid, err)
		}
	}
	ok(t, unix.Ftruncate(fd, 0), "ftruncate to 0")
	return lo
}

func testUnlinkOpenFile(t *testing.T, dir string) {
	p := join(dir, "f")
	data := pattern(8, 20000)
	writeFile(t, p, data, 0644)
	fd := open(t, p, unix.O_RDWR, 0)
	ok(t, unix.Unlink(p), "unlink")
	var st unix.Stat_t
	wantErr(t, unix.Lstat(p, &st), unix.ENOENT, "lstat after unlink")
	if st := fstat(t, fd); st.Nlink != 0 {
		t.Fatalf("nlink of unlinked open file %d", st.Nlink)
	}
	if got := pread(t, fd, len(data)+10, 0); !bytes.Equal(got, data) {
		t.Fatalf("data of unlinked open file: %s", describeDiff(got, data))
	}
	// Still writable, and the name can be reused for a new file.
	pwrite(t, fd, []byte("more"), int64(len(data)))
	writeFile(t, p, []byte("new"), 0644)
	if got := pread(t, fd, 4, int64(len(data))); string(got) != "more" {
		t.Fatalf("write to unlinked file: %q", got)
	}
	wantContent(t, p, []byte("new"))
	ok(t, unix.Fsync(fd), "fsync unlinked file")
	ents, err := readNames(dir)
	ok(t, err, "readdir")
	if len(ents) != 1 || ents[0] != "f" {
		t.Fatalf("directory has %q, want [f]", ents)
	}
}

func testReadWriteLarge(t *testing.T, dir string) {
	// One write and read bigger than the FUSE max_write and page cache chunks,
	// crossing 1 MiB.
	p := join(dir, "f")
	data := pattern(9, 3<<20+777)
	writeFile(t, p, data, 0644)
	wantContent(t, p, data)
	fd := open(t, p, unix.O_RDWR, 0)
	pwrite(t, fd, pattern(10, 300000), 1<<20-1000)
	copy(data[1<<20-1000:], pattern(10, 300000))
	wantContent(t, p, data)
}

func testSharedOffsetDup(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	fd2, err := unix.FcntlInt(uintptr(fd), unix.F_DUPFD_CLOEXEC, 0) // dup(2), close-on-exec
	ok(t, err, "dup")
	defer unix.Close(fd2)
	_, err = unix.Write(fd, []byte("ab"))
	ok(t, err, "write")
	_, err = unix.Write(fd2, []byte("cd"))
	ok(t, err, "write dup")
	wantContent(t, p, []byte("abcd"))
}

func testFsync(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	pwrite(t, fd, pattern(11, 100000), 0)
	ok(t, unix.Fsync(fd), "fsync")
	ok(t, unix.Fdatasync(fd), "fdatasync")
	ok(t, unix.SyncFileRange(fd, 0, 0, unix.SYNC_FILE_RANGE_WAIT_BEFORE|unix.SYNC_FILE_RANGE_WRITE|unix.SYNC_FILE_RANGE_WAIT_AFTER), "sync_file_range")
	ro := open(t, p, unix.O_RDONLY, 0)
	ok(t, unix.Fsync(ro), "fsync on read-only fd")
	ok(t, unix.Syncfs(fd), "syncfs")
}

func testFsyncDir(t *testing.T, dir string) {
	mkdir(t, join(dir, "d"), 0755)
	writeFile(t, join(dir, "d", "f"), []byte("x"), 0644)
	fd := open(t, join(dir, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	ok(t, unix.Fsync(fd), "fsync directory")
	ok(t, unix.Fdatasync(fd), "fdatasync directory")
}

func testReadOnlyWriteOnlyFd(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, []byte("data"), 0644)
	ro := open(t, p, unix.O_RDONLY, 0)
	_, err := unix.Write(ro, []byte("x"))
	wantErr(t, err, unix.EBADF, "write on O_RDONLY fd")
	wo := open(t, p, unix.O_WRONLY, 0)
	_, err = unix.Read(wo, make([]byte, 4))
	wantErr(t, err, unix.EBADF, "read on O_WRONLY fd")
	wantErr(t, unix.Ftruncate(ro, 0), unix.EINVAL, "ftruncate on O_RDONLY fd")
	wantContent(t, p, []byte("data"))
}
