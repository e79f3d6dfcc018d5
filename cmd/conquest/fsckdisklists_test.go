package main

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"conquest/diskstore"
	"conquest/internal/mounttest"
	"conquest/pram"
)

// TestFsckRebuildsDiskLists: the daemon is killed while large files have
// blocks written since the last disk sync, and damage then hits the list
// of files with such blocks. A mount refuses the image, naming the list;
// fsck reports it (before, fsck refused the image too); `fsck --repair`
// rebuilds the list (and the free map, also damaged) from the files; the
// next mount recovers and every file reads back.
func TestFsckRebuildsDiskLists(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pramImg, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pramImg, "--disk", disk, "--pram-size", "16M", "--disk-size", "64M")
	files := map[string][]byte{
		"big1":  bytes.Repeat([]byte("large file one "), 1<<18), // ~3.9 MiB: past moveCap, on the disk at once
		"big2":  bytes.Repeat([]byte("large file two "), 1<<18),
		"small": []byte("small"),
	}
	m := mounttest.MountProcess(t, mounttest.WithImages(pramImg, disk))
	for name, data := range files {
		if err := os.WriteFile(m.Path(name), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	m.Kill() // no sync at unmount: the files' blocks stay on the unsynced list

	// The free map is at the arena offset in root slot 5; the record
	// width of its free extents list is at +32+24, of its list of files
	// with unsynced blocks at +64+24 (diskstore/freemap.go, xlist.go).
	a, err := pram.Open(pramImg)
	if err != nil {
		t.Fatal(err)
	}
	fm := int64(a.Root(diskstore.RootFreeMap))
	unsynced := a.U64(pram.Off(fm) + 64 + 16)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if unsynced == 0 {
		t.Fatal("no file with unsynced blocks")
	}
	f, err := os.OpenFile(pramImg, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w [4]byte
	binary.LittleEndian.PutUint32(w[:], 9)
	for _, off := range []int64{fm + 32 + 24, fm + 64 + 24} {
		if _, err := f.WriteAt(w[:], off); err != nil {
			t.Fatal(err)
		}
	}
	f.Close()

	mnt := filepath.Join(dir, "mnt")
	if err := os.Mkdir(mnt, 0o755); err != nil {
		t.Fatal(err)
	}
	c.fails(1, "unsynced file list at", "mount", "--pram", pramImg, "--disk", disk, mnt)
	if out, errs, code := c.run("fsck", "--pram", pramImg, "--disk", disk); code != 4 ||
		!strings.Contains(out, "unsynced file list at") || !strings.Contains(out, "free map list at") {
		t.Fatalf("fsck: exit %d, want 4 naming both lists\nstdout: %s\nstderr: %s", code, out, errs)
	}
	out, errs, code := c.run("fsck", "--repair", "--pram", pramImg, "--disk", disk)
	if code != 1 || !strings.Contains(out, "rebuilt the free map, quarantine, list of files with unsynced blocks from the files") ||
		!strings.Contains(out, fmt.Sprintf("%d files with unsynced blocks", unsynced)) || !strings.Contains(out, "clean now") {
		t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	// The repair's own close left the records live: the next open (this
	// fsck's) recovers from them, as a mount would.
	if out, errs, code := c.run("fsck", "--pram", pramImg, "--disk", disk); code != 0 ||
		!strings.Contains(out, fmt.Sprintf("of %d files written since the last sync", unsynced)) || !strings.Contains(out, "clean") {
		t.Fatalf("fsck after the repair: exit %d, want 0 and the recovery of %d files\nstdout: %s\nstderr: %s", code, unsynced, out, errs)
	}
	repairedIntact(t, c, pramImg, disk, files)
}

// repairedIntact mounts a repaired pair, reads every file back, writes a
// new large one, unmounts and expects fsck clean.
func repairedIntact(t *testing.T, c *runner, pramImg, disk string, files map[string][]byte) {
	t.Helper()
	m := mounttest.MountProcess(t, mounttest.WithImages(pramImg, disk))
	for name, want := range files {
		if got, err := os.ReadFile(m.Path(name)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("%s after repair: %d bytes, %v", name, len(got), err)
		}
	}
	if err := os.WriteFile(m.Path("big3"), bytes.Repeat([]byte("three"), 1<<19), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Unmount()
	c.ok("fsck", "--pram", pramImg, "--disk", disk)
}

// TestFsckLaysNewRecords: the daemon is killed with large files' blocks
// unsynced, then the disk's free map record, its stats record or both are
// overwritten whole (their root slots intact). Every open refused the
// pair, fsck --repair's too ("no free map at root slot 5"), with every
// file intact. Now the mount's refusal names the lost record and the
// repair; `fsck --repair` lays new ones (the free map rebuilt from the
// files, the stats record keeping the epoch of the live unsynced records,
// which the next open then recovers), and the pair mounts with its files.
func TestFsckLaysNewRecords(t *testing.T) {
	for _, c := range []struct {
		name    string
		slots   []int
		rewrite bool // big1 synced, then rewritten in part: its old blocks quarantined
	}{
		{"free map", []int{diskstore.RootFreeMap}, false},
		{"stats", []int{diskstore.RootStats}, false},
		{"both", []int{diskstore.RootFreeMap, diskstore.RootStats}, false},
		{"free map after a rewrite", []int{diskstore.RootFreeMap}, true},
		{"both after a rewrite", []int{diskstore.RootFreeMap, diskstore.RootStats}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			c2 := newCLI(t)
			dir := t.TempDir()
			pramImg, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
			c2.ok("mkfs", "--pram", pramImg, "--disk", disk, "--pram-size", "16M", "--disk-size", "64M")
			files := map[string][]byte{
				"big1":  bytes.Repeat([]byte("large file one "), 1<<18),
				"big2":  bytes.Repeat([]byte("large file two "), 1<<17),
				"small": []byte("small"),
			}
			m := mounttest.MountProcess(t, mounttest.WithImages(pramImg, disk))
			for name, data := range files {
				if err := os.WriteFile(m.Path(name), data, 0o644); err != nil {
					t.Fatal(err)
				}
			}
			if c.rewrite {
				f, err := os.OpenFile(m.Path("big1"), os.O_RDWR, 0)
				if err != nil {
					t.Fatal(err)
				}
				if err := f.Sync(); err != nil {
					t.Fatal(err)
				}
				patch := bytes.Repeat([]byte("REWRITTEN"), 20000)
				if _, err := f.WriteAt(patch, 1<<20); err != nil {
					t.Fatal(err)
				}
				f.Close()
				copy(files["big1"][1<<20:], patch)
			}
			m.Kill() // no sync at unmount: the files' blocks stay unsynced

			a, err := pram.Open(pramImg)
			if err != nil {
				t.Fatal(err)
			}
			offs := map[int]int64{}
			for _, slot := range c.slots {
				offs[slot] = int64(a.Root(slot))
			}
			fm := pram.Off(a.Root(diskstore.RootFreeMap))
			unsynced := a.U64(fm + 64 + 16) // files on its list (diskstore/freemap.go, xlist.go)
			if err := a.Close(); err != nil {
				t.Fatal(err)
			}
			if unsynced == 0 {
				t.Fatal("no file with unsynced blocks")
			}
			f, err := os.OpenFile(pramImg, os.O_RDWR, 0)
			if err != nil {
				t.Fatal(err)
			}
			for slot, off := range offs {
				size := 128
				if slot == diskstore.RootStats {
					size = 64
				}
				if _, err := f.WriteAt(bytes.Repeat([]byte{0xa5}, size), off); err != nil {
					t.Fatal(err)
				}
			}
			f.Close()

			what := "free map"
			if c.slots[0] == diskstore.RootStats {
				what = "stats record"
			}
			mnt := filepath.Join(dir, "mnt")
			if err := os.Mkdir(mnt, 0o755); err != nil {
				t.Fatal(err)
			}
			c2.fails(1, "the disk's "+what+" is lost", "mount", "--pram", pramImg, "--disk", disk, mnt)
			c2.fails(4, fmt.Sprintf("no %s at root slot %d", what, c.slots[0]), "fsck", "--pram", pramImg, "--disk", disk)
			out, errs, code := c2.run("fsck", "--repair", "--pram", pramImg, "--disk", disk)
			if code != 1 || !strings.Contains(out, "clean now") {
				t.Fatalf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
			}
			for _, slot := range c.slots {
				want := "fixed: disk free map: "
				if slot == diskstore.RootStats {
					want = "fixed: disk stats record: "
				}
				if !strings.Contains(out, want) || !strings.Contains(out, fmt.Sprintf("(root slot %d held %#x)", slot, offs[slot])) {
					t.Fatalf("fsck --repair: no %q for slot %d\nstdout: %s", want, slot, out)
				}
			}
			// The unsynced records stayed live: the repair's open
			// recovered them, or, when it had no list of the files that
			// have some (a new free map), this open does.
			out2, errs, code := c2.run("fsck", "--pram", pramImg, "--disk", disk)
			if code != 0 || !strings.Contains(out2, "clean") {
				t.Fatalf("fsck after the repair: exit %d, want 0\nstdout: %s\nstderr: %s", code, out2, errs)
			}
			// 112 blocks written, or the 11 rewritten after the sync.
			recovered := regexp.MustCompile(`recovery: (112|11) blocks of 1 files written since the last sync: (112|11) intact, 0 restored, 0 zeroed`)
			if c.rewrite && !strings.Contains(out, "rebuilt the free map, quarantine") && slices.Contains(c.slots, diskstore.RootFreeMap) {
				t.Fatalf("fsck --repair did not rebuild the quarantine\n%s", out)
			}
			if n := len(recovered.FindAllString(out+out2, -1)); n != 1 {
				t.Fatalf("%d recoveries %q, want 1\nfsck --repair: %s\nfsck: %s", n, recovered, out, out2)
			}
			repairedIntact(t, c2, pramImg, disk, files)
		})
	}
}
