package posixtest

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// Permission checks made by an unprivileged process (uid/gid 65534), run as
// a helper. A FUSE mount must use allow_other for another user to see it at
// all, and default_permissions for the kernel to enforce mode bits.
var permTests = map[string]Test{
	"PermRead":          testPermRead,
	"PermWrite":         testPermWrite,
	"PermCreateInDir":   testPermCreateInDir,
	"PermSearch":        testPermSearch,
	"PermChmodChown":    testPermChmodChown,
	"PermUtimes":        testPermUtimes,
	"PermSticky":        testPermSticky,
	"PermKillPriv":      testPermKillPriv,
	"PermKillPrivNoop":  testPermKillPrivNoop,
	"PermKillPrivChown": testPermKillPrivChown,
	"KillPrivCapOnly":   testKillPrivCapOnly,
	"PermSetgidCreate":  testPermSetgidCreate,
	"PermSetgidMember":  testPermSetgidMember,
	"PermXattr":         testPermXattr,
	"PermRenameDirPerm": testPermRenameDir,
	"SetuidExec":        testSetuidExec,
}

// asNobody prepares dir for an unprivileged helper: every ancestor must be
// searchable by others. It adds o+x where missing and restores the old modes
// at cleanup. It fails the test if the helper still cannot reach dir (a FUSE
// mount without allow_other).
func asNobody(t *testing.T, dir string) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("permission checks need root to switch users")
	}
	abs, err := filepath.Abs(dir)
	ok(t, err, "abs")
	for p := abs; ; p = filepath.Dir(p) {
		var st unix.Stat_t
		ok(t, unix.Stat(p, &st), "stat "+p)
		if st.Mode&0001 == 0 {
			old := st.Mode & 07777
			ok(t, unix.Chmod(p, old|0001), "chmod o+x "+p)
			path := p
			t.Cleanup(func() { unix.Chmod(path, old) })
		}
		if p == "/" {
			break
		}
	}
	ok(t, unix.Chmod(dir, 0755), "chmod dir")
	if _, err := RunAs(t, Nobody, "stat", dir); err != nil {
		t.Fatalf("an unprivileged process cannot reach %s (%v): is the file system mounted with allow_other?", dir, err)
	}
}

// nobodyDo runs op as nobody and returns its errno (nil on success).
func nobodyDo(t *testing.T, op string, args ...string) error {
	t.Helper()
	_, err := RunAs(t, Nobody, op, args...)
	return err
}

func testPermRead(t *testing.T, dir string) {
	asNobody(t, dir)
	for _, c := range []struct {
		mode uint32
		want error
	}{
		{0600, unix.EACCES}, {0640, unix.EACCES}, {0644, nil}, {0604, nil}, {0000, unix.EACCES},
	} {
		p := join(dir, fmt.Sprintf("f%o", c.mode))
		writeFile(t, p, []byte("secret"), 0600)
		ok(t, unix.Chmod(p, c.mode), "chmod")
		out, err := RunAs(t, Nobody, "read", p)
		if c.want == nil {
			ok(t, err, fmt.Sprintf("nobody reads a %o file", c.mode))
			if out != "secret" {
				t.Fatalf("nobody read %q", out)
			}
		} else {
			wantErr(t, err, c.want.(unix.Errno), fmt.Sprintf("nobody reads a %o file of root", c.mode))
		}
	}
	// Root reads anything.
	wantContent(t, join(dir, "f0"), []byte("secret"))
}

func testPermWrite(t *testing.T, dir string) {
	asNobody(t, dir)
	p := join(dir, "f")
	writeFile(t, p, []byte("orig"), 0644)
	ok(t, unix.Chmod(p, 0644), "chmod")
	wantErr(t, nobodyDo(t, "write", p, "X"), unix.EACCES, "nobody writes a 0644 root file")
	wantErr(t, nobodyDo(t, "truncate", p, "0"), unix.EACCES, "nobody truncates a 0644 root file")
	wantErr(t, nobodyDo(t, "open", p, fmt.Sprint(unix.O_RDONLY|unix.O_TRUNC), "0"), unix.EACCES, "nobody O_TRUNC")
	wantContent(t, p, []byte("orig"))
	ok(t, unix.Chmod(p, 0646), "chmod o+w")
	ok(t, nobodyDo(t, "write", p, "X"), "nobody writes a 0646 file")
	wantContent(t, p, []byte("Xrig"))
	ok(t, nobodyDo(t, "truncate", p, "2"), "nobody truncates a 0646 file")
	wantContent(t, p, []byte("Xr"))
}

