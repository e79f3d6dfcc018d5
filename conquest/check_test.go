package conquest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/dgryski/go-farm"

	"conquest/alloc"
	"conquest/pram"
)

// corrupt applies f in a committed transaction, as damage would.
func corrupt(fs *FS, f func(tx *pram.Tx)) {
	tx := fs.a.Begin()
	f(tx)
	tx.Commit()
}

// TestCheckFindsDamage damages a fresh file system in one way per case and
// expects Check to report it.
func TestCheckFindsDamage(t *testing.T) {
	cases := []struct {
		name   string
		damage func(t *testing.T, fs *FS, f, d Attr)
		want   string
	}{
		{"file nlink", func(t *testing.T, fs *FS, f, d Attr) {
			in, _ := fs.inode(f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(in.off+iNlink, 2) })
		}, "nlink 2, but 1 directory entries"},
		{"dir nlink", func(t *testing.T, fs *FS, f, d Attr) {
			in, _ := fs.inode(d.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(in.off+iNlink, 5) })
		}, "want 2 + 0 subdirectories"},
		{"parent pointer", func(t *testing.T, fs *FS, f, d Attr) {
			in, _ := fs.inode(d.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iParent, uint64(d.Ino)) })
		}, "has parent"},
		{"leak", func(t *testing.T, fs *FS, f, d Attr) {
			corrupt(fs, func(tx *pram.Tx) {
				if _, err := fs.h.Alloc(tx, 100); err != nil {
					t.Fatal(err)
				}
			})
		}, "leak"},
		{"unreachable inode", func(t *testing.T, fs *FS, f, d Attr) {
			root, _ := fs.inode(d.Ino)
			corrupt(fs, func(tx *pram.Tx) {
				if _, _, err := fs.dir(root).Delete(tx, []byte("g")); err != nil {
					t.Fatal(err)
				}
			})
		}, "inode count"},
		{"entry type", func(t *testing.T, fs *FS, f, d Attr) {
			root, _ := fs.inode(RootIno)
			corrupt(fs, func(tx *pram.Tx) {
				if _, _, err := fs.dir(root).Replace(tx, []byte("f"), uint64(f.Ino), DT_DIR); err != nil {
					t.Fatal(err)
				}
			})
		}, "has type"},
		{"orphan flag", func(t *testing.T, fs *FS, f, d Attr) {
			in, _ := fs.inode(f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set32(in.off+iFlags, in.flags()|flagOrphan) })
		}, "flagged orphan but not on the list"},
		{"allocd", func(t *testing.T, fs *FS, f, d Attr) {
			in, _ := fs.inode(f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iAllocd, 12345) })
		}, "inode records 12345 bytes"},
		{"wild data pointer", func(t *testing.T, fs *FS, f, d Attr) {
			in, _ := fs.inode(f.Ino)
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, 1<<40) })
		}, "data block"},
		{"inode count", func(t *testing.T, fs *FS, f, d Attr) {
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(pram.RootOff(slotInodes), 99) })
		}, "inode count is 99"},
		{"generation", func(t *testing.T, fs *FS, f, d Attr) {
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(pram.RootOff(slotGen), 1) })
		}, "above the counter"},
		{"fallocate record of a directory", func(t *testing.T, fs *FS, f, d Attr) {
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(pram.RootOff(slotFalloc), uint64(d.Ino)) })
		}, "unfinished fallocate names inode"},
		{"fallocate record of nothing", func(t *testing.T, fs *FS, f, d Attr) {
			corrupt(fs, func(tx *pram.Tx) { tx.Set64(pram.RootOff(slotFallocEnd), 1<<20) })
		}, "names no file but holds a range"},
		{"orphan list with a live file", func(t *testing.T, fs *FS, f, d Attr) {
			in, _ := fs.inode(f.Ino)
			corrupt(fs, func(tx *pram.Tx) { fs.orphanAdd(tx, in) })
		}, "unfinished truncate"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs, _ := newTestFSOpt(t, fsOpt{noCheck: true})
			f := create(t, fs, RootIno, "f", pattern(3000, 1))
			d := mkdir(t, fs, RootIno, "d")
			create(t, fs, d.Ino, "g", nil)
			if errs := fs.Check(); len(errs) > 0 {
				t.Fatalf("clean FS: %v", errs)
			}
			c.damage(t, fs, f, d)
			errs := fs.Check()
			var all []string
			for _, e := range errs {
				all = append(all, e.Error())
			}
			if !strings.Contains(strings.Join(all, "\n"), c.want) {
				t.Fatalf("Check did not report %q; got %q", c.want, all)
			}
		})
	}
}

