package posixtest

import (
	"bytes"
	"os"
	"strconv"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Hard links and symbolic links.
var linkTests = map[string]Test{
	"HardLink":         testHardLink,
	"HardLinkErrors":   testHardLinkErrors,
	"HardLinkSymlink":  testHardLinkSymlink,
	"HardLinkManyDirs": testHardLinkManyDirs,
	"Tmpfile":          testTmpfile,
	"TmpfileAppend":    testTmpfileAppend,
}

var symlinkTests = map[string]Test{
	"Symlink":         testSymlink,
	"SymlinkDangling": testSymlinkDangling,
	"SymlinkLoop":     testSymlinkLoop,
	"SymlinkLength":   testSymlinkLength,
	"SymlinkRelative": testSymlinkRelative,
}

func testHardLink(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	writeFile(t, a, []byte("shared"), 0644)
	ok(t, unix.Link(a, b), "link")
	sa, sb := lstat(t, a), lstat(t, b)
	if sa.Ino != sb.Ino {
		t.Fatalf("link has ino %d, original %d", sb.Ino, sa.Ino)
	}
	if sa.Nlink != 2 || sb.Nlink != 2 {
		t.Fatalf("nlink %d/%d, want 2", sa.Nlink, sb.Nlink)
	}
	// A write through one name shows through the other.
	fd := open(t, b, unix.O_WRONLY, 0)
	pwrite(t, fd, []byte("SH"), 0)
	wantContent(t, a, []byte("SHared"))
	// Attributes are shared.
	ok(t, unix.Chmod(a, 0600), "chmod")
	if st := lstat(t, b); st.Mode&07777 != 0600 {
		t.Fatalf("mode via other link %o", st.Mode&07777)
	}
	mkdir(t, join(dir, "sub"), 0755)
	c := join(dir, "sub", "c")
	ok(t, unix.Link(b, c), "link into subdir")
	if st := lstat(t, a); st.Nlink != 3 {
		t.Fatalf("nlink %d, want 3", st.Nlink)
	}
	ok(t, unix.Unlink(a), "unlink a")
	if st := lstat(t, c); st.Nlink != 2 {
		t.Fatalf("after unlink nlink %d, want 2", st.Nlink)
	}
	wantContent(t, c, []byte("SHared"))
	ok(t, unix.Unlink(b), "unlink b")
	if st := lstat(t, c); st.Nlink != 1 || st.Ino != sa.Ino {
		t.Fatalf("last link: nlink %d ino %d", st.Nlink, st.Ino)
	}
	wantContent(t, c, []byte("SHared"))
}

func testHardLinkErrors(t *testing.T, dir string) {
	f := join(dir, "f")
	writeFile(t, f, nil, 0644)
	d := join(dir, "d")
	mkdir(t, d, 0755)
	wantErr(t, unix.Link(d, join(dir, "d2")), unix.EPERM, "link a directory")
	wantErr(t, unix.Link(join(dir, "missing"), join(dir, "x")), unix.ENOENT, "link missing source")
	wantErr(t, unix.Link(f, f), unix.EEXIST, "link onto itself")
	wantErr(t, unix.Link(f, d), unix.EEXIST, "link onto a directory")
	wantErr(t, unix.Link(f, join(dir, "missing", "x")), unix.ENOENT, "link into a missing dir")
	wantErr(t, unix.Link(f, join(f, "x")), unix.ENOTDIR, "link under a file")
	if st := lstat(t, f); st.Nlink != 1 {
		t.Fatalf("failed links changed nlink to %d", st.Nlink)
	}
}

func testHardLinkSymlink(t *testing.T, dir string) {
	// link(2) does not follow symlinks on Linux: the new name is another
	// link to the symlink itself.
	writeFile(t, join(dir, "f"), nil, 0644)
	ok(t, unix.Symlink("f", join(dir, "l")), "symlink")
	ok(t, unix.Link(join(dir, "l"), join(dir, "l2")), "link a symlink")
	s1, s2 := lstat(t, join(dir, "l")), lstat(t, join(dir, "l2"))
	if s2.Mode&unix.S_IFMT != unix.S_IFLNK || s1.Ino != s2.Ino || s2.Nlink != 2 {
		t.Fatalf("link of symlink: mode %o ino %d/%d nlink %d", s2.Mode, s1.Ino, s2.Ino, s2.Nlink)
	}
	if st := lstat(t, join(dir, "f")); st.Nlink != 1 {
		t.Fatalf("target nlink %d", st.Nlink)
	}
	// linkat with AT_SYMLINK_FOLLOW links the target instead.
	ok(t, unix.Linkat(unix.AT_FDCWD, join(dir, "l"), unix.AT_FDCWD, join(dir, "f2"), unix.AT_SYMLINK_FOLLOW), "linkat follow")
	if st := lstat(t, join(dir, "f")); st.Nlink != 2 {
		t.Fatalf("AT_SYMLINK_FOLLOW: target nlink %d", st.Nlink)
	}
}

func testHardLinkManyDirs(t *testing.T, dir string) {
	f := join(dir, "f")
	writeFile(t, f, []byte("x"), 0644)
	const n = 50
	for i := 0; i < n; i++ {
		d := join(dir, "d"+itoa(i))
		mkdir(t, d, 0755)
		ok(t, unix.Link(f, join(d, "h")), "link")
	}
	if st := lstat(t, f); st.Nlink != n+1 {
		t.Fatalf("nlink %d, want %d", st.Nlink, n+1)
	}
	for i := 0; i < n; i += 2 {
		ok(t, unix.Unlink(join(dir, "d"+itoa(i), "h")), "unlink")
	}
	if st := lstat(t, f); st.Nlink != n/2+1 {
		t.Fatalf("nlink %d, want %d", st.Nlink, n/2+1)
	}
}

func testSymlink(t *testing.T, dir string) {
	f := join(dir, "f")
	writeFile(t, f, []byte("target data"), 0640)
	l := join(dir, "l")
	ok(t, unix.Symlink("f", l), "symlink")
	ls := lstat(t, l)
	if ls.Mode&unix.S_IFMT != unix.S_IFLNK {
		t.Fatalf("lstat mode %o", ls.Mode)
	}
	if ls.Mode&0777 != 0777 {
		t.Fatalf("symlink permissions %o, Linux uses 0777", ls.Mode&0777)
	}
	if ls.Size != 1 {
		t.Fatalf("symlink size %d, want len(target) = 1", ls.Size)
	}
	st, fs := stat(t, l), lstat(t, f)
	if st.Ino != fs.Ino || st.Mode != fs.Mode || st.Size != fs.Size {
		t.Fatalf("stat through link differs from target")
	}
	if st.Ino == ls.Ino {
		t.Fatalf("symlink and target share an inode")
	}
	buf := make([]byte, 100)
	n, err := unix.Readlink(l, buf)
	ok(t, err, "readlink")
	if string(buf[:n]) != "f" {
		t.Fatalf("readlink %q", buf[:n])
	}
	// A short buffer truncates silently.
	target := "some/long/target/path"
	ok(t, unix.Symlink(target, join(dir, "l2")), "symlink")
	n, err = unix.Readlink(join(dir, "l2"), buf[:4])
	ok(t, err, "readlink short buffer")
	if string(buf[:n]) != target[:4] {
		t.Fatalf("readlink with 4-byte buffer: %q", buf[:n])
	}
	wantContent(t, l, []byte("target data"))
	_, err = unix.Readlink(f, buf)
	wantErr(t, err, unix.EINVAL, "readlink a regular file")
	_, err = unix.Readlink(join(dir, "missing"), buf)
	wantErr(t, err, unix.ENOENT, "readlink missing")
	wantErr(t, unix.Symlink("x", l), unix.EEXIST, "symlink over existing")
	wantErr(t, unix.Symlink("", join(dir, "empty")), unix.ENOENT, "symlink with empty target")
	// O_NOFOLLOW on a symlink: ELOOP; O_PATH|O_NOFOLLOW opens the link.
	_, err = unix.Open(l, unix.O_RDONLY|unix.O_NOFOLLOW|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.ELOOP, "O_NOFOLLOW on symlink")
	fd := open(t, l, unix.O_PATH|unix.O_NOFOLLOW, 0)
	if st := fstat(t, fd); st.Ino != ls.Ino {
		t.Fatalf("O_PATH|O_NOFOLLOW opened ino %d, want the link %d", st.Ino, ls.Ino)
	}
	// A symlink to a directory works as a path component.
	mkdir(t, join(dir, "d"), 0755)
	ok(t, unix.Symlink("d", join(dir, "ld")), "symlink to dir")
	writeFile(t, join(dir, "ld", "inner"), []byte("in"), 0644)
	wantContent(t, join(dir, "d", "inner"), []byte("in"))
}

func testSymlinkDangling(t *testing.T, dir string) {
	l := join(dir, "l")
	ok(t, unix.Symlink("missing", l), "symlink")
	var st unix.Stat_t
	wantErr(t, unix.Stat(l, &st), unix.ENOENT, "stat dangling")
	if ls := lstat(t, l); ls.Mode&unix.S_IFMT != unix.S_IFLNK || ls.Size != 7 {
		t.Fatalf("lstat dangling: mode %o size %d", ls.Mode, ls.Size)
	}
	_, err := unix.Open(l, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.ENOENT, "open dangling")
	// Creating the target makes the link resolve.
	writeFile(t, join(dir, "missing"), []byte("now"), 0644)
	wantContent(t, l, []byte("now"))
}

func testSymlinkLoop(t *testing.T, dir string) {
	ok(t, unix.Symlink("b", join(dir, "a")), "symlink a")
	ok(t, unix.Symlink("a", join(dir, "b")), "symlink b")
	var st unix.Stat_t
	wantErr(t, unix.Stat(join(dir, "a"), &st), unix.ELOOP, "stat loop")
	_, err := unix.Open(join(dir, "a"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
	wantErr(t, err, unix.ELOOP, "open loop")
	ok(t, unix.Symlink("self", join(dir, "self")), "symlink self")
	wantErr(t, unix.Stat(join(dir, "self"), &st), unix.ELOOP, "stat self loop")
	// A chain of 40 links resolves; 41 is too many (MAXSYMLINKS = 40).
	writeFile(t, join(dir, "end"), nil, 0644)
	prev := "end"
	for i := 1; i <= 41; i++ {
		name := "c" + itoa(i)
		ok(t, unix.Symlink(prev, join(dir, name)), "symlink chain")
		prev = name
	}
	ok(t, unix.Stat(join(dir, "c40"), &st), "stat through 40 links")
	wantErr(t, unix.Stat(join(dir, "c41"), &st), unix.ELOOP, "stat through 41 links")
}

func testSymlinkLength(t *testing.T, dir string) {
	// Targets up to PATH_MAX-1 bytes are stored whole; PATH_MAX is refused.
	for _, n := range []int{1, 59, 60, 61, 255, 256, 1000, 4095} {
		target := strings.Repeat("t", n)
		l := join(dir, "l"+itoa(n))
		ok(t, unix.Symlink(target, l), "symlink of length "+itoa(n))
		if st := lstat(t, l); st.Size != int64(n) {
			t.Fatalf("symlink of length %d: size %d", n, st.Size)
		}
		buf := make([]byte, 5000)
		m, err := unix.Readlink(l, buf)
		ok(t, err, "readlink")
		if string(buf[:m]) != target {
			t.Fatalf("readlink of length %d returned %d bytes", n, m)
		}
	}
	wantErr(t, unix.Symlink(strings.Repeat("t", 4096), join(dir, "toolong")), unix.ENAMETOOLONG, "symlink target of 4096 bytes")
}

func testSymlinkRelative(t *testing.T, dir string) {
	mkdir(t, join(dir, "a"), 0755)
	mkdir(t, join(dir, "a", "b"), 0755)
	writeFile(t, join(dir, "top"), []byte("top"), 0644)
	// Relative targets resolve from the link's directory.
	ok(t, unix.Symlink("../../top", join(dir, "a", "b", "up")), "symlink")
	wantContent(t, join(dir, "a", "b", "up"), []byte("top"))
	// Absolute targets resolve from /.
	ok(t, unix.Symlink(join(dir, "top"), join(dir, "abs")), "symlink abs")
	wantContent(t, join(dir, "abs"), []byte("top"))
	// A trailing slash forces following: lstat("link/") is the target dir.
	ok(t, unix.Symlink("a", join(dir, "la")), "symlink to dir")
	if st := lstat(t, join(dir, "la")+"/"); st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("lstat link/ mode %o, want directory", st.Mode)
	}
}

// testTmpfile: open(2) with O_TMPFILE makes an unnamed file with no links
// that no directory lists; linkat(2) through /proc/self/fd gives it a name
// with its data, unless it was opened with O_EXCL (ENOENT); O_TMPFILE on a
// file is ENOTDIR.
func testTmpfile(t *testing.T, dir string) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o640)
	if err == unix.EOPNOTSUPP || err == unix.EISDIR {
		t.Skipf("O_TMPFILE: %v", err)
	}
	ok(t, err, "open O_TMPFILE")
	defer unix.Close(fd)
	data := bytes.Repeat([]byte("tmpfile "), 300000) // 2.4 MB: crosses Conquest's threshold
	pwrite(t, fd, data, 0)
	st := fstat(t, fd)
	if st.Nlink != 0 || st.Mode&unix.S_IFMT != unix.S_IFREG || st.Size != int64(len(data)) {
		t.Fatalf("tmpfile: nlink %d, mode %o, size %d", st.Nlink, st.Mode, st.Size)
	}
	if names, err := os.ReadDir(dir); err != nil || len(names) != 0 {
		t.Fatalf("directory lists %v (%v) with only a tmpfile in it", names, err)
	}
	proc := "/proc/self/fd/" + strconv.Itoa(fd)
	ok(t, unix.Linkat(unix.AT_FDCWD, proc, unix.AT_FDCWD, join(dir, "named"), unix.AT_SYMLINK_FOLLOW), "linkat tmpfile")
	if st := fstat(t, fd); st.Nlink != 1 {
		t.Fatalf("nlink %d after linkat", st.Nlink)
	}
	if ls := lstat(t, join(dir, "named")); ls.Ino != st.Ino {
		t.Fatalf("named has ino %d, the tmpfile %d", ls.Ino, st.Ino)
	}
	wantContent(t, join(dir, "named"), data)

	excl, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_EXCL|unix.O_CLOEXEC, 0o600)
	ok(t, err, "open O_TMPFILE|O_EXCL")
	defer unix.Close(excl)
	pwrite(t, excl, []byte("never named"), 0)
	wantErr(t, unix.Linkat(unix.AT_FDCWD, "/proc/self/fd/"+strconv.Itoa(excl), unix.AT_FDCWD, join(dir, "excl"),
		unix.AT_SYMLINK_FOLLOW), unix.ENOENT, "linkat O_EXCL tmpfile")

	// One that is closed without a name disappears.
	gone, err := unix.Open(dir, unix.O_TMPFILE|unix.O_WRONLY|unix.O_CLOEXEC, 0o600)
	ok(t, err, "open O_TMPFILE")
	pwrite(t, gone, data, 0)
	ok(t, unix.Close(gone), "close")
	if names, err := os.ReadDir(dir); err != nil || len(names) != 1 {
		t.Fatalf("directory lists %v (%v), want only named", names, err)
	}

	_, err = unix.Open(join(dir, "named"), unix.O_TMPFILE|unix.O_RDWR|unix.O_CLOEXEC, 0o600)
	wantErr(t, err, unix.ENOTDIR, "O_TMPFILE on a file")
}

