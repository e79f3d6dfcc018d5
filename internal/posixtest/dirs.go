package posixtest

import (
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// Directories: mkdir, rmdir, unlink, name lengths, link counts.
var dirTests = map[string]Test{
	"MkdirRmdir":        testMkdirRmdir,
	"MkdirErrors":       testMkdirErrors,
	"RmdirErrors":       testRmdirErrors,
	"UnlinkErrors":      testUnlinkErrors,
	"DirLinkCount":      testDirLinkCount,
	"NameMax":           testNameMax,
	"DotDot":            testDotDot,
	"DirMtimeOnCreate":  testDirMtimeOnCreate,
	"RemovedCwdEntries": testRemovedDirOps,
}

func testMkdirRmdir(t *testing.T, dir string) {
	d := join(dir, "d")
	ok(t, unix.Mkdir(d, 0750), "mkdir")
	st := lstat(t, d)
	if st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("mode %o", st.Mode)
	}
	if st.Mode&07777&^0750 != 0 {
		t.Fatalf("mode %o has bits beyond 0750", st.Mode&07777)
	}
	if st.Nlink != 2 {
		t.Fatalf("new directory nlink %d, want 2", st.Nlink)
	}
	names, err := readNames(d)
	ok(t, err, "readdir")
	if len(names) != 0 {
		t.Fatalf("new directory lists %q", names)
	}
	ok(t, unix.Rmdir(d), "rmdir")
	var s unix.Stat_t
	wantErr(t, unix.Lstat(d, &s), unix.ENOENT, "lstat after rmdir")
	// The name is reusable, as a directory or a file.
	mkdir(t, d, 0755)
	ok(t, unix.Rmdir(d), "rmdir again")
	writeFile(t, d, []byte("f"), 0644)
}

func testMkdirErrors(t *testing.T, dir string) {
	mkdir(t, join(dir, "d"), 0755)
	writeFile(t, join(dir, "f"), nil, 0644)
	ok(t, unix.Symlink("d", join(dir, "l")), "symlink")
	ok(t, unix.Symlink("nowhere", join(dir, "dangling")), "symlink")
	wantErr(t, unix.Mkdir(join(dir, "d"), 0755), unix.EEXIST, "mkdir existing dir")
	wantErr(t, unix.Mkdir(join(dir, "f"), 0755), unix.EEXIST, "mkdir over file")
	wantErr(t, unix.Mkdir(join(dir, "l"), 0755), unix.EEXIST, "mkdir over symlink")
	wantErr(t, unix.Mkdir(join(dir, "dangling"), 0755), unix.EEXIST, "mkdir over dangling symlink")
	wantErr(t, unix.Mkdir(join(dir, "missing", "x"), 0755), unix.ENOENT, "mkdir in missing dir")
	wantErr(t, unix.Mkdir(join(dir, "f", "x"), 0755), unix.ENOTDIR, "mkdir under a file")
	wantErr(t, unix.Mkdir(join(dir, "."), 0755), unix.EEXIST, "mkdir .")
	// A trailing slash is fine for mkdir.
	ok(t, unix.Mkdir(join(dir, "e")+"/", 0755), "mkdir with trailing slash")
}

func testRmdirErrors(t *testing.T, dir string) {
	d := join(dir, "d")
	mkdir(t, d, 0755)
	writeFile(t, join(d, "f"), nil, 0644)
	wantErr(t, unix.Rmdir(d), unix.ENOTEMPTY, "rmdir non-empty")
	mkdir(t, join(dir, "e"), 0755)
	mkdir(t, join(dir, "e", "sub"), 0755)
	wantErr(t, unix.Rmdir(join(dir, "e")), unix.ENOTEMPTY, "rmdir dir with subdir")
	wantErr(t, unix.Rmdir(join(d, "f")), unix.ENOTDIR, "rmdir a file")
	wantErr(t, unix.Rmdir(join(dir, "missing")), unix.ENOENT, "rmdir missing")
	wantErr(t, unix.Rmdir(join(d, "f", "x")), unix.ENOTDIR, "rmdir under a file")
	wantErr(t, unix.Rmdir(join(d, ".")), unix.EINVAL, "rmdir .")
	wantErrIn(t, unix.Rmdir(join(d, "..")), "rmdir ..", unix.ENOTEMPTY, unix.EEXIST)
	ok(t, unix.Symlink("e", join(dir, "l")), "symlink")
	wantErr(t, unix.Rmdir(join(dir, "l")), unix.ENOTDIR, "rmdir a symlink to a dir")
	// After emptying, rmdir works; a directory whose entries were all
	// removed is empty.
	ok(t, unix.Unlink(join(d, "f")), "unlink")
	ok(t, unix.Rmdir(d), "rmdir emptied")
}

