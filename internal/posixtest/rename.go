package posixtest

import (
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// rename(2) and renameat2(2).
var renameTests = map[string]Test{
	"RenameFile":          testRenameFile,
	"RenameOverFile":      testRenameOverFile,
	"RenameOverEmptyDir":  testRenameOverEmptyDir,
	"RenameErrors":        testRenameErrors,
	"RenameAcrossDirs":    testRenameAcrossDirs,
	"RenameDirDotDot":     testRenameDirDotDot,
	"RenameSameFile":      testRenameSameFile,
	"RenameTimes":         testRenameTimes,
	"RenameNoReplace":     testRenameNoReplace,
	"RenameExchange":      testRenameExchange,
	"RenameWhiteout":      testRenameWhiteout,
	"RenameAtomicReplace": testRenameAtomicReplace,
	"RenameOpenFile":      testRenameOpenFile,
}

func testRenameFile(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	writeFile(t, a, []byte("content"), 0644)
	before := lstat(t, a)
	ok(t, unix.Rename(a, b), "rename")
	var st unix.Stat_t
	wantErr(t, unix.Lstat(a, &st), unix.ENOENT, "old name after rename")
	after := lstat(t, b)
	if after.Ino != before.Ino || after.Nlink != 1 {
		t.Fatalf("renamed file: ino %d (was %d) nlink %d", after.Ino, before.Ino, after.Nlink)
	}
	wantContent(t, b, []byte("content"))
	names, err := readNames(dir)
	ok(t, err, "readdir")
	if len(names) != 1 || names[0] != "b" {
		t.Fatalf("directory lists %q", names)
	}
	// Symlinks and directories rename the same way (the link itself moves).
	ok(t, unix.Symlink("b", join(dir, "l")), "symlink")
	ok(t, unix.Rename(join(dir, "l"), join(dir, "l2")), "rename symlink")
	wantContent(t, join(dir, "l2"), []byte("content"))
}

func testRenameOverFile(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	writeFile(t, a, []byte("new"), 0644)
	writeFile(t, b, []byte("old old old"), 0644)
	ia, ib := lstat(t, a).Ino, lstat(t, b).Ino
	// Keep the replaced file open: its data stays readable.
	fd := open(t, b, unix.O_RDONLY, 0)
	ok(t, unix.Rename(a, b), "rename over file")
	if st := lstat(t, b); st.Ino != ia {
		t.Fatalf("target ino %d, want the source's %d", st.Ino, ia)
	}
	wantContent(t, b, []byte("new"))
	if st := fstat(t, fd); st.Ino != ib || st.Nlink != 0 {
		t.Fatalf("replaced file: ino %d nlink %d, want %d and 0", st.Ino, st.Nlink, ib)
	}
	if got := pread(t, fd, 100, 0); string(got) != "old old old" {
		t.Fatalf("replaced open file reads %q", got)
	}
	// Replacing one hard link of a file decrements its count.
	writeFile(t, join(dir, "c"), nil, 0644)
	ok(t, unix.Link(join(dir, "c"), join(dir, "c2")), "link")
	writeFile(t, join(dir, "d"), nil, 0644)
	ok(t, unix.Rename(join(dir, "d"), join(dir, "c2")), "rename over a link")
	if st := lstat(t, join(dir, "c")); st.Nlink != 1 {
		t.Fatalf("nlink of the replaced file's other link %d", st.Nlink)
	}
	// A file may replace a symlink (the link, not its target, goes).
	ok(t, unix.Symlink("c", join(dir, "l")), "symlink")
	ok(t, unix.Rename(b, join(dir, "l")), "rename over symlink")
	if st := lstat(t, join(dir, "l")); st.Mode&unix.S_IFMT != unix.S_IFREG {
		t.Fatalf("symlink not replaced: mode %o", st.Mode)
	}
	lstat(t, join(dir, "c"))
}

func testRenameOverEmptyDir(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	mkdir(t, a, 0755)
	writeFile(t, join(a, "inside"), []byte("x"), 0644)
	mkdir(t, b, 0755)
	ia := lstat(t, a).Ino
	nl := lstat(t, dir).Nlink
	ok(t, unix.Rename(a, b), "rename dir over empty dir")
	if st := lstat(t, b); st.Ino != ia {
		t.Fatalf("target ino %d, want %d", st.Ino, ia)
	}
	wantContent(t, join(b, "inside"), []byte("x"))
	if st := lstat(t, dir); st.Nlink != nl-1 {
		t.Fatalf("parent nlink %d, want %d (one subdirectory fewer)", st.Nlink, nl-1)
	}
}

func testRenameErrors(t *testing.T, dir string) {
	f, g := join(dir, "f"), join(dir, "g")
	writeFile(t, f, nil, 0644)
	writeFile(t, g, nil, 0644)
	d, full := join(dir, "d"), join(dir, "full")
	mkdir(t, d, 0755)
	mkdir(t, full, 0755)
	writeFile(t, join(full, "x"), nil, 0644)
	mkdir(t, join(d, "sub"), 0755)
	wantErr(t, unix.Rename(d, full), unix.ENOTEMPTY, "dir over non-empty dir")
	wantErr(t, unix.Rename(d, f), unix.ENOTDIR, "dir over file")
	wantErr(t, unix.Rename(f, d), unix.EISDIR, "file over dir")
	wantErr(t, unix.Rename(d, join(d, "sub", "inside")), unix.EINVAL, "dir into its own subtree")
	wantErr(t, unix.Rename(d, join(d, "new")), unix.EINVAL, "dir into itself")
	wantErr(t, unix.Rename(join(dir, "missing"), join(dir, "x")), unix.ENOENT, "missing source")
	wantErr(t, unix.Rename(f, join(dir, "missing", "x")), unix.ENOENT, "into a missing dir")
	wantErr(t, unix.Rename(f, join(g, "x")), unix.ENOTDIR, "under a file")
	wantErr(t, unix.Rename(f, g+"/"), unix.ENOTDIR, "file to name with trailing slash")
	wantErr(t, unix.Rename(join(d, "."), join(dir, "x")), unix.EBUSY, "rename .")
	wantErrIn(t, unix.Rename(join(d, "sub"), join(d, ".")), "rename over .", unix.EBUSY, unix.EINVAL)
	// Nothing changed.
	for _, p := range []string{f, g, d, full, join(d, "sub"), join(full, "x")} {
		lstat(t, p)
	}
	if st := lstat(t, d); st.Nlink != 3 {
		t.Fatalf("nlink of d %d after failed renames", st.Nlink)
	}
}

func testRenameAcrossDirs(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	mkdir(t, a, 0755)
	mkdir(t, b, 0755)
	writeFile(t, join(a, "f"), []byte("moving"), 0644)
	ok(t, unix.Rename(join(a, "f"), join(b, "g")), "rename across dirs")
	wantContent(t, join(b, "g"), []byte("moving"))
	na, err := readNames(a)
	ok(t, err, "readdir a")
	nb, err := readNames(b)
	ok(t, err, "readdir b")
	if len(na) != 0 || len(nb) != 1 || nb[0] != "g" {
		t.Fatalf("after move: a=%q b=%q", na, nb)
	}
	// A deep tree moves in one step.
	mkdir(t, join(a, "t"), 0755)
	mkdir(t, join(a, "t", "u"), 0755)
	writeFile(t, join(a, "t", "u", "leaf"), []byte("leaf"), 0644)
	ok(t, unix.Rename(join(a, "t"), join(b, "t")), "move tree")
	wantContent(t, join(b, "t", "u", "leaf"), []byte("leaf"))
}

func testRenameDirDotDot(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	mkdir(t, a, 0755)
	mkdir(t, b, 0755)
	mkdir(t, join(a, "x"), 0755)
	la, lb := lstat(t, a).Nlink, lstat(t, b).Nlink
	ok(t, unix.Rename(join(a, "x"), join(b, "x")), "move dir")
	if st := lstat(t, a); st.Nlink != la-1 {
		t.Fatalf("old parent nlink %d, want %d", st.Nlink, la-1)
	}
	if st := lstat(t, b); st.Nlink != lb+1 {
		t.Fatalf("new parent nlink %d, want %d", st.Nlink, lb+1)
	}
	if st := lstat(t, join(b, "x", "..")); st.Ino != lstat(t, b).Ino {
		t.Fatalf("x/.. is ino %d, want b's %d", st.Ino, lstat(t, b).Ino)
	}
	ents, err := readDirents(join(b, "x"))
	ok(t, err, "readdir x")
	for _, e := range ents {
		if e.Name == ".." && e.Ino != lstat(t, b).Ino {
			t.Fatalf("readdir .. of moved dir: ino %d, want %d", e.Ino, lstat(t, b).Ino)
		}
	}
	// Moving it up one level and a rename within the same parent.
	ok(t, unix.Rename(join(b, "x"), join(dir, "x")), "move up")
	if st := lstat(t, join(dir, "x", "..")); st.Ino != lstat(t, dir).Ino {
		t.Fatalf("x/.. after moving up is wrong")
	}
	nl := lstat(t, dir).Nlink
	ok(t, unix.Rename(join(dir, "x"), join(dir, "y")), "rename in place")
	if st := lstat(t, dir); st.Nlink != nl {
		t.Fatalf("rename in place changed parent nlink %d -> %d", nl, st.Nlink)
	}
}

func testRenameSameFile(t *testing.T, dir string) {
	f := join(dir, "f")
	writeFile(t, f, []byte("same"), 0644)
	ok(t, unix.Link(f, join(dir, "h")), "link")
	// Renaming a name onto itself, or onto another link of the same inode,
	// does nothing and succeeds.
	ok(t, unix.Rename(f, f), "rename onto itself")
	ok(t, unix.Rename(f, join(dir, "h")), "rename onto another link")
	lstat(t, f)
	lstat(t, join(dir, "h"))
	if st := lstat(t, f); st.Nlink != 2 {
		t.Fatalf("nlink %d, want 2", st.Nlink)
	}
	mkdir(t, join(dir, "d"), 0755)
	ok(t, unix.Rename(join(dir, "d"), join(dir, "d")), "rename dir onto itself")
	wantContent(t, f, []byte("same"))
}

func testRenameTimes(t *testing.T, dir string) {
	mkdir(t, join(dir, "src"), 0755)
	mkdir(t, join(dir, "dst"), 0755)
	f := join(dir, "src", "f")
	writeFile(t, f, []byte("x"), 0644)
	old := unix.Timespec{Sec: 1000000000}
	for _, p := range []string{f, join(dir, "src"), join(dir, "dst")} {
		ok(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, old}, 0), "utimens")
	}
	c0 := lstat(t, f).Ctim
	tickSleep()
	ok(t, unix.Rename(f, join(dir, "dst", "g")), "rename")
	st := lstat(t, join(dir, "dst", "g"))
	// ext4 updates the ctime of the moved inode, not its mtime.
	if !tsAfter(st.Ctim, c0) {
		t.Fatalf("rename did not update the moved inode's ctime")
	}
	if !tsEqual(st.Mtim, old) || !tsEqual(st.Atim, old) {
		t.Fatalf("rename changed the moved inode's mtime/atime")
	}
	for _, p := range []string{join(dir, "src"), join(dir, "dst")} {
		if st := lstat(t, p); !tsAfter(st.Mtim, old) || !tsAfter(st.Ctim, old) {
			t.Fatalf("rename did not update mtime/ctime of %s", p)
		}
	}
}

