package main

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"syscall"
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

// TestTruncateIntoDamagedDiskBlock is an outside corruption test's case: a
// truncate of a large file whose cut falls inside a disk block that fails
// its checksum. It used to fail with EIO after its first step had already
// published the new size, and leave an orphan that every close ("freeing
// orphans at close: input/output error"), fsck and fsck --repair failed to
// finish. Now the truncate succeeds, the damaged block stays damaged (EIO,
// reported by fsck as the one error), and fsck --repair --zero-bad-blocks
// makes the file system clean.
func TestTruncateIntoDamagedDiskBlock(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "32M", "--disk-size", "64M", "--disk-block-size", "16K")
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	const bs, bad = 16 << 10, 100 // the cut falls in file block 100
	data := make([]byte, 20<<20)
	for i := range data {
		data[i] = byte(i*7 + i>>13)
	}
	for b := 0; b < len(data)/bs; b++ {
		copy(data[b*bs:], fmt.Sprintf("<block %06d>", b))
	}
	p := filepath.Join(mp, "big")
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("umount", mp)
	img, err := os.ReadFile(disk)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(img, []byte(fmt.Sprintf("<block %06d>", bad)))
	if at < 0 || at%bs != 0 {
		t.Fatalf("file block %d not found at a block boundary of the disk image (%d)", bad, at)
	}
	f, err := os.OpenFile(disk, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt([]byte{^img[at+3000]}, int64(at+3000))
	if err := errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}

	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	size := int64(bad*bs + 6000)
	if err := os.Truncate(p, size); err != nil {
		t.Errorf("truncate into the damaged block: %v", err)
	}
	if st, err := os.Stat(p); err != nil || st.Size() != size {
		t.Errorf("after the truncate: %v, %v; want size %d", st, err, size)
	}
	r, err := os.Open(p)
	if err != nil {
		t.Fatal(err)
	}
	head := make([]byte, bad*bs)
	n, err := r.ReadAt(head, 0)
	if err != nil || n != len(head) || !bytes.Equal(head, data[:bad*bs]) {
		t.Errorf("reading before the damaged block: %d bytes, %v", n, err)
	}
	if _, err := r.ReadAt(make([]byte, 100), bad*bs); !errors.Is(err, syscall.EIO) {
		t.Errorf("reading the damaged block: %v, want EIO", err)
	}
	r.Close()
	c.ok("umount", mp)
	if log, err := os.ReadFile(filepath.Join(c.home, "conquest.log")); err != nil || strings.Contains(string(log), "orphan") {
		t.Errorf("the daemon's log: %v\n%s", err, log)
	}
	out, _, code := c.run("fsck", "--pram", pram, "--disk", disk)
	if code != 4 || !strings.Contains(out, fmt.Sprintf("offset %d", bad*bs)) || strings.Contains(out, "orphan") {
		t.Errorf("fsck: exit %d, want 4 for the damaged block only\n%s", code, out)
	}
	if _, _, code := c.run("fsck", "--repair", "--zero-bad-blocks", "--pram", pram, "--disk", disk); code != 1 {
		t.Errorf("fsck --repair --zero-bad-blocks: exit %d, want 1", code)
	}
	c.ok("fsck", "--pram", pram, "--disk", disk)
}

