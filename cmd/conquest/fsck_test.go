package main

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"conquest/conquest"
	"conquest/internal/mounttest"
	"conquest/pram"
)

// TestFsckRepair: a damaged image makes fsck exit 4, fsck --repair fixes
// it and exits 1, and fsck then exits 0; the files are intact. It needs no
// FUSE: fsck works on the images.
func TestFsckRepair(t *testing.T) {
	c := &runner{t: t, bin: mounttest.Binary(t), home: t.TempDir()}
	dir := t.TempDir()
	img, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", img, "--disk", disk, "--pram-size", "16M", "--disk-size", "16M")

	data := bytes.Repeat([]byte("conquest "), 1000)
	fsys, err := conquest.Open(img, disk, conquest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	at, h, err := fsys.Create(conquest.RootIno, "f", 0o644, conquest.O_CREAT|conquest.O_RDWR, conquest.Cred{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := fsys.Write(at.Ino, h, 0, data, false); err != nil {
		t.Fatal(err)
	}
	fsys.Release(at.Ino, h)
	// Damage: a leaked allocation and a wrong inode count (root slot 4).
	a := fsys.Arena()
	tx := a.Begin()
	if _, err := fsys.Heap().Alloc(tx, 1000); err != nil {
		t.Fatal(err)
	}
	tx.Set64(pram.RootOff(4), 42)
	tx.Commit()
	if err := fsys.Close(); err != nil {
		t.Fatal(err)
	}

	// --no-write finds the same and writes nothing, not even the mount
	// counter a plain fsck writes.
	before := sumFiles(t, img, disk)
	out, errs, code := c.run("fsck", "-n", "--pram", img, "--disk", disk)
	if code != 4 || !strings.Contains(out, "leak") || !strings.Contains(out, "inode count is 42") || !strings.Contains(errs, "--repair") {
		t.Errorf("fsck -n of the damaged image: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if sumFiles(t, img, disk) != before {
		t.Error("fsck --no-write changed the images")
	}
	c.fails(8, "exclude each other", "fsck", "--no-write", "--repair", "--pram", img, "--disk", disk)

	out, errs, code = c.run("fsck", "--pram", img, "--disk", disk)
	if code != 4 || !strings.Contains(out, "leak") || !strings.Contains(out, "inode count is 42") || !strings.Contains(errs, "--repair") {
		t.Errorf("fsck of the damaged image: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	c.fails(8, "--zero-bad-blocks needs --repair", "fsck", "--zero-bad-blocks", "--pram", img, "--disk", disk)
	out, errs, code = c.run("fsck", "--repair", "--pram", img, "--disk", disk)
	if code != 1 || !strings.Contains(out, "fixed: arena heap: allocation at") ||
		!strings.Contains(out, "fixed: file system: inode count is 42: set it to 2") || !strings.Contains(out, "clean now") {
		t.Errorf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	out, _ = c.ok("fsck", "--pram", img, "--disk", disk)
	if !strings.Contains(out, "clean") {
		t.Errorf("fsck after repair: %s", out)
	}
	before = sumFiles(t, img, disk)
	if out, _ = c.ok("fsck", "--no-write", "--pram", img, "--disk", disk); !strings.HasSuffix(out, img+": clean\n") {
		t.Errorf("fsck --no-write after repair: %s", out)
	}
	if sumFiles(t, img, disk) != before {
		t.Error("fsck --no-write of a clean image changed it")
	}
	out, _ = c.ok("fsck", "--repair", "--pram", img, "--disk", disk)
	if !strings.Contains(out, "clean") || strings.Contains(out, "fixed") {
		t.Errorf("fsck --repair of a clean image: %s", out)
	}

	fsys, err = conquest.Open(img, disk, conquest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer fsys.Close()
	at, err = fsys.Lookup(conquest.RootIno, "f")
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, len(data)+1)
	n, err := fsys.Read(at.Ino, 0, 0, buf)
	if err != nil || !bytes.Equal(buf[:n], data) {
		t.Fatalf("f after repair: %d bytes, %v", n, err)
	}
}