func testUnlinkErrors(t *testing.T, dir string) {
	mkdir(t, join(dir, "d"), 0755)
	writeFile(t, join(dir, "f"), nil, 0644)
	// Linux returns EISDIR for unlink of a directory (POSIX allows EPERM).
	wantErr(t, unix.Unlink(join(dir, "d")), unix.EISDIR, "unlink a directory")
	wantErr(t, unix.Unlink(join(dir, "missing")), unix.ENOENT, "unlink missing")
	wantErr(t, unix.Unlink(join(dir, "f", "x")), unix.ENOTDIR, "unlink under a file")
	wantErr(t, unix.Unlink(join(dir, "f")+"/"), unix.ENOTDIR, "unlink file with trailing slash")
	// unlink of a symlink removes the link, not the target.
	ok(t, unix.Symlink("f", join(dir, "l")), "symlink")
	ok(t, unix.Unlink(join(dir, "l")), "unlink symlink")
	lstat(t, join(dir, "f"))
	ok(t, unix.Unlink(join(dir, "f")), "unlink")
	var st unix.Stat_t
	wantErr(t, unix.Lstat(join(dir, "f"), &st), unix.ENOENT, "lstat after unlink")
}

func testDirLinkCount(t *testing.T, dir string) {
	p := join(dir, "p")
	mkdir(t, p, 0755)
	for i, name := range []string{"a", "b", "c"} {
		mkdir(t, join(p, name), 0755)
		if st := lstat(t, p); st.Nlink != uint64(3+i) {
			t.Fatalf("after %d subdirs nlink %d, want %d", i+1, st.Nlink, 3+i)
		}
	}
	// Files do not count.
	writeFile(t, join(p, "f"), nil, 0644)
	if st := lstat(t, p); st.Nlink != 5 {
		t.Fatalf("nlink with a file %d, want 5", st.Nlink)
	}
	ok(t, unix.Rmdir(join(p, "b")), "rmdir")
	if st := lstat(t, p); st.Nlink != 4 {
		t.Fatalf("after rmdir nlink %d, want 4", st.Nlink)
	}
	if st := lstat(t, join(p, "a")); st.Nlink != 2 {
		t.Fatalf("leaf dir nlink %d", st.Nlink)
	}
}

func testNameMax(t *testing.T, dir string) {
	n255 := strings.Repeat("x", 255)
	n256 := strings.Repeat("y", 256)
	writeFile(t, join(dir, n255), []byte("ok"), 0644)
	wantContent(t, join(dir, n255), []byte("ok"))
	names, err := readNames(dir)
	ok(t, err, "readdir")
	if len(names) != 1 || names[0] != n255 {
		t.Fatalf("readdir of a 255-byte name: %d names", len(names))
	}
	_, err = unix.Open(join(dir, n256), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.ENAMETOOLONG, "create with 256-byte name")
	wantErr(t, unix.Mkdir(join(dir, n256), 0755), unix.ENAMETOOLONG, "mkdir 256")
	wantErr(t, unix.Symlink("x", join(dir, n256)), unix.ENAMETOOLONG, "symlink 256")
	wantErr(t, unix.Link(join(dir, n255), join(dir, n256)), unix.ENAMETOOLONG, "link 256")
	wantErr(t, unix.Rename(join(dir, n255), join(dir, n256)), unix.ENAMETOOLONG, "rename to 256")
	var st unix.Stat_t
	wantErr(t, unix.Lstat(join(dir, n256), &st), unix.ENAMETOOLONG, "lstat 256")
	mkdir(t, join(dir, strings.Repeat("d", 255)), 0755)
	ok(t, unix.Rename(join(dir, n255), join(dir, strings.Repeat("d", 255), strings.Repeat("z", 255))), "rename 255 into 255")
	// Multi-byte UTF-8 and unusual bytes are just bytes.
	odd := "\u00e9t\u00e9 \x01\xff\ttab"
	writeFile(t, join(dir, odd), []byte("odd"), 0644)
	wantContent(t, join(dir, odd), []byte("odd"))
}

