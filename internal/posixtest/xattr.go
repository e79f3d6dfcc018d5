package posixtest

import (
	"bytes"
	"errors"
	"sort"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Extended attributes.
var xattrTests = map[string]Test{
	"XattrBasic":      testXattrBasic,
	"XattrFlags":      testXattrFlags,
	"XattrNamespaces": testXattrNamespaces,
	"XattrList":       testXattrList,
	"XattrManyNames":  testXattrManyNames,
	"XattrSizes":      testXattrSizes,
	"XattrSymlink":    testXattrSymlink,
	"XattrDirAndFd":   testXattrDirAndFd,
	"XattrSurvive":    testXattrSurvive,
}

// needXattr skips the test if user xattrs are not supported at all.
func needXattr(t *testing.T, p string) {
	t.Helper()
	err := unix.Setxattr(p, "user.probe", []byte("1"), 0)
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skip("user xattrs not supported")
	}
	ok(t, err, "setxattr user.probe")
	ok(t, unix.Removexattr(p, "user.probe"), "removexattr user.probe")
}

func getxattr(t *testing.T, p, name string) ([]byte, error) {
	t.Helper()
	n, err := unix.Getxattr(p, name, nil)
	if err != nil {
		return nil, err
	}
	buf := make([]byte, n+1) // one spare byte: the size must not grow
	m, err := unix.Getxattr(p, name, buf)
	if err != nil {
		return nil, err
	}
	if m != n {
		t.Fatalf("getxattr %s: size query said %d, read %d", name, n, m)
	}
	return buf[:m], nil
}

func listxattr(t *testing.T, p string) []string {
	t.Helper()
	n, err := unix.Listxattr(p, nil)
	ok(t, err, "listxattr size")
	buf := make([]byte, n)
	m, err := unix.Listxattr(p, buf)
	ok(t, err, "listxattr")
	var names []string
	for _, s := range strings.Split(string(buf[:m]), "\x00") {
		if s != "" && !strings.HasPrefix(s, "security.selinux") {
			names = append(names, s)
		}
	}
	sort.Strings(names)
	return names
}

func testXattrBasic(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, []byte("data"), 0644)
	needXattr(t, p)
	_, err := getxattr(t, p, "user.missing")
	wantErr(t, err, unix.ENODATA, "getxattr missing")
	ok(t, unix.Setxattr(p, "user.a", []byte("value a"), 0), "setxattr")
	if v, err := getxattr(t, p, "user.a"); err != nil || string(v) != "value a" {
		t.Fatalf("getxattr: %q %v", v, err)
	}
	// Overwrite with a shorter and then a longer value.
	ok(t, unix.Setxattr(p, "user.a", []byte("x"), 0), "setxattr shorter")
	if v, _ := getxattr(t, p, "user.a"); string(v) != "x" {
		t.Fatalf("after shorter value: %q", v)
	}
	long := pattern(30, 3000)
	ok(t, unix.Setxattr(p, "user.a", long, 0), "setxattr longer")
	if v, _ := getxattr(t, p, "user.a"); !bytes.Equal(v, long) {
		t.Fatalf("after longer value: %s", describeDiff(v, long))
	}
	// Empty values exist and are distinct from missing ones.
	ok(t, unix.Setxattr(p, "user.empty", nil, 0), "setxattr empty")
	if v, err := getxattr(t, p, "user.empty"); err != nil || len(v) != 0 {
		t.Fatalf("empty value: %q %v", v, err)
	}
	// ERANGE when the buffer is too small.
	_, err = unix.Getxattr(p, "user.a", make([]byte, 10))
	wantErr(t, err, unix.ERANGE, "getxattr small buffer")
	ok(t, unix.Removexattr(p, "user.a"), "removexattr")
	_, err = getxattr(t, p, "user.a")
	wantErr(t, err, unix.ENODATA, "getxattr after remove")
	wantErr(t, unix.Removexattr(p, "user.a"), unix.ENODATA, "removexattr missing")
	// File data is untouched.
	wantContent(t, p, []byte("data"))
}

func testXattrFlags(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	needXattr(t, p)
	wantErr(t, unix.Setxattr(p, "user.k", []byte("v"), unix.XATTR_REPLACE), unix.ENODATA, "XATTR_REPLACE on missing")
	ok(t, unix.Setxattr(p, "user.k", []byte("v1"), unix.XATTR_CREATE), "XATTR_CREATE new")
	wantErr(t, unix.Setxattr(p, "user.k", []byte("v2"), unix.XATTR_CREATE), unix.EEXIST, "XATTR_CREATE on existing")
	if v, _ := getxattr(t, p, "user.k"); string(v) != "v1" {
		t.Fatalf("failed XATTR_CREATE changed value to %q", v)
	}
	ok(t, unix.Setxattr(p, "user.k", []byte("v3"), unix.XATTR_REPLACE), "XATTR_REPLACE existing")
	if v, _ := getxattr(t, p, "user.k"); string(v) != "v3" {
		t.Fatalf("XATTR_REPLACE value %q", v)
	}
	wantErr(t, unix.Setxattr(p, "user.k", []byte("v"), unix.XATTR_CREATE|unix.XATTR_REPLACE|4), unix.EINVAL, "unknown flag")
}