func testPermCreateInDir(t *testing.T, dir string) {
	asNobody(t, dir)
	d := join(dir, "d")
	mkdir(t, d, 0755)
	ok(t, unix.Chmod(d, 0755), "chmod")
	writeFile(t, join(d, "f"), nil, 0666)
	ok(t, unix.Chmod(join(d, "f"), 0666), "chmod")
	wantErr(t, nobodyDo(t, "create", join(d, "new"), "0644"), unix.EACCES, "nobody creates in a 0755 root dir")
	wantErr(t, nobodyDo(t, "mkdir", join(d, "sub"), "0755"), unix.EACCES, "nobody mkdir in a 0755 root dir")
	wantErr(t, nobodyDo(t, "symlink", "x", join(d, "l")), unix.EACCES, "nobody symlink in a 0755 root dir")
	wantErr(t, nobodyDo(t, "unlink", join(d, "f")), unix.EACCES, "nobody unlinks in a 0755 root dir")
	wantErr(t, nobodyDo(t, "rename", join(d, "f"), join(d, "g")), unix.EACCES, "nobody renames in a 0755 root dir")
	wantErr(t, nobodyDo(t, "link", join(d, "f"), join(d, "h")), unix.EACCES, "nobody links in a 0755 root dir")
	// Writable for others: creation works and the file belongs to nobody.
	ok(t, unix.Chmod(d, 0777), "chmod 0777")
	ok(t, nobodyDo(t, "create", join(d, "new"), "0640"), "nobody creates in a 0777 dir")
	st := lstat(t, join(d, "new"))
	if st.Uid != nobodyUID || st.Gid != nobodyGID {
		t.Fatalf("file created by nobody owned by %d:%d", st.Uid, st.Gid)
	}
	if st.Mode&07777&^0640 != 0 {
		t.Fatalf("file created by nobody mode %o", st.Mode&07777)
	}
	ok(t, nobodyDo(t, "mkdir", join(d, "sub"), "0755"), "nobody mkdir in a 0777 dir")
	if st := lstat(t, join(d, "sub")); st.Uid != nobodyUID {
		t.Fatalf("dir made by nobody owned by %d", st.Uid)
	}
	// Without sticky, others' files may be removed from a writable dir.
	ok(t, nobodyDo(t, "unlink", join(d, "f")), "nobody unlinks root's file in a 0777 dir")
	// Linking someone else's file needs no permission on the file (unless
	// protected_hardlinks forbids it; then EPERM).
	writeFile(t, join(d, "rootfile"), nil, 0600)
	err := nobodyDo(t, "link", join(d, "rootfile"), join(d, "stolen"))
	if err != nil {
		wantErr(t, err, unix.EPERM, "nobody links root's 0600 file (protected_hardlinks)")
	}
}

func testPermSearch(t *testing.T, dir string) {
	asNobody(t, dir)
	d := join(dir, "d")
	mkdir(t, d, 0700)
	ok(t, unix.Chmod(d, 0700), "chmod")
	writeFile(t, join(d, "f"), []byte("x"), 0644)
	wantErr(t, nobodyDo(t, "stat", join(d, "f")), unix.EACCES, "stat under a 0700 dir")
	wantErr(t, nobodyDo(t, "read", join(d, "f")), unix.EACCES, "read under a 0700 dir")
	// Search without read: names can be used but not listed.
	ok(t, unix.Chmod(d, 0711), "chmod 0711")
	ok(t, nobodyDo(t, "stat", join(d, "f")), "stat under a 0711 dir")
	wantErr(t, nobodyDo(t, "open", d, fmt.Sprint(unix.O_RDONLY|unix.O_DIRECTORY), "0"), unix.EACCES, "open a 0711 dir for listing")
	// Read without search: listing works, lookups do not.
	ok(t, unix.Chmod(d, 0744), "chmod 0744")
	ok(t, nobodyDo(t, "open", d, fmt.Sprint(unix.O_RDONLY|unix.O_DIRECTORY), "0"), "open a 0744 dir for listing")
	wantErr(t, nobodyDo(t, "stat", join(d, "f")), unix.EACCES, "stat under a 0744 dir")
}