func testDotDot(t *testing.T, dir string) {
	mkdir(t, join(dir, "a"), 0755)
	mkdir(t, join(dir, "a", "b"), 0755)
	top, a, b := lstat(t, dir), lstat(t, join(dir, "a")), lstat(t, join(dir, "a", "b"))
	if st := lstat(t, join(dir, "a", "b", "..")); st.Ino != a.Ino {
		t.Fatalf("a/b/.. is ino %d, want %d", st.Ino, a.Ino)
	}
	if st := lstat(t, join(dir, "a", "b", ".")); st.Ino != b.Ino {
		t.Fatalf("a/b/. is ino %d, want %d", st.Ino, b.Ino)
	}
	if st := lstat(t, join(dir, "a", "..")); st.Ino != top.Ino {
		t.Fatalf("a/.. is ino %d, want %d", st.Ino, top.Ino)
	}
	ents, err := readDirents(join(dir, "a"))
	ok(t, err, "readdir")
	seen := map[string]uint64{}
	for _, e := range ents {
		seen[e.Name] = e.Ino
	}
	if _, ok := seen["."]; !ok {
		t.Fatalf("readdir lacks .: %v", ents)
	}
	if _, ok := seen[".."]; !ok {
		t.Fatalf("readdir lacks ..: %v", ents)
	}
	if seen["b"] != b.Ino {
		t.Fatalf("readdir ino of b %d, want %d", seen["b"], b.Ino)
	}
}

func testDirMtimeOnCreate(t *testing.T, dir string) {
	d := join(dir, "d")
	mkdir(t, d, 0755)
	old := unix.Timespec{Sec: 1000000000}
	setOld := func() {
		t.Helper()
		ok(t, unix.UtimesNanoAt(unix.AT_FDCWD, d, []unix.Timespec{old, old}, 0), "utimens")
	}
	check := func(what string) {
		t.Helper()
		st := lstat(t, d)
		if !tsAfter(st.Mtim, old) || !tsAfter(st.Ctim, old) {
			t.Fatalf("%s did not update the directory's mtime/ctime (mtime %v)", what, tsTime(st.Mtim))
		}
		if !tsEqual(st.Atim, old) {
			t.Fatalf("%s changed the directory's atime", what)
		}
		setOld()
	}
	setOld()
	writeFile(t, join(d, "f"), nil, 0644)
	check("create")
	mkdir(t, join(d, "s"), 0755)
	check("mkdir")
	ok(t, unix.Symlink("x", join(d, "l")), "symlink")
	check("symlink")
	ok(t, unix.Link(join(d, "f"), join(d, "h")), "link")
	check("link")
	ok(t, unix.Unlink(join(d, "h")), "unlink")
	check("unlink")
	ok(t, unix.Rename(join(d, "f"), join(d, "g")), "rename")
	check("rename")
	ok(t, unix.Rmdir(join(d, "s")), "rmdir")
	check("rmdir")
	// Writing a file inside does not touch the directory.
	writeFile(t, join(d, "g"), []byte("data"), 0644)
	if st := lstat(t, d); !tsEqual(st.Mtim, old) {
		t.Fatalf("writing a file changed its directory's mtime")
	}
}

func testRemovedDirOps(t *testing.T, dir string) {
	// A removed directory that is still open: creating in it or listing it
	// fails with ENOENT.
	d := join(dir, "d")
	mkdir(t, d, 0755)
	fd := open(t, d, unix.O_RDONLY|unix.O_DIRECTORY, 0)
	ok(t, unix.Rmdir(d), "rmdir")
	if st := fstat(t, fd); st.Nlink != 0 {
		t.Fatalf("removed directory nlink %d, want 0", st.Nlink)
	}
	_, err := unix.Openat(fd, "f", unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	wantErr(t, err, unix.ENOENT, "create in removed directory")
	wantErr(t, unix.Mkdirat(fd, "s", 0755), unix.ENOENT, "mkdir in removed directory")
	// The VFS refuses to list a dead directory.
	_, err = unix.Getdents(fd, make([]byte, 4096))
	wantErr(t, err, unix.ENOENT, "getdents on removed directory")
}