// TestFsckRebuildsLostDiskSuper: the disk keeps its superblock and the copy
// in its first 4 KiB, so one damaged page loses both (an outside corruption
// test zeroed it, and the pair was refused for good, with advice to mkfs).
// fsck --repair rebuilds the superblock from the arena once the disk's data
// verifies against the arena's checksums; another pair's disk fails that
// check and is left as it is, and so is a disk with no data to check when
// its first page is not zeros.
func TestFsckRebuildsLostDiskSuper(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	mp := c.mountpoint()
	pair := func(name string, withData bool) (string, string, []byte) {
		p, d := filepath.Join(dir, name+".pram"), filepath.Join(dir, name+".disk")
		c.ok("mkfs", "--pram", p, "--disk", d, "--pram-size", "32M", "--disk-size", "64M")
		var data []byte
		if withData {
			c.ok("mount", "--pram", p, "--disk", d, mp)
			data = make([]byte, 3<<20+99)
			for i := range data {
				data[i] = byte(i*31 + int(name[0]) + i>>12)
			}
			if err := os.WriteFile(filepath.Join(mp, "large"), data, 0o644); err != nil {
				t.Fatal(err)
			}
			c.ok("umount", mp)
		}
		return p, d, data
	}
	overwrite := func(path string, page []byte) {
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = f.WriteAt(page, 0)
		if err := errors.Join(err, f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	garbage := bytes.Repeat([]byte("not a superblock"), 256)

	p, d, data := pair("a", true)
	overwrite(d, make([]byte, 4096))
	c.fails(8, "conquest fsck --repair` rebuilds the superblock", "fsck", "--pram", p, "--disk", d)
	out, errs, code := c.run("fsck", "--repair", "--pram", p, "--disk", d)
	if code != 1 || !strings.Contains(out, "rebuilt from the arena") || !strings.Contains(out, "clean now") {
		t.Fatalf("fsck --repair of a zeroed disk superblock: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	c.ok("fsck", "--pram", p, "--disk", d)
	c.ok("mount", "--pram", p, "--disk", d, mp)
	if got, err := os.ReadFile(filepath.Join(mp, "large")); err != nil || !bytes.Equal(got, data) {
		t.Errorf("after the rebuild: %d bytes, %v", len(got), err)
	}
	c.ok("umount", mp)
	// Garbage over the page, not zeros: the same, the data vouching.
	overwrite(d, garbage)
	if _, _, code := c.run("fsck", "--repair", "--pram", p, "--disk", d); code != 1 {
		t.Errorf("fsck --repair of a disk superblock overwritten with garbage: exit %d, want 1", code)
	}
	c.ok("fsck", "--pram", p, "--disk", d)
	// The page lost and a bad block besides (an outside review: the pair
	// was refused for good): the rest vouches for the disk, the
	// superblock is rebuilt, and the bad block is one to zero.
	img, err := os.ReadFile(d)
	if err != nil {
		t.Fatal(err)
	}
	at := bytes.Index(img, data[:4096])
	if at < 0 {
		t.Fatal("the large file's data is not in the disk image")
	}
	bad := make([]byte, 4096)
	copy(bad, data[4096:])
	bad[100] ^= 0xff
	f, err := os.OpenFile(d, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(bad[:1], int64(at+4096+100))
	if err := errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
	overwrite(d, make([]byte, 4096))
	out, errs, code = c.run("fsck", "--repair", "--pram", p, "--disk", d)
	if code != 4 || !strings.Contains(out, "rebuilt from the arena") || !strings.Contains(out, "1 failed theirs") {
		t.Fatalf("fsck --repair of a lost disk superblock beside a bad block: exit %d, want 4 (the bad block left)\nstdout: %s\nstderr: %s", code, out, errs)
	}
	if _, _, code := c.run("fsck", "--repair", "--zero-bad-blocks", "--pram", p, "--disk", d); code != 1 {
		t.Errorf("fsck --repair --zero-bad-blocks after the rebuild: exit %d, want 1", code)
	}
	c.ok("fsck", "--pram", p, "--disk", d)
	c.ok("mount", "--pram", p, "--disk", d, mp)
	got, err := os.ReadFile(filepath.Join(mp, "large"))
	c.ok("umount", mp)
	if err != nil || len(got) != len(data) {
		t.Fatalf("after the rebuild and the zeroing: %d bytes, %v", len(got), err)
	}
	for i := range got {
		if got[i] != data[i] && got[i] != 0 {
			t.Fatalf("byte %d reads %#x: neither the data nor a zeroed block's", i, got[i])
		}
	}

	// Another pair's disk, its first page lost too: its data fails the
	// arena's checksums, and it is left as it is.
	_, d2, _ := pair("b", true)
	overwrite(d2, make([]byte, 4096))
	before := sumFiles(t, d2)
	c.fails(4, "fail their checksums and 0 verify: not the arena's disk", "fsck", "--repair", "--pram", p, "--disk", d2)
	if sumFiles(t, d2) != before {
		t.Error("fsck --repair wrote to another pair's disk")
	}

	// No data on the disk to check against: only a first page of zeros
	// is taken for the lost superblock.
	p3, d3, _ := pair("c", false)
	overwrite(d3, garbage)
	before = sumFiles(t, d3)
	c.fails(4, "no data on a disk to check it against", "fsck", "--repair", "--pram", p3, "--disk", d3)
	if sumFiles(t, d3) != before {
		t.Error("fsck --repair wrote a superblock over a first page it could not vouch for")
	}
	overwrite(d3, make([]byte, 4096))
	if _, _, code := c.run("fsck", "--repair", "--pram", p3, "--disk", d3); code != 1 {
		t.Errorf("fsck --repair of an empty pair's zeroed disk superblock: exit %d, want 1", code)
	}
	c.ok("fsck", "--pram", p3, "--disk", d3)
}

// TestFsckRestoresLostArenaSuper: page 0 of the arena, which holds the
// superblock and its copy, zeroed or overwritten. The mount used to
// refuse it as "not a Conquest arena" and advise mkfs, which would lose
// every file; now it names the copy the heap keeps and fsck --repair,
// which writes it back and mends the root slots the page lost, and the
// files come back.
func TestFsckRestoresLostArenaSuper(t *testing.T) {
	for _, damage := range []string{"zeroed", "random"} {
		t.Run(damage, func(t *testing.T) {
			c, pramImg, disk, files := populatedImage(t)
			dir := t.TempDir()
			page := make([]byte, 4096)
			if damage == "random" {
				r := rand.New(rand.NewPCG(1, 2))
				for i := range page {
					page[i] = byte(r.Uint32())
				}
			}
			f, err := os.OpenFile(pramImg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := f.WriteAt(page, 0); err != nil {
				t.Fatal(err)
			}
			f.Close()
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			if errs := c.fails(1, "the heap keeps another copy: `conquest fsck --repair", "mount", "--pram", pramImg, "--disk", disk, mnt); !strings.Contains(errs, "would format the images anew, losing every file") {
				t.Errorf("the refusal does not warn against mkfs: %s", errs)
			}
			out, errs, code := c.run("fsck", "--repair", "--pram", pramImg, "--disk", disk)
			if code != 1 || !strings.Contains(out, "wrote back the copy the heap keeps") || !strings.Contains(out, "clean now") {
				t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			c.ok("fsck", "--pram", pramImg, "--disk", disk)
			repairedIntact(t, c, pramImg, disk, files)
		})
	}
}

// TestFsckGrowsShortDisk: a disk image cut short (a copy that ran out of
// room, say) was refused by every command, fsck --repair's too, even when
// the part cut held no data. Now the refusal names the repair, which grows
// the image back once its superblock names the arena: cut past the data,
// every file is intact; cut into the large file, the lost blocks fail their
// checksums (EIO), and with --zero-bad-blocks become holes.
func TestFsckGrowsShortDisk(t *testing.T) {
	for _, c := range []struct {
		name   string
		cut    int64 // bytes left of the 64 MiB disk
		intact bool
	}{
		{"past the data", 40 << 20, true},
		{"into the large file", 1 << 20, false},
	} {
		t.Run(c.name, func(t *testing.T) {
			c2, pramImg, disk, files := populatedImage(t) // "big", 2 MiB, at the disk's start
			dir := t.TempDir()
			if err := os.Truncate(disk, c.cut); err != nil {
				t.Fatal(err)
			}
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			c2.fails(1, "`conquest fsck --repair --pram "+pramImg+" --disk "+disk+"` grows an image file back", "mount", "--pram", pramImg, "--disk", disk, mnt)
			out, errs, code := c2.run("fsck", "--repair", "--pram", pramImg, "--disk", disk)
			if !strings.Contains(out, "grew it back") {
				t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			if st, err := os.Stat(disk); err != nil || st.Size() != 64<<20 {
				t.Fatalf("the disk after the repair: %v, %v", st, err)
			}
			if c.intact {
				if code != 1 || !strings.Contains(out, "clean now") {
					t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
				}
				repairedIntact(t, c2, pramImg, disk, files)
				return
			}
			if code != 4 || !strings.Contains(out, "fails its checksum") {
				t.Fatalf("fsck --repair of a disk cut into a file: exit %d, want 4 naming the lost blocks\nstdout: %s\nstderr: %s", code, out, errs)
			}
			out, errs, code = c2.run("fsck", "--repair", "--zero-bad-blocks", "--pram", pramImg, "--disk", disk)
			if code != 1 || !strings.Contains(out, "clean now") {
				t.Fatalf("fsck --repair --zero-bad-blocks: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			c2.ok("fsck", "--pram", pramImg, "--disk", disk)
			m := mounttest.MountProcess(t, mounttest.WithImages(pramImg, disk))
			for name, want := range files {
				got, err := os.ReadFile(m.Path(name))
				if err != nil || len(got) != len(want) {
					t.Fatalf("%s after the repair: %d bytes, %v", name, len(got), err)
				}
				if name == "big" {
					got, want = got[:512<<10], want[:512<<10] // the part left on the disk
				}
				if !bytes.Equal(got, want) {
					t.Errorf("%s changed", name)
				}
			}
			m.Unmount()
		})
	}
}

// TestFsckFixesArenaLength (found by an outside review): an arena image
// file cut short or grown by a page was refused by mount and by fsck
// --repair alike ("the image is damaged"), though `truncate` back to its
// size made it clean. The refusal now names the repair, which gives the
// file its length back.
func TestFsckFixesArenaLength(t *testing.T) {
	for _, c := range []struct {
		name  string
		delta int64
		did   string
	}{
		{"cut short", -4096, "grew it from"},
		{"grown", 4096, "cut it from"},
	} {
		t.Run(c.name, func(t *testing.T) {
			c2, pramImg, disk, files := populatedImage(t)
			if err := os.Truncate(pramImg, 16<<20+c.delta); err != nil {
				t.Fatal(err)
			}
			mnt := filepath.Join(t.TempDir(), "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			c2.fails(1, "was cut short or grown; refusing to use it (`conquest fsck --repair --pram "+pramImg+" --disk "+disk+"` gives it its length back)", "mount", "--pram", pramImg, "--disk", disk, mnt)
			out, errs, code := c2.run("fsck", "--repair", "--pram", pramImg, "--disk", disk)
			if code != 1 || !strings.Contains(out, c.did) || !strings.Contains(out, "clean now") {
				t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			if st, err := os.Stat(pramImg); err != nil || st.Size() != 16<<20 {
				t.Fatalf("the arena image after the repair: %v, %v", st, err)
			}
			c2.ok("fsck", "--pram", pramImg, "--disk", disk)
			repairedIntact(t, c2, pramImg, disk, files)
		})
	}
}