func testPermChmodChown(t *testing.T, dir string) {
	asNobody(t, dir)
	ok(t, unix.Chmod(dir, 0777), "chmod 0777")
	p := join(dir, "root")
	writeFile(t, p, nil, 0666)
	ok(t, unix.Chmod(p, 0666), "chmod")
	wantErr(t, nobodyDo(t, "chmod", p, "0777"), unix.EPERM, "nobody chmods root's file")
	wantErr(t, nobodyDo(t, "chown", p, itoa(nobodyUID), "-1"), unix.EPERM, "nobody chowns root's file to itself")
	if st := lstat(t, p); st.Mode&07777 != 0666 || st.Uid != 0 {
		t.Fatalf("root's file changed: mode %o uid %d", st.Mode&07777, st.Uid)
	}
	q := join(dir, "mine")
	ok(t, nobodyDo(t, "create", q, "0644"), "nobody creates")
	ok(t, nobodyDo(t, "chmod", q, "0600"), "nobody chmods own file")
	if st := lstat(t, q); st.Mode&07777 != 0600 {
		t.Fatalf("mode %o", st.Mode&07777)
	}
	wantErr(t, nobodyDo(t, "chown", q, "0", "-1"), unix.EPERM, "nobody gives its file to root")
	wantErr(t, nobodyDo(t, "chown", q, "-1", "0"), unix.EPERM, "nobody moves its file to a group it is not in")
	ok(t, nobodyDo(t, "chown", q, itoa(nobodyUID), itoa(nobodyGID)), "nobody chowns to itself (no-op)")
	// Changing the group to one the owner belongs to is allowed.
	_, err := RunAs(t, Identity{UID: nobodyUID, GID: nobodyGID, Groups: []int{4242}}, "chown", q, "-1", "4242")
	ok(t, err, "owner chgrp to a supplementary group")
	if st := lstat(t, q); st.Gid != 4242 {
		t.Fatalf("gid %d", st.Gid)
	}
}

func testPermUtimes(t *testing.T, dir string) {
	asNobody(t, dir)
	p := join(dir, "f")
	writeFile(t, p, nil, 0666)
	ok(t, unix.Chmod(p, 0666), "chmod")
	// Write permission allows setting both times to now, but only the
	// owner may set explicit times.
	ok(t, nobodyDo(t, "utimes", p, "now"), "nobody utimes(now) on a writable file")
	wantErr(t, nobodyDo(t, "utimes", p, "set"), unix.EPERM, "nobody sets explicit times on root's file")
	ok(t, unix.Chmod(p, 0644), "chmod 0644")
	wantErr(t, nobodyDo(t, "utimes", p, "now"), unix.EACCES, "nobody utimes(now) on a read-only file")
}

func testPermSticky(t *testing.T, dir string) {
	asNobody(t, dir)
	d := join(dir, "tmp")
	mkdir(t, d, 0777)
	ok(t, unix.Chmod(d, 01777), "chmod 01777")
	victim := join(d, "rootfile")
	writeFile(t, victim, []byte("keep"), 0666)
	ok(t, unix.Chmod(victim, 0666), "chmod")
	wantErr(t, nobodyDo(t, "unlink", victim), unix.EPERM, "nobody unlinks root's file in a sticky dir")
	wantErr(t, nobodyDo(t, "rename", victim, join(d, "moved")), unix.EPERM, "nobody renames root's file in a sticky dir")
	ok(t, nobodyDo(t, "create", join(d, "mine"), "0644"), "nobody creates in a sticky dir")
	wantErr(t, nobodyDo(t, "rename", join(d, "mine"), victim), unix.EPERM, "nobody renames over root's file in a sticky dir")
	ok(t, nobodyDo(t, "rename", join(d, "mine"), join(d, "mine2")), "nobody renames own file in a sticky dir")
	ok(t, nobodyDo(t, "unlink", join(d, "mine2")), "nobody unlinks own file in a sticky dir")
	wantContent(t, victim, []byte("keep"))
	// A non-empty subdirectory of root's in the sticky dir cannot be
	// removed by nobody either.
	mkdir(t, join(d, "rootdir"), 0777)
	wantErr(t, nobodyDo(t, "rmdir", join(d, "rootdir")), unix.EPERM, "nobody rmdirs root's dir in a sticky dir")
	// The owner of the sticky directory may remove anything in it.
	ok(t, unix.Chown(d, nobodyUID, nobodyGID), "chown dir to nobody")
	ok(t, nobodyDo(t, "unlink", victim), "owner of the sticky dir unlinks root's file")
}