func testRenameNoReplace(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	writeFile(t, a, []byte("a"), 0644)
	writeFile(t, b, []byte("b"), 0644)
	// The VFS itself refuses an existing target, so try a new name first to
	// learn whether the file system supports the flag at all.
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, join(dir, "c"), unix.RENAME_NOREPLACE)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("renameat2 RENAME_NOREPLACE not supported here (EINVAL)")
	}
	ok(t, err, "RENAME_NOREPLACE to a new name")
	wantContent(t, join(dir, "c"), []byte("a"))
	err = unix.Renameat2(unix.AT_FDCWD, join(dir, "c"), unix.AT_FDCWD, b, unix.RENAME_NOREPLACE)
	wantErr(t, err, unix.EEXIST, "RENAME_NOREPLACE over existing")
	wantContent(t, b, []byte("b"))
	wantContent(t, join(dir, "c"), []byte("a"))
}

func testRenameExchange(t *testing.T, dir string) {
	a := join(dir, "a")
	writeFile(t, a, []byte("file a"), 0644)
	d := join(dir, "d")
	mkdir(t, d, 0755)
	writeFile(t, join(d, "in"), []byte("in d"), 0644)
	ia, id := lstat(t, a).Ino, lstat(t, d).Ino
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, d, unix.RENAME_EXCHANGE)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("renameat2 RENAME_EXCHANGE not supported here (EINVAL)")
	}
	ok(t, err, "RENAME_EXCHANGE file and dir")
	if st := lstat(t, a); st.Ino != id || st.Mode&unix.S_IFMT != unix.S_IFDIR {
		t.Fatalf("after exchange a is ino %d mode %o", st.Ino, st.Mode)
	}
	if st := lstat(t, d); st.Ino != ia {
		t.Fatalf("after exchange d is ino %d", st.Ino)
	}
	wantContent(t, join(a, "in"), []byte("in d"))
	wantContent(t, d, []byte("file a"))
	// Exchange across directories updates both '..'.
	mkdir(t, join(dir, "p"), 0755)
	mkdir(t, join(dir, "p", "x"), 0755)
	mkdir(t, join(dir, "q"), 0755)
	writeFile(t, join(dir, "q", "y"), nil, 0644)
	np, nq := lstat(t, join(dir, "p")).Nlink, lstat(t, join(dir, "q")).Nlink
	ok(t, unix.Renameat2(unix.AT_FDCWD, join(dir, "p", "x"), unix.AT_FDCWD, join(dir, "q", "y"), unix.RENAME_EXCHANGE), "exchange across dirs")
	if st := lstat(t, join(dir, "q", "y", "..")); st.Ino != lstat(t, join(dir, "q")).Ino {
		t.Fatalf("'..' of the exchanged dir not updated")
	}
	if lstat(t, join(dir, "p")).Nlink != np-1 || lstat(t, join(dir, "q")).Nlink != nq+1 {
		t.Fatalf("parent link counts after exchange: p %d (was %d), q %d (was %d)",
			lstat(t, join(dir, "p")).Nlink, np, lstat(t, join(dir, "q")).Nlink, nq)
	}
	err = unix.Renameat2(unix.AT_FDCWD, join(dir, "p", "x"), unix.AT_FDCWD, join(dir, "missing"), unix.RENAME_EXCHANGE)
	wantErr(t, err, unix.ENOENT, "RENAME_EXCHANGE with a missing target")
}