func testXattrNamespaces(t *testing.T, dir string) {
	needRoot(t)
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	needXattr(t, p)
	for _, name := range []string{"user.u", "trusted.t", "security.s"} {
		ok(t, unix.Setxattr(p, name, []byte("in "+name), 0), "setxattr "+name)
		if v, err := getxattr(t, p, name); err != nil || string(v) != "in "+name {
			t.Fatalf("getxattr %s: %q %v", name, v, err)
		}
	}
	got := listxattr(t, p)
	want := []string{"security.s", "trusted.t", "user.u"}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listxattr %q, want %q", got, want)
	}
	// An unknown namespace or a bare prefix is refused.
	wantErr(t, unix.Setxattr(p, "bogus.x", []byte("v"), 0), unix.EOPNOTSUPP, "unknown namespace")
	wantErrIn(t, unix.Setxattr(p, "user.", []byte("v"), 0), "empty name after prefix", unix.EINVAL, unix.EOPNOTSUPP)
	for _, name := range want {
		ok(t, unix.Removexattr(p, name), "removexattr "+name)
	}
	if got := listxattr(t, p); len(got) != 0 {
		t.Fatalf("after removing all: %q", got)
	}
}

func testXattrList(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	needXattr(t, p)
	if got := listxattr(t, p); len(got) != 0 {
		t.Fatalf("new file lists %q", got)
	}
	var want []string
	for i := 0; i < 20; i++ {
		name := "user.attr" + itoa(i)
		ok(t, unix.Setxattr(p, name, []byte(itoa(i)), 0), "setxattr")
		want = append(want, name)
	}
	sort.Strings(want)
	if got := listxattr(t, p); strings.Join(got, ",") != strings.Join(want, ",") {
		t.Fatalf("listxattr %q", got)
	}
	n, err := unix.Listxattr(p, nil)
	ok(t, err, "listxattr size")
	_, err = unix.Listxattr(p, make([]byte, n-1))
	wantErr(t, err, unix.ERANGE, "listxattr small buffer")
	ok(t, unix.Removexattr(p, "user.attr7"), "removexattr")
	if got := listxattr(t, p); len(got) != 19 {
		t.Fatalf("after remove: %d names", len(got))
	}
}

func testXattrSizes(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	needXattr(t, p)
	// Names up to 255 bytes (XATTR_NAME_MAX) are allowed; longer is ERANGE.
	long := "user." + strings.Repeat("n", 250)
	ok(t, unix.Setxattr(p, long, []byte("v"), 0), "255-byte name")
	if v, _ := getxattr(t, p, long); string(v) != "v" {
		t.Fatalf("long name value %q", v)
	}
	wantErr(t, unix.Setxattr(p, long+"n", []byte("v"), 0), unix.ERANGE, "256-byte name")
	// A value of 64 KiB + 1 is too big for the VFS.
	wantErr(t, unix.Setxattr(p, "user.big", make([]byte, 65537), 0), unix.E2BIG, "value over 64 KiB")
	// Values of a few KiB (fitting ext4's inode+block) work.
	v := pattern(31, 2000)
	ok(t, unix.Setxattr(p, "user.mid", v, 0), "2000-byte value")
	if got, _ := getxattr(t, p, "user.mid"); !bytes.Equal(got, v) {
		t.Fatalf("2000-byte value: %s", describeDiff(got, v))
	}
	// Binary values with NULs survive.
	bin := []byte{0, 1, 0, 255, 0}
	ok(t, unix.Setxattr(p, "user.bin", bin, 0), "binary value")
	if got, _ := getxattr(t, p, "user.bin"); !bytes.Equal(got, bin) {
		t.Fatalf("binary value %v", got)
	}
}

func testXattrSymlink(t *testing.T, dir string) {
	writeFile(t, join(dir, "f"), nil, 0644)
	needXattr(t, join(dir, "f"))
	l := join(dir, "l")
	ok(t, unix.Symlink("f", l), "symlink")
	// user.* is only for regular files and directories.
	wantErr(t, unix.Lsetxattr(l, "user.x", []byte("v"), 0), unix.EPERM, "user xattr on a symlink")
	_, err := unix.Lgetxattr(l, "user.x", make([]byte, 10))
	wantErr(t, err, unix.ENODATA, "get user xattr of a symlink")
	// Through the link (following) it lands on the target.
	ok(t, unix.Setxattr(l, "user.x", []byte("v"), 0), "setxattr through link")
	if v, _ := getxattr(t, join(dir, "f"), "user.x"); string(v) != "v" {
		t.Fatalf("target value %q", v)
	}
	if unix.Geteuid() == 0 {
		ok(t, unix.Lsetxattr(l, "trusted.x", []byte("on link"), 0), "trusted xattr on a symlink")
		buf := make([]byte, 64)
		n, err := unix.Lgetxattr(l, "trusted.x", buf)
		ok(t, err, "lgetxattr")
		if string(buf[:n]) != "on link" {
			t.Fatalf("link xattr %q", buf[:n])
		}
	}
	ok(t, unix.Mkfifo(join(dir, "fifo"), 0644), "mkfifo")
	wantErr(t, unix.Setxattr(join(dir, "fifo"), "user.x", []byte("v"), 0), unix.EPERM, "user xattr on a fifo")
}