func testPermKillPriv(t *testing.T, dir string) {
	asNobody(t, dir)
	for _, c := range []struct {
		mode, want uint32
		gid        int
	}{
		{04777, 0777, 0},          // set-user-ID is dropped
		{06777, 0777, 0},          // both, with group exec
		{02777, 0777, nobodyGID},  // set-group-ID with group exec, even for a member
		{02767, 0767, 0},          // without group exec: dropped for a non-member,
		{02767, 02767, nobodyGID}, // kept for a member (Linux >= 6.2)
	} {
		p := join(dir, fmt.Sprintf("f%o-%d", c.mode, c.gid))
		writeFile(t, p, []byte("data"), 0644)
		ok(t, unix.Chown(p, 0, c.gid), "chown")
		ok(t, unix.Chmod(p, c.mode), "chmod")
		ok(t, nobodyDo(t, "write", p, "W"), "nobody writes")
		st := lstat(t, p)
		if st.Mode&07777 != c.want {
			t.Fatalf("after an unprivileged write to a %o file of group %d: mode %o, want %o", c.mode, c.gid, st.Mode&07777, c.want)
		}
		wantContent(t, p, []byte("Wata"))
	}
	// Truncation by nobody also drops set-user-ID.
	p := join(dir, "t")
	writeFile(t, p, []byte("data"), 0644)
	ok(t, unix.Chmod(p, 04777), "chmod")
	ok(t, nobodyDo(t, "truncate", p, "1"), "nobody truncates")
	if st := lstat(t, p); st.Mode&07777 != 0777 {
		t.Fatalf("after unprivileged truncate: mode %o, want 0777", st.Mode&07777)
	}
	// And set-group-ID without group exec, by the same rule as a write.
	for _, c := range []struct {
		want uint32
		gid  int
	}{{0767, 0}, {02767, nobodyGID}} {
		p := join(dir, fmt.Sprintf("t2767-%d", c.gid))
		writeFile(t, p, []byte("data"), 0644)
		ok(t, unix.Chown(p, 0, c.gid), "chown")
		ok(t, unix.Chmod(p, 02767), "chmod")
		ok(t, nobodyDo(t, "truncate", p, "1"), "nobody truncates")
		if st := lstat(t, p); st.Mode&07777 != c.want {
			t.Fatalf("after an unprivileged truncate of a 2767 file of group %d: mode %o, want %o", c.gid, st.Mode&07777, c.want)
		}
	}
	// Root (CAP_FSETID) keeps the bits when writing.
	q := join(dir, "r")
	writeFile(t, q, []byte("data"), 0644)
	ok(t, unix.Chmod(q, 06777), "chmod")
	fd := open(t, q, unix.O_WRONLY, 0)
	pwrite(t, fd, []byte("R"), 0)
	if st := lstat(t, q); st.Mode&07777 != 06777 {
		t.Fatalf("root's write changed mode to %o", st.Mode&07777)
	}
}

// setgidDir makes dir/d, mode 02777 and group 4242 (which nobody is not
// in), for tests that run as nobody.
func setgidDir(t *testing.T, dir string) string {
	asNobody(t, dir)
	d := join(dir, "d")
	mkdir(t, d, 0777)
	ok(t, unix.Chown(d, 0, 4242), "chown")
	ok(t, unix.Chmod(d, 02777), "chmod 02777")
	return d
}