// testRenameAtomicReplace: while one goroutine repeatedly renames new files
// over a name, another stats that name; it must never be missing.
func testRenameAtomicReplace(t *testing.T, dir string) {
	target := join(dir, "target")
	writeFile(t, target, []byte("v0"), 0644)
	const rounds = 400
	var stop atomic.Bool
	var misses, checks atomic.Int64
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			var st unix.Stat_t
			for !stop.Load() {
				if err := unix.Stat(target, &st); err != nil {
					misses.Add(1)
				}
				// Opening and reading the name must also always work.
				if b, err := readSmall(target); err != nil {
					misses.Add(1)
				} else if len(b) < 2 || b[0] != 'v' {
					misses.Add(1)
				}
				checks.Add(1)
			}
		}()
	}
	// The renames go on until the readers have checked often enough too:
	// on a loaded machine they may not have run at all in 400 rounds.
	const minChecks = 50
	deadline := time.Now().Add(20 * time.Second)
	for i := 1; (i <= rounds || checks.Load() < minChecks) && time.Now().Before(deadline); i++ {
		tmp := join(dir, fmt.Sprintf("tmp%d", i%3))
		if err := writeSmall(tmp, fmt.Sprintf("v%d", i)); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("write tmp: %v", err)
		}
		if err := unix.Rename(tmp, target); err != nil {
			stop.Store(true)
			wg.Wait()
			t.Fatalf("rename: %v", err)
		}
	}
	stop.Store(true)
	wg.Wait()
	if m := misses.Load(); m != 0 {
		t.Fatalf("target was missing or unreadable in %d of %d checks during renames", m, checks.Load())
	}
	if n := checks.Load(); n < minChecks {
		t.Fatalf("readers made only %d checks in 20 s", n)
	}
}