func testXattrDirAndFd(t *testing.T, dir string) {
	d := join(dir, "d")
	mkdir(t, d, 0755)
	needXattr(t, d)
	ok(t, unix.Setxattr(d, "user.dir", []byte("on dir"), 0), "setxattr dir")
	if v, _ := getxattr(t, d, "user.dir"); string(v) != "on dir" {
		t.Fatalf("dir value %q", v)
	}
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	ok(t, unix.Fsetxattr(fd, "user.fd", []byte("via fd"), 0), "fsetxattr")
	buf := make([]byte, 64)
	n, err := unix.Fgetxattr(fd, "user.fd", buf)
	ok(t, err, "fgetxattr")
	if string(buf[:n]) != "via fd" {
		t.Fatalf("fgetxattr %q", buf[:n])
	}
	n, err = unix.Flistxattr(fd, buf)
	ok(t, err, "flistxattr")
	if string(buf[:n]) != "user.fd\x00" {
		t.Fatalf("flistxattr %q", buf[:n])
	}
	ok(t, unix.Fremovexattr(fd, "user.fd"), "fremovexattr")
	// Attributes belong to the inode: visible through a hard link and
	// following a rename.
	ok(t, unix.Setxattr(p, "user.i", []byte("inode"), 0), "setxattr")
	ok(t, unix.Link(p, join(dir, "h")), "link")
	ok(t, unix.Rename(p, join(d, "moved")), "rename")
	for _, q := range []string{join(dir, "h"), join(d, "moved")} {
		if v, _ := getxattr(t, q, "user.i"); string(v) != "inode" {
			t.Fatalf("%s: value %q", q, v)
		}
	}
}

func testXattrSurvive(t *testing.T, dir string) {
	// Replacing a file by rename drops the replaced file's attributes.
	a, b := join(dir, "a"), join(dir, "b")
	writeFile(t, a, nil, 0644)
	writeFile(t, b, nil, 0644)
	needXattr(t, a)
	ok(t, unix.Setxattr(b, "user.old", []byte("b"), 0), "setxattr b")
	ok(t, unix.Setxattr(a, "user.new", []byte("a"), 0), "setxattr a")
	ok(t, unix.Rename(a, b), "rename")
	if got := listxattr(t, b); len(got) != 1 || got[0] != "user.new" {
		t.Fatalf("after rename over: %q", got)
	}
	// A new file at a reused name starts with none.
	ok(t, unix.Unlink(b), "unlink")
	writeFile(t, b, nil, 0644)
	if got := listxattr(t, b); len(got) != 0 {
		t.Fatalf("new file at reused name has %q", got)
	}
}

// testXattrManyNames adds long user.* names until the file system refuses
// one (ENOSPC or E2BIG) or 1,000 are in. A file system that refused one
// must be able to list, read and remove all it took (ext4 refuses long
// before listxattr's 64 KiB limit). One that took all 1,000 (tmpfs) has a
// list of 249 KB, which listxattr refuses with E2BIG.
func testXattrManyNames(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	needXattr(t, p)
	name := func(i int) string { return "user." + strings.Repeat("n", 240) + formatInt(int64(1000+i)) }
	n, refused := 0, false
	for ; n < 1000; n++ {
		err := unix.Setxattr(p, name(n), []byte("v"), 0)
		if errors.Is(err, unix.ENOSPC) || errors.Is(err, unix.E2BIG) {
			refused = true
			break
		}
		ok(t, err, "setxattr "+itoa(n))
	}
	t.Logf("%d names of %d bytes", n, len(name(0)))
	if !refused {
		size, err := unix.Listxattr(p, nil)
		ok(t, err, "listxattr size")
		_, err = unix.Listxattr(p, make([]byte, size))
		wantErr(t, err, unix.E2BIG, "listxattr of 1,000 long names")
		return
	}
	names := listxattr(t, p)
	if len(names) != n {
		t.Fatalf("listxattr gave %d names, want %d", len(names), n)
	}
	for i := 0; i < n; i++ {
		if v, err := getxattr(t, p, name(i)); err != nil || string(v) != "v" {
			t.Fatalf("getxattr %d: %q %v", i, v, err)
		}
	}
	for i := 0; i < n; i++ {
		ok(t, unix.Removexattr(p, name(i)), "removexattr "+itoa(i))
	}
	if names := listxattr(t, p); len(names) != 0 {
		t.Fatalf("after removing all: %d names", len(names))
	}
}