// testTmpfileAppend: on an O_TMPFILE opened O_APPEND, each write(2) goes to
// the end, and data written back through the descriptor later (mmap
// writes, cached pages) lands at its own offset, as on any O_APPEND file.
// The file's pages are dropped (FADV_DONTNEED) before each check, so the
// data is read back from the file system.
func testTmpfileAppend(t *testing.T, dir string) {
	fd, err := unix.Open(dir, unix.O_TMPFILE|unix.O_RDWR|unix.O_APPEND|unix.O_CLOEXEC, 0o640)
	if err == unix.EOPNOTSUPP || err == unix.EISDIR {
		t.Skipf("O_TMPFILE: %v", err)
	}
	ok(t, err, "open O_TMPFILE|O_APPEND")
	defer unix.Close(fd)
	for _, s := range []string{"abc", "def"} {
		_, err := unix.Write(fd, []byte(s))
		ok(t, err, "write "+s)
		ok(t, unix.Fsync(fd), "fsync")
	}
	ok(t, unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED), "fadvise DONTNEED")
	if got := pread(t, fd, 100, 0); string(got) != "abcdef" {
		t.Fatalf("two appends read back %q, want \"abcdef\"", got)
	}
	const size = 8192
	ok(t, unix.Ftruncate(fd, size), "ftruncate")
	m, err := unix.Mmap(fd, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
	ok(t, err, "mmap")
	Prefault(m, true)
	copy(m, "MMAP")
	ok(t, unix.Msync(m, unix.MS_SYNC), "msync")
	ok(t, unix.Munmap(m), "munmap")
	ok(t, unix.Fsync(fd), "fsync")
	ok(t, unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED), "fadvise DONTNEED")
	want := make([]byte, size)
	copy(want, "MMAPef")
	if st := fstat(t, fd); st.Size != size {
		t.Errorf("size %d after an mmap write inside the file, want %d", st.Size, size)
	}
	if got := pread(t, fd, 2*size, 0); !bytes.Equal(got, want) {
		t.Errorf("after an mmap write at 0: %s", describeDiff(got, want))
	}
}