// TestDamageIsEIO: a damaged inode makes operations fail with ErrIO, not
// crash the daemon.
func TestDamageIsEIO(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{noCheck: true})
	f := create(t, fs, RootIno, "f", pattern(10000, 1))
	in, _ := fs.inode(f.Ino)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(in.off+iData, 1<<50) })
	_, err := fs.Read(f.Ino, 0, 0, make([]byte, 100))
	mustErr(t, err, ErrIO)
	_, err = fs.Write(f.Ino, 0, 0, []byte("x"), false)
	mustErr(t, err, ErrIO)
	fs.Forget(f.Ino, 1) // so that Unlink frees the data at once
	mustErr(t, fs.Unlink(RootIno, "f"), ErrIO)
	// The failed unlink was rolled back: the name is still there.
	lookup(t, fs, RootIno, "f")
	found := false
	for _, l := range env.logs {
		found = found || strings.Contains(l, "aborted")
	}
	if !found {
		t.Fatalf("no log of the aborted operation: %q", env.logs)
	}
	// Each failure is one line that names the damage and says fsck; no
	// stack, which would look like a crash.
	for _, l := range env.logs {
		if strings.Contains(l, "goroutine ") || strings.Contains(l, "panic") {
			t.Errorf("damage logged with a stack: %q", l)
		}
		if (strings.Contains(l, "aborted") || strings.Contains(l, "failed")) &&
			(!strings.Contains(l, "conquest fsck") || !strings.Contains(l, "the arena is damaged")) {
			t.Errorf("log without the damage or the fsck hint: %q", l)
		}
	}
	if len(env.logs) < 3 {
		t.Errorf("%d logs, want one for each failure: %q", len(env.logs), env.logs)
	}
	// A panic of another kind may be a bug: the first is logged with its
	// stack, the next in one line.
	for i := range 2 {
		err = func() (err error) {
			defer fs.guard(&err)
			var s []int
			_ = s[i+3]
			return nil
		}()
		mustErr(t, err, ErrIO)
	}
	stacks := 0
	for _, l := range env.logs {
		if strings.Contains(l, "index out of range") && strings.Contains(l, "goroutine ") {
			stacks++
		}
	}
	if stacks != 1 {
		t.Errorf("%d logs of another panic have a stack, want the first only: %q", stacks, env.logs)
	}
	// Damaged xattr blob and symlink.
	g := create(t, fs, RootIno, "g", nil)
	must(t, fs.SetXattr(g.Ino, "user.a", []byte("v"), 0))
	gin, _ := fs.inode(g.Ino)
	corrupt(fs, func(tx *pram.Tx) { tx.Set32(gin.xattr(), 1<<30) })
	_, err = fs.GetXattr(g.Ino, "user.a")
	mustErr(t, err, ErrIO)
	s, err := fs.Symlink(RootIno, "s", "target", user)
	must(t, err)
	sin, _ := fs.inode(s.Ino)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(sin.off+iSize, 1<<40) })
	_, err = fs.Readlink(s.Ino)
	mustErr(t, err, ErrIO)
	if errs := fs.Check(); len(errs) == 0 {
		t.Fatal("Check found nothing")
	}
}

func TestOpenRefusesBadImages(t *testing.T) {
	dir := t.TempDir()
	junk := filepath.Join(dir, "junk")
	must(t, os.WriteFile(junk, make([]byte, 2<<20), 0o600))
	_, err := Open(junk, "", Options{})
	if !errors.Is(err, pram.ErrNotConquest) || !strings.Contains(err.Error(), junk) {
		t.Fatalf("Open(zeros) = %v", err)
	}
	_, err = Open(filepath.Join(dir, "missing"), "", Options{})
	if !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Open(missing) = %v", err)
	}
	// A pram arena without a file system on it.
	bare := filepath.Join(dir, "bare")
	a, err := pram.Format(bare, pram.Options{Size: 2 << 20})
	must(t, err)
	must(t, a.Close())
	if _, err := Open(bare, "", Options{}); err == nil {
		t.Fatal("opened an arena without a heap")
	}
	// A file system whose root inode is damaged.
	p := filepath.Join(dir, "fs")
	must(t, Mkfs(p, "", MkfsOptions{PramSize: 2 << 20}))
	fs, err := Open(p, "", Options{})
	must(t, err)
	root, _ := fs.inode(RootIno)
	corrupt(fs, func(tx *pram.Tx) { tx.Set64(root.off+iMagic, 0) })
	// Damaged under a live mount: EIO, not ESTALE (the kernel showed
	// "Stale file handle" for the mount point).
	if _, err := fs.GetAttr(RootIno); !errors.Is(err, ErrIO) || errors.Is(err, ErrStale) {
		t.Errorf("GetAttr of a damaged root = %v, want ErrIO", err)
	}
	if _, err := fs.Lookup(RootIno, "x"); !errors.Is(err, ErrIO) {
		t.Errorf("Lookup in a damaged root = %v, want ErrIO", err)
	}
	must(t, fs.Close())
	_, err = Open(p, "", Options{})
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Fatalf("Open(damaged root) = %v", err)
	}
	// Locked by another opener.
	q := filepath.Join(dir, "q")
	must(t, Mkfs(q, "", MkfsOptions{PramSize: 2 << 20}))
	fs, err = Open(q, "", Options{})
	must(t, err)
	defer fs.Close()
	if _, err := Open(q, "", Options{}); !errors.Is(err, pram.ErrLocked) {
		t.Fatalf("second Open = %v", err)
	}
	if err := Mkfs(q, "/dev/null", MkfsOptions{PramSize: 2 << 20}); err == nil || !strings.Contains(err.Error(), "/dev/null") {
		t.Fatalf("Mkfs with /dev/null as the disk = %v", err)
	}
}

