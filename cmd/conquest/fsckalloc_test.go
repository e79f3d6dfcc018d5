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
	c, pramImg, disk, files := populatedImage(t)
	// The partial list heads start 256 bytes into the heap header
	// (alloc/layout.go), one word per class.
	writeHeap(t, pramImg, 256+8*10, 3439329279)
	refusedThenRepaired(t, c, pramImg, disk, files, "partial list of class 10 starts at page",
		"rebuilt the allocator's lists and counters from its page map")
}

// TestFsckRewritesHeapHeader: a damaged byte of the heap header's static
// part (what mkfs wrote once: magic, layout, checksum) made the image
// unusable for good. It follows from the arena's geometry: `fsck --repair`
// writes it again (and rebuilds the lists, also damaged here), and every
// file reads back.
func TestFsckRewritesHeapHeader(t *testing.T) {
	c, pramImg, disk, files := populatedImage(t)
	writeHeap(t, pramImg, 48, 0x1234) // the header's checksum (alloc/layout.go)
	writeHeap(t, pramImg, 256+8*3, 1<<50)
	out := refusedThenRepaired(t, c, pramImg, disk, files, "heap header checksum mismatch",
		"rewrote the header's static part from the arena's geometry")
	if !strings.Contains(out, "rebuilt the allocator's lists and counters") {
		t.Fatalf("the lists were not rebuilt after the header:\n%s", out)
	}
}

// TestFsckRepairsZeroedHeapHeader: the heap header's page zeroed (a
// corruption review): after the static part was written again, counters of
// 0 added up, so the heap looked empty and the root directory lost, to
// every open and every repair. Now a block head past top shows the counters
// wrong, and the lists and counters are rebuilt from the page map.
func TestFsckRepairsZeroedHeapHeader(t *testing.T) {
	c, pramImg, disk, files := populatedImage(t)
	g, err := pram.ReadGeometry(pramImg)
	if err != nil {
		t.Fatal(err)
	}
	zeroAt(t, pramImg, int64(g.HeapOff), 4096) // the heap header is at the heap's start
	out := refusedThenRepaired(t, c, pramImg, disk, files, "bad heap magic",
		"rewrote the header's static part from the arena's geometry")
	if !strings.Contains(out, "rebuilt the allocator's lists and counters") {
		t.Fatalf("the lists were not rebuilt after the header:\n%s", out)
	}
}

// TestFsckRestoresSuperblock: a flipped bit in the arena superblock's
// static part made the whole file system unusable for good. Page 0 keeps a
// copy of it: mount and fsck refuse the image naming the damage and the
// copy, and `fsck --repair` writes the copy back; every file reads back.
func TestFsckRestoresSuperblock(t *testing.T) {
	c, pramImg, disk, files := populatedImage(t)
	f, err := os.OpenFile(pramImg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	b := make([]byte, 1)
	if _, err := f.ReadAt(b, 33); err != nil { // a byte of the arena's size
		t.Fatal(err)
	}
	b[0] ^= 4
	if _, err := f.WriteAt(b, 33); err != nil {
		t.Fatal(err)
	}
	f.Close()
	refusedThenRepaired(t, c, pramImg, disk, files, "superblock checksum mismatch",
		"its backup copy is intact: `conquest fsck --repair` restores it: wrote the backup copy back")
}

// TestFsckEmptiesDamagedJournal: a damaged journal length word in a
// cleanly unmounted arena made every Open (mount, and fsck without
// --repair too) roll back the stale undo records of committed operations
// that Commit leaves behind it, undoing them; a length that the records did
// not fit made the image unusable for good, fsck --repair included. Now
// both are refused naming the journal, and `fsck --repair` empties it.
func TestFsckEmptiesDamagedJournal(t *testing.T) {
	for _, stale := range []bool{true, false} {
		c, pramImg, disk, files := populatedImage(t)
		f, err := os.OpenFile(pramImg, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		const jo = pram.PageSize // the journal follows the superblock page
		var rec [16]byte         // the first stale record: offset, length
		if _, err := f.ReadAt(rec[:], jo+64); err != nil {
			t.Fatal(err)
		}
		n := binary.LittleEndian.Uint64(rec[8:])
		if stale && (n == 0 || n > 4096) {
			t.Fatalf("no stale journal record: %x", rec)
		}
		length := 16 + (n+7)&^7 // exactly that record: it would roll back
		if !stale {
			length = 1 << 40
		}
		var w [8]byte
		binary.LittleEndian.PutUint64(w[:], length)
		if _, err := f.WriteAt(w[:], jo); err != nil {
			t.Fatal(err)
		}
		f.Close()
		refusedThenRepaired(t, c, pramImg, disk, files, "the undo journal is damaged", "emptied it, rolling nothing back")
	}
}

// TestFsckRestoresDiskSuperblock: the same for the disk's superblock,
// whose copy block 0 keeps.
func TestFsckRestoresDiskSuperblock(t *testing.T) {
	c, pramImg, disk, files := populatedImage(t)
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xff}, 20); err != nil { // a byte of the UUID
		t.Fatal(err)
	}
	f.Close()
	refusedThenRepaired(t, c, pramImg, disk, files, "disk superblock checksum mismatch",
		"disk superblock: disk "+disk)
}