func testPermSetgidCreate(t *testing.T, dir string) {
	d := setgidDir(t, dir)
	// nobody is not in group 4242: the new file still gets the directory's
	// gid, but a requested set-group-ID bit is stripped.
	p := join(d, "f")
	ok(t, nobodyDo(t, "create", p, "02755"), "nobody creates in a setgid dir")
	st := lstat(t, p)
	if st.Gid != 4242 || st.Uid != nobodyUID {
		t.Fatalf("owner %d:%d, want %d:4242", st.Uid, st.Gid, nobodyUID)
	}
	if st.Mode&unix.S_ISGID != 0 {
		t.Fatalf("file created by a non-member with S_ISGID kept it: mode %o", st.Mode)
	}
	ok(t, nobodyDo(t, "mkdir", join(d, "sub"), "0755"), "nobody mkdir in a setgid dir")
	if st := lstat(t, join(d, "sub")); st.Gid != 4242 || st.Mode&unix.S_ISGID == 0 {
		t.Fatalf("subdir by nobody: gid %d mode %o", st.Gid, st.Mode)
	}
	// chmod g+s by the owner, not in the file's group: silently cleared.
	ok(t, nobodyDo(t, "chmod", p, "02755"), "owner chmod g+s")
	if st := lstat(t, p); st.Mode&unix.S_ISGID != 0 {
		t.Fatalf("chmod g+s by a non-member kept S_ISGID: mode %o", st.Mode)
	}
	// In its own group the owner may set it.
	q := join(dir, "own")
	ok(t, unix.Chmod(dir, 0777), "chmod")
	ok(t, nobodyDo(t, "create", q, "0755"), "create")
	ok(t, nobodyDo(t, "chmod", q, "02755"), "chmod g+s in own group")
	if st := lstat(t, q); st.Mode&07777 != 02755 {
		t.Fatalf("chmod g+s by a member: mode %o", st.Mode)
	}
}

// testPermSetgidMember: a caller in the directory's group only through a
// supplementary group keeps the set-group-ID bit it asks for on a new file
// (in_group_or_capable counts supplementary groups); one not in it loses it.
func testPermSetgidMember(t *testing.T, dir string) {
	d := setgidDir(t, dir)
	member := Identity{UID: nobodyUID, GID: nobodyGID, Groups: []int{4242}}
	p := join(d, "f")
	_, err := RunAs(t, member, "create", p, "02755")
	ok(t, err, "a member through a supplementary group creates in a setgid dir")
	if st := lstat(t, p); st.Gid != 4242 || st.Mode&07777 != 02755 {
		t.Fatalf("file created 02755 by a supplementary member: gid %d mode %o, want 4242 and 2755", st.Gid, st.Mode&07777)
	}
	q := join(d, "g")
	ok(t, nobodyDo(t, "create", q, "02755"), "a non-member creates in a setgid dir")
	if st := lstat(t, q); st.Gid != 4242 || st.Mode&07777 != 0755 {
		t.Fatalf("file created 02755 by a non-member: gid %d mode %o, want 4242 and 755", st.Gid, st.Mode&07777)
	}
}

func testPermXattr(t *testing.T, dir string) {
	asNobody(t, dir)
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	ok(t, unix.Chmod(p, 0644), "chmod")
	needXattr(t, p)
	ok(t, unix.Setxattr(p, "user.r", []byte("readable"), 0), "setxattr")
	ok(t, unix.Setxattr(p, "trusted.t", []byte("hidden"), 0), "setxattr trusted")
	out, err := RunAs(t, Nobody, "getxattr", p, "user.r")
	ok(t, err, "nobody reads a user xattr of a 0644 file")
	if out != "readable" {
		t.Fatalf("value %q", out)
	}
	wantErr(t, nobodyDo(t, "setxattr", p, "user.w", "v"), unix.EACCES, "nobody sets a user xattr on a 0644 file")
	wantErr(t, nobodyDo(t, "setxattr", p, "trusted.w", "v"), unix.EPERM, "nobody sets a trusted xattr")
	wantErr(t, nobodyDo(t, "getxattr", p, "trusted.t"), unix.ENODATA, "nobody reads a trusted xattr")
	// Nor are trusted names listed to a caller without CAP_SYS_ADMIN.
	out, err = RunAs(t, Nobody, "listxattr", p)
	ok(t, err, "nobody lists the xattrs")
	if out != "user.r" {
		t.Fatalf("nobody lists %q, want only user.r", out)
	}
	ok(t, unix.Chmod(p, 0600), "chmod 0600")
	wantErr(t, nobodyDo(t, "getxattr", p, "user.r"), unix.EACCES, "nobody reads a user xattr of a 0600 file")
	ok(t, unix.Chmod(p, 0646), "chmod 0646")
	ok(t, nobodyDo(t, "setxattr", p, "user.w", "v"), "nobody sets a user xattr on a 0646 file")
}

