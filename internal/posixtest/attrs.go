package posixtest

import (
	"testing"

	"golang.org/x/sys/unix"
)

// chmod, chown, set-group-ID directories and the sticky bit (as root; the
// unprivileged side is in perms.go).
var attrTests = map[string]Test{
	"Chmod":             testChmod,
	"Chown":             testChown,
	"ChownClearsSetuid": testChownClearsSetuid,
	"SetgidDir":         testSetgidDir,
	"StickyDirRoot":     testStickyDirRoot,
	"Fchmod":            testFchmod,
	"StatBasics":        testStatBasics,
}

func testChmod(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, []byte("x"), 0644)
	for _, m := range []uint32{0, 0777, 04755, 02755, 01777, 07777, 0600} {
		ok(t, unix.Chmod(p, m), "chmod")
		if st := lstat(t, p); st.Mode&07777 != m || st.Mode&unix.S_IFMT != unix.S_IFREG {
			t.Fatalf("chmod %o: mode %o", m, st.Mode)
		}
	}
	d := join(dir, "d")
	mkdir(t, d, 0755)
	ok(t, unix.Chmod(d, 03711), "chmod dir")
	if st := lstat(t, d); st.Mode != unix.S_IFDIR|03711 {
		t.Fatalf("dir mode %o", st.Mode)
	}
	// chmod follows symlinks; the link's own mode stays 0777.
	ok(t, unix.Symlink("f", join(dir, "l")), "symlink")
	ok(t, unix.Chmod(join(dir, "l"), 0640), "chmod through link")
	if st := lstat(t, p); st.Mode&07777 != 0640 {
		t.Fatalf("target mode %o", st.Mode&07777)
	}
	if st := lstat(t, join(dir, "l")); st.Mode&0777 != 0777 {
		t.Fatalf("link mode %o", st.Mode&0777)
	}
	// The file type bits in the argument are ignored.
	ok(t, unix.Chmod(p, unix.S_IFDIR|0600), "chmod with type bits")
	if st := lstat(t, p); st.Mode != unix.S_IFREG|0600 {
		t.Fatalf("mode %o", st.Mode)
	}
	wantErr(t, unix.Chmod(join(dir, "missing"), 0644), unix.ENOENT, "chmod missing")
}

func testChown(t *testing.T, dir string) {
	needRoot(t)
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	ok(t, unix.Chown(p, 1234, 5678), "chown")
	if st := lstat(t, p); st.Uid != 1234 || st.Gid != 5678 {
		t.Fatalf("owner %d:%d", st.Uid, st.Gid)
	}
	ok(t, unix.Chown(p, -1, 42), "chown group only")
	if st := lstat(t, p); st.Uid != 1234 || st.Gid != 42 {
		t.Fatalf("owner %d:%d after chown -1:42", st.Uid, st.Gid)
	}
	ok(t, unix.Chown(p, 7, -1), "chown user only")
	if st := lstat(t, p); st.Uid != 7 || st.Gid != 42 {
		t.Fatalf("owner %d:%d after chown 7:-1", st.Uid, st.Gid)
	}
	// Large ids survive.
	ok(t, unix.Chown(p, 4000000000, 4000000001), "chown large ids")
	if st := lstat(t, p); st.Uid != 4000000000 || st.Gid != 4000000001 {
		t.Fatalf("owner %d:%d after large chown", st.Uid, st.Gid)
	}
	// lchown changes the link, chown the target.
	ok(t, unix.Symlink("f", join(dir, "l")), "symlink")
	ok(t, unix.Lchown(join(dir, "l"), 11, 12), "lchown")
	if st := lstat(t, join(dir, "l")); st.Uid != 11 || st.Gid != 12 {
		t.Fatalf("link owner %d:%d", st.Uid, st.Gid)
	}
	if st := lstat(t, p); st.Uid != 4000000000 {
		t.Fatalf("lchown changed the target")
	}
	// chown updates ctime only.
	old := unix.Timespec{Sec: 1000000000}
	ok(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, old}, 0), "utimens")
	c0 := lstat(t, p).Ctim
	tickSleep()
	ok(t, unix.Chown(p, 1, 1), "chown")
	st := lstat(t, p)
	if !tsAfter(st.Ctim, c0) || !tsEqual(st.Mtim, old) || !tsEqual(st.Atim, old) {
		t.Fatalf("chown: ctime updated %v, mtime kept %v, atime kept %v", tsAfter(st.Ctim, c0), tsEqual(st.Mtim, old), tsEqual(st.Atim, old))
	}
}

func testChownClearsSetuid(t *testing.T, dir string) {
	needRoot(t)
	// chown of a regular file clears set-user-ID and (with group exec)
	// set-group-ID, even when root does it.
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	ok(t, unix.Chmod(p, 06755), "chmod 6755")
	ok(t, unix.Chown(p, 1000, 1000), "chown")
	if st := lstat(t, p); st.Mode&07777 != 0755 {
		t.Fatalf("after chown mode %o, want 0755", st.Mode&07777)
	}
	// Without group exec, set-group-ID is kept (a locking mark).
	ok(t, unix.Chmod(p, 06744), "chmod 6744")
	ok(t, unix.Chown(p, 1001, 1001), "chown")
	if st := lstat(t, p); st.Mode&07777 != 02744 {
		t.Fatalf("after chown mode %o, want 02744", st.Mode&07777)
	}
	// Directories keep their bits.
	d := join(dir, "d")
	mkdir(t, d, 0755)
	ok(t, unix.Chmod(d, 06755), "chmod dir")
	ok(t, unix.Chown(d, 1000, 1000), "chown dir")
	if st := lstat(t, d); st.Mode&07777 != 06755 {
		t.Fatalf("dir after chown mode %o, want 06755", st.Mode&07777)
	}
}