func readSmall(p string) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	buf := make([]byte, 64)
	n, err := unix.Read(fd, buf)
	return buf[:max(n, 0)], err
}

func writeSmall(p, s string) error {
	fd, err := unix.Open(p, unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC, 0644)
	if err != nil {
		return err
	}
	_, err = unix.Write(fd, []byte(s))
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

func testRenameOpenFile(t *testing.T, dir string) {
	// An open descriptor follows the inode through renames.
	mkdir(t, join(dir, "d"), 0755)
	p := join(dir, "f")
	writeFile(t, p, []byte("abc"), 0644)
	fd := open(t, p, unix.O_RDWR, 0)
	ok(t, unix.Rename(p, join(dir, "d", "g")), "rename")
	pwrite(t, fd, []byte("XYZ"), 3)
	wantContent(t, join(dir, "d", "g"), []byte("abcXYZ"))
}

// RENAME_WHITEOUT (what overlayfs does in its upper layer): the source
// moves, and a whiteout (a character device 0:0, mode 0) takes its old name,
// in one step; with RENAME_NOREPLACE an existing target is EEXIST and
// nothing changes; with RENAME_EXCHANGE it is EINVAL.
func testRenameWhiteout(t *testing.T, dir string) {
	a, b := join(dir, "a"), join(dir, "b")
	writeFile(t, a, []byte("moved"), 0644)
	ia := lstat(t, a).Ino
	err := unix.Renameat2(unix.AT_FDCWD, a, unix.AT_FDCWD, b, unix.RENAME_WHITEOUT)
	if errors.Is(err, unix.EINVAL) {
		t.Skip("renameat2 RENAME_WHITEOUT not supported here (EINVAL)")
	}
	ok(t, err, "RENAME_WHITEOUT")
	if st := lstat(t, b); st.Ino != ia {
		t.Fatalf("target is ino %d, want the source's %d", st.Ino, ia)
	}
	wantContent(t, b, []byte("moved"))
	st := lstat(t, a)
	if st.Mode != unix.S_IFCHR || st.Rdev != 0 || st.Nlink != 1 || st.Uid != uint32(os.Geteuid()) {
		t.Fatalf("whiteout: mode %o rdev %d nlink %d uid %d; want a 0:0 character device with mode 0", st.Mode, st.Rdev, st.Nlink, st.Uid)
	}
	if st.Ino == ia {
		t.Fatal("the whiteout shares the moved file's inode")
	}
	if ents, err := os.ReadDir(dir); err != nil || len(ents) != 2 {
		t.Fatalf("directory holds %v (%v), want a and b", ents, err)
	}
	// A directory moves with a whiteout too, across directories, and its
	// old parent loses the link of its '..'.
	mkdir(t, join(dir, "p"), 0755)
	mkdir(t, join(dir, "p", "d"), 0755)
	mkdir(t, join(dir, "q"), 0755)
	np := lstat(t, join(dir, "p")).Nlink
	ok(t, unix.Renameat2(unix.AT_FDCWD, join(dir, "p", "d"), unix.AT_FDCWD, join(dir, "q", "d"), unix.RENAME_WHITEOUT), "RENAME_WHITEOUT of a directory")
	if st := lstat(t, join(dir, "p", "d")); st.Mode != unix.S_IFCHR || st.Rdev != 0 {
		t.Fatalf("whiteout of the directory: mode %o rdev %d", st.Mode, st.Rdev)
	}
	if n := lstat(t, join(dir, "p")).Nlink; n != np-1 {
		t.Fatalf("old parent nlink %d, want %d", n, np-1)
	}
	if st := lstat(t, join(dir, "q", "d", "..")); st.Ino != lstat(t, join(dir, "q")).Ino {
		t.Fatal("'..' of the moved directory not updated")
	}
	// With RENAME_NOREPLACE onto an existing name: EEXIST, nothing changes.
	writeFile(t, join(dir, "c"), []byte("c"), 0644)
	err = unix.Renameat2(unix.AT_FDCWD, join(dir, "c"), unix.AT_FDCWD, b, unix.RENAME_WHITEOUT|unix.RENAME_NOREPLACE)
	if !errors.Is(err, unix.EEXIST) {
		t.Fatalf("RENAME_WHITEOUT|RENAME_NOREPLACE onto an existing name: %v, want EEXIST", err)
	}
	wantContent(t, join(dir, "c"), []byte("c"))
	wantContent(t, b, []byte("moved"))
	// Replacing an existing target: it goes, the whiteout stays.
	ok(t, unix.Renameat2(unix.AT_FDCWD, join(dir, "c"), unix.AT_FDCWD, b, unix.RENAME_WHITEOUT), "RENAME_WHITEOUT over a file")
	wantContent(t, b, []byte("c"))
	if st := lstat(t, join(dir, "c")); st.Mode != unix.S_IFCHR {
		t.Fatalf("whiteout after replacing: mode %o", st.Mode)
	}
	err = unix.Renameat2(unix.AT_FDCWD, b, unix.AT_FDCWD, join(dir, "e"), unix.RENAME_WHITEOUT|unix.RENAME_EXCHANGE)
	if !errors.Is(err, unix.EINVAL) {
		t.Fatalf("RENAME_WHITEOUT|RENAME_EXCHANGE: %v, want EINVAL", err)
	}
}