func testPermRenameDir(t *testing.T, dir string) {
	// Moving a directory to another parent rewrites its '..', which needs
	// write permission on the directory itself.
	asNobody(t, dir)
	ok(t, unix.Chmod(dir, 0777), "chmod")
	a, b := join(dir, "a"), join(dir, "b")
	mkdir(t, a, 0777)
	mkdir(t, b, 0777)
	ok(t, unix.Chmod(a, 0777), "chmod a")
	ok(t, unix.Chmod(b, 0777), "chmod b")
	mkdir(t, join(a, "rootdir"), 0755)
	ok(t, unix.Chmod(join(a, "rootdir"), 0755), "chmod")
	wantErr(t, nobodyDo(t, "rename", join(a, "rootdir"), join(b, "rootdir")), unix.EACCES, "nobody moves root's 0755 dir to another parent")
	// Within the same parent no write access to the directory is needed.
	ok(t, nobodyDo(t, "rename", join(a, "rootdir"), join(a, "renamed")), "nobody renames root's dir in place")
}

// A program whose set-user-ID and set-group-ID bits are set runs with its
// owner and group as effective IDs (unless the mount is nosuid, which a
// root mount of a disk file system is not by default). The program is a
// copy of id(1), owned by 65534:65534.
func testSetuidExec(t *testing.T, dir string) {
	needRoot(t)
	needMountFlagOff(t, dir, unix.ST_NOSUID, "nosuid")
	src, err := exec.LookPath("id")
	if err != nil {
		t.Skip("no id(1) to copy")
	}
	b, err := os.ReadFile(src)
	ok(t, err, "read "+src)
	p := join(dir, "id")
	ok(t, os.WriteFile(p, b, 0o755), "copy id")
	ok(t, os.Chown(p, 65534, 65534), "chown id")
	ok(t, unix.Chmod(p, 0o6755), "chmod 6755 id")
	if st := lstat(t, p); st.Mode&0o7777 != 0o6755 {
		t.Fatalf("mode %o after chmod 6755", st.Mode&0o7777)
	}
	// Run by a helper process: see its "run" op.
	out, err := RunAs(t, Root, "run", p, "-u")
	ok(t, err, "run the set-user-ID copy")
	if out != "65534" {
		t.Fatalf("effective uid %q, want 65534", out)
	}
	out, err = RunAs(t, Root, "run", p, "-g")
	ok(t, err, "run the set-group-ID copy")
	if out != "65534" {
		t.Fatalf("effective gid %q, want 65534", out)
	}
}

// testPermKillPrivNoop: two calls clear set-user-ID and set-group-ID
// without changing an owner or a size, which a FUSE file system learns of
// only as a SETATTR that sets nothing: chown(f, -1, -1) by anyone, and
// fallocate by a caller without CAP_FSETID (whatever its mode, as ext4).
// Set-group-ID goes when group exec is set, or when the caller is neither in
// the file's group nor privileged; root's fallocate keeps both bits.
func testPermKillPrivNoop(t *testing.T, dir string) {
	asNobody(t, dir)
	for _, c := range []struct {
		op         string // "chown" or "fallocate", by nobody, or "chown-root", "fallocate-root"
		mode, want uint32
		gid        int
	}{
		{"chown", 06755, 0755, nobodyGID},
		{"chown", 02745, 0745, 0},
		{"chown", 02745, 02745, nobodyGID},
		{"chown-root", 06755, 0755, 0},
		{"chown-root", 02745, 02745, 0},
		{"fallocate", 06777, 0777, 0},
		{"fallocate", 02767, 0767, 0},
		{"fallocate", 02767, 02767, nobodyGID},
		{"fallocate-root", 06777, 06777, 0},
	} {
		p := join(dir, fmt.Sprintf("%s-%o-%d", c.op, c.mode, c.gid))
		writeFile(t, p, []byte("data"), 0644)
		ok(t, unix.Chown(p, nobodyUID, c.gid), "chown")
		ok(t, unix.Chmod(p, c.mode), "chmod")
		switch c.op {
		case "chown":
			ok(t, nobodyDo(t, "chown", p, "-1", "-1"), "nobody's chown(-1, -1)")
		case "chown-root":
			ok(t, unix.Chown(p, -1, -1), "root's chown(-1, -1)")
		case "fallocate":
			ok(t, nobodyDo(t, "fallocate", p, "0", "0", "8192"), "nobody's fallocate")
		case "fallocate-root":
			fd := open(t, p, unix.O_WRONLY, 0)
			ok(t, unix.Fallocate(fd, 0, 0, 8192), "root's fallocate")
		}
		if st := lstat(t, p); st.Mode&07777 != c.want {
			t.Fatalf("%s of a %o file of group %d: mode %o, want %o", c.op, c.mode, c.gid, st.Mode&07777, c.want)
		}
	}
}