func testSetgidDir(t *testing.T, dir string) {
	needRoot(t)
	d := join(dir, "d")
	mkdir(t, d, 0755)
	ok(t, unix.Chown(d, 0, 4242), "chown dir")
	ok(t, unix.Chmod(d, 02775), "chmod g+s")
	f := join(d, "f")
	writeFile(t, f, nil, 0644)
	if st := lstat(t, f); st.Gid != 4242 || st.Uid != 0 {
		t.Fatalf("file in setgid dir owned by %d:%d, want 0:4242", st.Uid, st.Gid)
	}
	if st := lstat(t, f); st.Mode&unix.S_ISGID != 0 {
		t.Fatalf("regular file inherited S_ISGID")
	}
	sub := join(d, "sub")
	mkdir(t, sub, 0755)
	st := lstat(t, sub)
	if st.Gid != 4242 || st.Mode&unix.S_ISGID == 0 {
		t.Fatalf("subdir of setgid dir: gid %d mode %o, want gid 4242 and S_ISGID", st.Gid, st.Mode)
	}
	// Grandchildren inherit through the chain.
	writeFile(t, join(sub, "g"), nil, 0644)
	if st := lstat(t, join(sub, "g")); st.Gid != 4242 {
		t.Fatalf("grandchild gid %d", st.Gid)
	}
	for _, p := range []string{join(d, "node"), join(d, "sym")} {
		if p == join(d, "node") {
			ok(t, unix.Mkfifo(p, 0644), "mkfifo")
		} else {
			ok(t, unix.Symlink("f", p), "symlink")
		}
		if st := lstat(t, p); st.Gid != 4242 {
			t.Fatalf("%s gid %d, want 4242", p, st.Gid)
		}
	}
	// A plain directory gives the creator's gid.
	plain := join(dir, "plain")
	mkdir(t, plain, 0755)
	ok(t, unix.Chown(plain, 0, 4242), "chown")
	writeFile(t, join(plain, "f"), nil, 0644)
	if st := lstat(t, join(plain, "f")); st.Gid != uint32(unix.Getegid()) {
		t.Fatalf("file in non-setgid dir gid %d, want %d", st.Gid, unix.Getegid())
	}
}

func testStickyDirRoot(t *testing.T, dir string) {
	d := join(dir, "tmp")
	mkdir(t, d, 0777)
	ok(t, unix.Chmod(d, 01777), "chmod +t")
	if st := lstat(t, d); st.Mode&07777 != 01777 {
		t.Fatalf("mode %o", st.Mode&07777)
	}
	// Root may remove anything in a sticky directory.
	writeFile(t, join(d, "f"), nil, 0644)
	if unix.Geteuid() == 0 {
		ok(t, unix.Chown(join(d, "f"), 1000, 1000), "chown")
	}
	ok(t, unix.Unlink(join(d, "f")), "root unlinks in sticky dir")
}

func testFchmod(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0600)
	ok(t, unix.Fchmod(fd, 0604), "fchmod")
	if st := lstat(t, p); st.Mode&07777 != 0604 {
		t.Fatalf("mode %o", st.Mode&07777)
	}
	// A descriptor keeps its access after chmod removes permission.
	ok(t, unix.Fchmod(fd, 0), "fchmod 0")
	pwrite(t, fd, []byte("still"), 0)
	if got := pread(t, fd, 10, 0); string(got) != "still" {
		t.Fatalf("read %q", got)
	}
}

func testStatBasics(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, pattern(24, 5000), 0644)
	st := lstat(t, p)
	if st.Blksize <= 0 {
		t.Fatalf("st_blksize %d", st.Blksize)
	}
	if st.Blocks*512 < 5000 {
		t.Fatalf("st_blocks %d too small for 5000 bytes", st.Blocks)
	}
	if st.Ino == 0 {
		t.Fatalf("ino 0")
	}
	d := lstat(t, dir)
	if d.Dev != st.Dev {
		t.Fatalf("st_dev differs within one file system: %d vs %d", d.Dev, st.Dev)
	}
	// Inode numbers are unique among live files.
	seen := map[uint64]string{}
	for i := 0; i < 50; i++ {
		q := join(dir, "u"+itoa(i))
		writeFile(t, q, nil, 0644)
		ino := lstat(t, q).Ino
		if prev, dup := seen[ino]; dup {
			t.Fatalf("%s and %s share ino %d", prev, q, ino)
		}
		seen[ino] = q
	}
	var sx unix.Statx_t
	ok(t, unix.Statx(unix.AT_FDCWD, p, unix.AT_SYMLINK_NOFOLLOW, unix.STATX_ALL, &sx), "statx")
	if sx.Ino != st.Ino || sx.Size != uint64(st.Size) || uint32(sx.Mode) != st.Mode {
		t.Fatalf("statx disagrees with stat: ino %d size %d mode %o", sx.Ino, sx.Size, sx.Mode)
	}
}
