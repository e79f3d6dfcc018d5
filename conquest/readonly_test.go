package conquest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"testing"

	"conquest/pram"
)

func sumImages(t *testing.T, paths ...string) [sha256.Size]byte {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
	}
	var s [sha256.Size]byte
	copy(s[:], h.Sum(nil))
	return s
}

// TestReadOnlyFS: a file system opened read-only reads as it was written
// (small and large files, a directory, a symlink, an xattr) and checks
// clean, while every change fails with ErrReadOnly, before an error of its
// own only where ext4's VFS would give that first (an open of a directory
// for writing); fsync and Sync succeed with nothing to do, no read updates
// atime, and neither image changes by a byte. This is also what a
// read-only mount remounted read-write gets from the core.
func TestReadOnlyFS(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true})
	small := []byte("small file")
	large := bytes.Repeat([]byte("0123456789abcdef"), 20<<10) // 320 KiB: on the disk
	f := create(t, fs, RootIno, "small", small)
	g := create(t, fs, RootIno, "large", large)
	d := mkdir(t, fs, RootIno, "dir")
	_, err := fs.Symlink(RootIno, "link", "small", user)
	must(t, err)
	must(t, fs.SetXattr(f.Ino, "user.k", []byte("v"), 0))
	env.clock.Advance(86400 * 2) // atime would be due under relatime
	must(t, fs.Close())
	before := sumImages(t, env.path, env.disk)

	fs, err = Open(env.path, env.disk, Options{ReadOnly: true, Logf: env.logf, Now: env.clock.Now})
	must(t, err)
	env.current = fs // the cleanup checks it and closes it
	if !fs.ReadOnly() || !fs.Arena().ReadOnly() {
		t.Fatal("not read-only")
	}
	for _, e := range fs.Check() {
		t.Errorf("Check: %v", e)
	}
	if b := readAll(t, fs, f.Ino); !bytes.Equal(b, small) {
		t.Errorf("small: %q", b)
	}
	if b := readAll(t, fs, g.Ino); !bytes.Equal(b, large) {
		t.Errorf("large: %d bytes differ", len(b))
	}
	if target, err := fs.Readlink(lookup(t, fs, RootIno, "link").Ino); err != nil || target != "small" {
		t.Errorf("readlink: %q %v", target, err)
	}
	if v, err := fs.GetXattr(f.Ino, "user.k"); err != nil || string(v) != "v" {
		t.Errorf("getxattr: %q %v", v, err)
	}
	if at, err := fs.GetAttr(f.Ino); err != nil || at.Atime != f.Atime {
		t.Errorf("a read on a read-only file system changed atime: %v -> %v (%v)", f.Atime, at.Atime, err)
	}
	fs.SetNoAtime(false) // a remount read-write asks for atime updates again
	readAll(t, fs, g.Ino)
	if at, err := fs.GetAttr(g.Ino); err != nil || at.Atime != g.Atime {
		t.Errorf("after SetNoAtime(false), a read changed atime: %v -> %v (%v)", g.Atime, at.Atime, err)
	}

	h, err := fs.Open(g.Ino, 0)
	must(t, err)
	must(t, fs.Fsync(g.Ino, false))
	must(t, fs.Sync())
	fs.Release(g.Ino, h)
	_, err = fs.Open(d.Ino, O_RDWR)
	mustErr(t, err, ErrIsDir)

	rw := func(what string, err error) {
		t.Helper()
		if !errors.Is(err, ErrReadOnly) {
			t.Errorf("%s on a read-only file system: %v, want ErrReadOnly", what, err)
		}
	}
	_, err = fs.Open(f.Ino, O_WRONLY)
	rw("open for writing", err)
	_, err = fs.Open(f.Ino, O_RDWR|O_TRUNC)
	rw("open O_TRUNC", err)
	_, err = fs.Write(f.Ino, h, 0, []byte("x"), false)
	rw("write", err)
	_, err = fs.Write(g.Ino, h, 1<<20, []byte("x"), false)
	rw("write to a large file", err)
	_, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetSize, Size: 1}, root)
	rw("truncate", err)
	_, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetMode, Mode: 0o600}, root)
	rw("chmod", err)
	rw("fallocate", fs.Fallocate(g.Ino, 0, 4<<20, 0))
	_, _, err = fs.Create(RootIno, "new", 0o644, O_RDWR|O_CREAT, root)
	rw("create", err)
	_, _, err = fs.CreateTmpfile(RootIno, 0o644, O_RDWR, root)
	rw("O_TMPFILE", err)
	_, err = fs.Mkdir(RootIno, "newdir", 0o755, root)
	rw("mkdir", err)
	_, err = fs.Mknod(RootIno, "fifo", 0o10644, 0, root)
	rw("mknod", err)
	_, err = fs.Symlink(RootIno, "l2", "x", root)
	rw("symlink", err)
	_, err = fs.Link(f.Ino, RootIno, "hard")
	rw("link", err)
	rw("unlink", fs.Unlink(RootIno, "small"))
	rw("rmdir", fs.Rmdir(RootIno, "dir"))
	rw("rename", fs.Rename(RootIno, "small", RootIno, "moved", 0))
	rw("setxattr", fs.SetXattr(f.Ino, "user.k", []byte("w"), 0))
	rw("removexattr", fs.RemoveXattr(f.Ino, "user.k"))
	_, err = fs.Repair(RepairOptions{})
	rw("repair", err)
	for _, e := range fs.Check() {
		t.Errorf("Check after refused changes: %v", e)
	}
	must(t, fs.Close())
	if after := sumImages(t, env.path, env.disk); after != before {
		t.Fatal("a read-only open changed the images")
	}

	// A crash (Abandon) leaves the file system needing recovery: refused.
	fs = env.open()
	create(t, fs, RootIno, "after", small)
	fs.ds.Close()
	must(t, fs.a.Abandon())
	fs.closed = true
	_, err = Open(env.path, env.disk, Options{ReadOnly: true, Logf: env.logf})
	if !errors.Is(err, pram.ErrNeedsRecovery) {
		t.Fatalf("read-only open after a crash: %v, want ErrNeedsRecovery", err)
	}
	fs = env.open() // recovers
	lookup(t, fs, RootIno, "after")
}