// testPermKillPrivChown: a chown(-1, -1) that would clear set-user-ID or
// set-group-ID is a mode change, which only the owner may make: by another
// user, even one who may write the file, it fails with EPERM and the bits
// stay, as on ext4 (Conquest cleared them for anyone who could reach the
// file until session 46, and for a user who could write it until session
// 47). A fallocate by such a user who may write clears them (the
// kernel forces that change). And a chown that changes the group clears an
// S_ISGID without group exec when the caller is not in the file's group as
// it was (Linux >= 6.2's setattr_should_drop_sgid), keeps it when it is.
func testPermKillPrivChown(t *testing.T, dir string) {
	asNobody(t, dir)
	for _, c := range []struct {
		op         string
		uid, gid   int // the file's owner and group before
		mode, want uint32
		wantErr    error
	}{
		{"chown", 0, 0, 04755, 04755, unix.EPERM},
		{"chown", 0, 0, 02745, 02745, unix.EPERM},
		{"chown", 0, 0, 06711, 06711, unix.EPERM},
		{"chown", 0, 0, 04777, 04777, unix.EPERM}, // nobody may write it, and still may not
		{"chown", 0, 0, 06767, 06767, unix.EPERM},
		{"fallocate", 0, 0, 04777, 0777, nil},
		{"chgrp", nobodyUID, 0, 02745, 0745, nil},
		{"chgrp", nobodyUID, nobodyGID, 02745, 02745, nil},
		{"chgrp", nobodyUID, 0, 04745, 0745, nil},
	} {
		p := join(dir, fmt.Sprintf("%s-%d-%d-%o", c.op, c.uid, c.gid, c.mode))
		writeFile(t, p, []byte("data"), 0644)
		ok(t, unix.Chown(p, c.uid, c.gid), "chown")
		ok(t, unix.Chmod(p, c.mode), "chmod")
		var err error
		switch c.op {
		case "chown":
			err = nobodyDo(t, "chown", p, "-1", "-1")
		case "chgrp":
			err = nobodyDo(t, "chown", p, "-1", fmt.Sprint(nobodyGID))
		case "fallocate":
			err = nobodyDo(t, "fallocate", p, "0", "0", "8192")
		}
		if err != c.wantErr {
			t.Fatalf("%s by nobody of a %o file of %d:%d: %v, want %v", c.op, c.mode, c.uid, c.gid, err, c.wantErr)
		}
		if st := lstat(t, p); st.Mode&07777 != c.want {
			t.Fatalf("%s by nobody of a %o file of %d:%d: mode %o, want %o", c.op, c.mode, c.uid, c.gid, st.Mode&07777, c.want)
		}
	}
}

// testKillPrivCapOnly: a write by root (CAP_FSETID) to a set-user-ID file
// that has file capabilities removes the capabilities and keeps the mode.
func testKillPrivCapOnly(t *testing.T, dir string) {
	needRoot(t)
	p := join(dir, "f")
	writeFile(t, p, []byte("data"), 0644)
	ok(t, unix.Chmod(p, 04755), "chmod")
	// vfs_cap_data, revision 2, effective: CAP_NET_RAW permitted.
	capData := []byte{1, 0, 0, 2, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0}
	if err := unix.Setxattr(p, "security.capability", capData, 0); err != nil {
		t.Skipf("cannot set file capabilities here: %v", err)
	}
	fd := open(t, p, unix.O_WRONLY|unix.O_APPEND, 0)
	if _, err := unix.Write(fd, []byte("more")); err != nil {
		t.Fatalf("write: %v", err)
	}
	if st := lstat(t, p); st.Mode&07777 != 04755 {
		t.Fatalf("root's write to a 4755 file with capabilities: mode %o, want 4755", st.Mode&07777)
	}
	if _, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); err != unix.ENODATA {
		t.Fatalf("after the write the capability is still there (getxattr: %v)", err)
	}
}