// TestOpenRefusesNewerHeap: a heap header that is intact but of another
// format version (a newer build's) is refused as such, with nothing
// written to either image (an outside review: it was called damage, and
// every refused open counted a mount in the arena).
func TestOpenRefusesNewerHeap(t *testing.T) {
	dir := t.TempDir()
	p, d := filepath.Join(dir, "p"), filepath.Join(dir, "d")
	must(t, Mkfs(p, d, MkfsOptions{PramSize: 16 << 20, DiskSize: 16 << 20}))
	img, err := os.ReadFile(p)
	must(t, err)
	// The heap header (alloc/layout.go, pinned): magic, then the version
	// at 8, and at 48 the farm hash of its first 48 bytes.
	hdr := binary.LittleEndian.Uint64(img[pram.RootOff(0):])
	b := img[hdr : hdr+56]
	if string(b[:8]) != alloc.HeapMagic || binary.LittleEndian.Uint32(b[8:]) != alloc.HeapVersion ||
		binary.LittleEndian.Uint64(b[48:]) != farm.Hash64(b[:48]) {
		t.Fatalf("the heap header at %#x is not laid out as this test expects: %x", hdr, b)
	}
	binary.LittleEndian.PutUint32(b[8:], alloc.HeapVersion+1)
	binary.LittleEndian.PutUint64(b[48:], farm.Hash64(b[:48]))
	must(t, os.WriteFile(p, img, 0o600))
	disk, err := os.ReadFile(d)
	must(t, err)
	for _, ro := range []bool{false, true} {
		fs, err := Open(p, d, Options{ReadOnly: ro})
		if err == nil {
			fs.Close()
			t.Fatalf("read-only %v: opened a heap of version %d", ro, alloc.HeapVersion+1)
		}
		if !errors.Is(err, pram.ErrVersion) || errors.Is(err, alloc.ErrCorrupt) || !strings.Contains(err.Error(), p) {
			t.Errorf("read-only %v: Open = %v; want pram.ErrVersion naming %s", ro, err, p)
		}
	}
	after, err := os.ReadFile(p)
	must(t, err)
	afterDisk, err := os.ReadFile(d)
	must(t, err)
	if !bytes.Equal(after, img) || !bytes.Equal(afterDisk, disk) {
		t.Error("a refused open wrote to the images")
	}
}

func TestStatFSAndUsage(t *testing.T) {
	fs, _ := newTestFS(t)
	st0 := fs.StatFS()
	if st0.Bsize != 4096 || st0.Namelen != 255 || st0.Blocks == 0 || st0.Bfree > st0.Blocks || st0.Files != st0.Ffree+1 {
		t.Fatalf("statfs %+v", st0)
	}
	f := create(t, fs, RootIno, "f", pattern(1<<20, 1))
	mkdir(t, fs, RootIno, "d")
	_, err := fs.Symlink(RootIno, "s", "f", user)
	must(t, err)
	_, err = fs.Mknod(RootIno, "p", S_IFIFO|0o600, 0, user)
	must(t, err)
	st1 := fs.StatFS()
	if st0.Bfree-st1.Bfree < 256 || st1.Files-st1.Ffree != 5 {
		t.Fatalf("after 1 MiB and 4 inodes: %+v (was %+v)", st1, st0)
	}
	u := fs.Usage()
	if u.Files != 1 || u.Dirs != 2 || u.Symlinks != 1 || u.Specials != 1 || u.Inodes != 5 ||
		u.FileBytes != 1<<20 || u.FileAllocated != 1<<20 || u.ArenaBytes != 32<<20 {
		t.Fatalf("usage %+v", u)
	}
	must(t, fs.Fsync(f.Ino, false))
	must(t, fs.FsyncDir(RootIno))
	mustErr(t, fs.Fsync(999999, false), ErrStale)
}
