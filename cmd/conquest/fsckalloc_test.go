package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"conquest/internal/mounttest"
	"conquest/pram"
)

// TestFsckRebuildsAllocator: an arena whose allocator list head is damaged
// is refused by mount (naming the damage) and by fsck, and `fsck --repair`
// rebuilds the allocator's lists and counters from its page map; then it
// mounts with every file intact. (Found by corrupting random bytes of an
// image: such an arena could neither be mounted nor repaired.)
func TestFsckRebuildsAllocator(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pramImg, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pramImg, "--disk", disk, "--pram-size", "16M", "--disk-size", "64M")
	files := map[string][]byte{}
	m := mounttest.MountProcess(t, mounttest.WithImages(pramImg, disk))
	for i := range 40 {
		name := filepath.Join("d", strings.Repeat("x", i%7)+string(rune('a'+i%26))+"-"+string(rune('0'+i/26)))
		files[name] = bytes.Repeat([]byte{byte(i)}, 100+i*997)
	}
	files["big"] = bytes.Repeat([]byte("large file data "), 1<<17) // 2 MiB: on the disk
	if err := os.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for name, data := range files {
		if err := os.WriteFile(m.Path(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.Unmount()

	// The heap header is at the arena offset in root slot 0; the partial
	// list heads start 256 bytes in (alloc/layout.go), one word per class.
	a, err := pram.Open(pramImg)
	if err != nil {
		t.Fatal(err)
	}
	hdr := int64(a.Root(0))
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(pramImg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], 3439329279)
	if _, err := f.WriteAt(w[:], hdr+256+8*10); err != nil {
		t.Fatal(err)
	}
	f.Close()

	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	c.fails(1, "partial list of class 10 starts at page", "mount", "--pram", pramImg, "--disk", disk, mnt)
	c.fails(4, "partial list of class 10 starts at page", "fsck", "--pram", pramImg, "--disk", disk)
	out, errs, code := c.run("fsck", "--repair", "--pram", pramImg, "--disk", disk)
	if code != 1 || !strings.Contains(out, "rebuilt the allocator's lists and counters from its page map") ||
		!strings.Contains(out, "clean now") {
		t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	c.ok("fsck", "--pram", pramImg, "--disk", disk)
	m = mounttest.MountProcess(t, mounttest.WithImages(pramImg, disk))
	for name, want := range files {
		if got, err := os.ReadFile(m.Path(name)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after repair: %d bytes, %v", name, len(got), err)
		}
	}
	// The rebuilt allocator allocates and frees.
	if err := os.WriteFile(m.Path("new"), bytes.Repeat([]byte("n"), 50000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(m.Path("d")); err != nil {
		t.Fatal(err)
	}
	m.Unmount()
	c.ok("fsck", "--pram", pramImg, "--disk", disk)
}