// populatedImage makes images with 40 small files in a directory and one
// large file, written through a mount, and returns the CLI, the images and
// the files' contents.
func populatedImage(t *testing.T) (c *runner, pramImg, disk string, files map[string][]byte) {
	t.Helper()
	c = newCLI(t)
	dir := t.TempDir()
	pramImg, disk = filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pramImg, "--disk", disk, "--pram-size", "16M", "--disk-size", "64M")
	files = map[string][]byte{}
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
	return c, pramImg, disk, files
}

// writeHeap writes the word v at off in the heap header of the arena
// image (the header is at the arena offset in root slot 0).
func writeHeap(t *testing.T, pramImg string, off int64, v uint64) {
	t.Helper()
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
	defer f.Close()
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], v)
	if _, err := f.WriteAt(w[:], hdr+off); err != nil {
		t.Fatal(err)
	}
}

// refusedThenRepaired: mount and fsck refuse the damaged image naming
// damage; `fsck --repair` says fixed and clean; every file then reads back
// through a mount, the allocator allocates and frees, and fsck is clean.
// It returns the repair's output.
func refusedThenRepaired(t *testing.T, c *runner, pramImg, disk string, files map[string][]byte, damage, fixed string) string {
	t.Helper()
	mnt := filepath.Join(t.TempDir(), "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	c.fails(1, damage, "mount", "--pram", pramImg, "--disk", disk, mnt)
	c.fails(4, damage, "fsck", "--pram", pramImg, "--disk", disk)
	out, errs, code := c.run("fsck", "--repair", "--pram", pramImg, "--disk", disk)
	if code != 1 || !strings.Contains(out, fixed) || !strings.Contains(out, "clean now") {
		t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	c.ok("fsck", "--pram", pramImg, "--disk", disk)
	m := mounttest.MountProcess(t, mounttest.WithImages(pramImg, disk))
	for name, want := range files {
		if got, err := os.ReadFile(m.Path(name)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after repair: %d bytes, %v", name, len(got), err)
		}
	}
	if err := os.WriteFile(m.Path("new"), bytes.Repeat([]byte("n"), 50000), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.RemoveAll(m.Path("d")); err != nil {
		t.Fatal(err)
	}
	m.Unmount()
	c.ok("fsck", "--pram", pramImg, "--disk", disk)
	return out
}

// flipRootSlot flips bit of root slot i in the closed arena image.
func flipRootSlot(t *testing.T, pramImg string, i, bit int) {
	t.Helper()
	f, err := os.OpenFile(pramImg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var w [8]byte
	if _, err := f.ReadAt(w[:], int64(pram.RootOff(i))); err != nil {
		t.Fatal(err)
	}
	binary.LittleEndian.PutUint64(w[:], binary.LittleEndian.Uint64(w[:])^1<<bit)
	if _, err := f.WriteAt(w[:], int64(pram.RootOff(i))); err != nil {
		t.Fatal(err)
	}
}

// TestFsckFindsRootInode: one flipped bit in root slot 1, the root
// directory's inode offset, which has no checksum of its own, made mount,
// fsck and `fsck --repair` refuse the image for good (found by a corruption
// campaign). Now they name it, and the repair finds the root directory's
// inode record in the heap.
func TestFsckFindsRootInode(t *testing.T) {
	c, pramImg, disk, files := populatedImage(t)
	flipRootSlot(t, pramImg, 1, 12)
	refusedThenRepaired(t, c, pramImg, disk, files, "the root directory's slot does not lead to it", "the root directory's inode")
}

// TestFsckCutsDamagedOrphanList: the same for root slot 3, the head of the
// orphan list (empty here, so the flipped bit leads nowhere): the repair
// opens the file system without freeing orphans and cuts the list.
func TestFsckCutsDamagedOrphanList(t *testing.T) {
	c, pramImg, disk, files := populatedImage(t)
	flipRootSlot(t, pramImg, 3, 44)
	refusedThenRepaired(t, c, pramImg, disk, files, "the orphan list is damaged", "ended the list there")
}
