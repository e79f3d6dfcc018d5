package main

import (
	"bytes"
	"encoding/binary"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"conquest/fusefs"
	"conquest/internal/loopdev"
	"conquest/internal/mounttest"
	"conquest/pram"
)

// pretendSystemCrash makes the arena look as if the kernel that last opened
// it was another boot: what a power loss or a kernel crash with the arena
// open leaves (pram/boot.go). The boot ID is at byte 528 of the superblock.
// The RAM copy of the arena (pram/shadow.go), in tmpfs, is lost with the
// system: the image holds the last checkpoint, which the killed daemon
// wrote in place whole (its writes are in the page cache), so its slots
// are cut off too, and the changes made here stand.
func pretendSystemCrash(t *testing.T, img string) {
	t.Helper()
	if err := pram.RemoveShadow(img, ""); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(img, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var size [8]byte
	if _, err := f.ReadAt(size[:], 32); err != nil { // pram's offSize
		t.Fatal(err)
	}
	if err := f.Truncate(int64(binary.LittleEndian.Uint64(size[:]))); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(bytes.Repeat([]byte{0x5a}, 16), 528); err != nil {
		t.Fatal(err)
	}
}

// replaceInImage replaces every occurrence of old by new (same length) in
// the image file and reports how many it replaced.
func replaceInImage(t *testing.T, path, old, new string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	n := bytes.Count(b, []byte(old))
	if err := os.WriteFile(path, bytes.ReplaceAll(b, []byte(old), []byte(new)), 0o600); err != nil {
		t.Fatal(err)
	}
	return n
}

// writeSynced writes a file and fsyncs it.
func writeSynced(t *testing.T, path string, data []byte) {
	t.Helper()
	f, err := os.Create(path)
	if err == nil {
		_, err = f.Write(data)
	}
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatal(err)
	}
}

// After the system went down with the arena open, mount walks the whole file
// system before serving it: a consistent one is mounted (once checked, later
// mounts do not walk it again), a damaged one is refused, again at every
// mount, until fsck --repair has fixed it.
func TestMountAfterSystemCrash(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M", "--disk-size", "64M")
	const name = "canary-named-file-of-the-crash-test"
	m := mounttest.MountProcess(t, mounttest.WithImages(pram, disk))
	writeSynced(t, m.Path(name), []byte("kept"))
	big := bytes.Repeat([]byte("large file data "), 1<<17) // 2 MiB: on the disk
	writeSynced(t, m.Path("big"), big)
	// An unlinked file still open at the crash: an orphan, which the check
	// must accept and the mount then frees.
	orphan, err := os.Create(m.Path("orphan"))
	if err != nil {
		t.Fatal(err)
	}
	defer orphan.Close()
	if _, err := orphan.Write(big); err != nil {
		t.Fatal(err)
	}
	if err := os.Remove(m.Path("orphan")); err != nil {
		t.Fatal(err)
	}
	if err := orphan.Sync(); err != nil { // what a power loss keeps
		t.Fatal(err)
	}
	m.Kill()

	// A consistent arena: checked, then mounted.
	pretendSystemCrash(t, pram)
	mp := c.mountpoint()
	out, errs := c.ok("mount", "--pram", pram, "--disk", disk, mp)
	if said := out + errs; !strings.Contains(said, "went down") || !strings.Contains(said, "checked, consistent") {
		t.Errorf("mount after a system crash said %q; want it to name the crash and the check", said)
	}
	if b, err := os.ReadFile(filepath.Join(mp, name)); err != nil || string(b) != "kept" {
		t.Errorf("after the check: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "big")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("large file after the check: %d bytes, %v", len(b), err)
	}
	c.ok("umount", mp)
	out, errs = c.ok("mount", "--pram", pram, "--disk", disk, mp)
	if strings.Contains(out+errs, "went down") {
		t.Errorf("a checked arena was checked again: %q", out+errs)
	}
	c.ok("umount", mp)

	// A damaged one: one name's bytes changed (its entry no longer matches
	// its hash), as a torn write-back could leave.
	m = mounttest.MountProcess(t, mounttest.WithImages(pram, disk))
	if _, err := os.Stat(m.Path(name)); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	pretendSystemCrash(t, pram)
	if n := replaceInImage(t, pram, name, strings.Replace(name, "canary", "CANARY", 1)); n == 0 {
		t.Fatalf("the name %q is not in the arena image", name)
	}
	for range 2 { // refused at every mount until repaired
		errs := c.fails(1, "is damaged", "mount", "--pram", pram, "--disk", disk, mp)
		if !strings.Contains(errs, "went down") || !strings.Contains(errs, "fsck --repair") {
			t.Errorf("the refusal does not name the crash and the repair: %q", errs)
		}
		if _, ok := fusefs.Mounted(mp); ok {
			t.Fatal("a damaged arena was mounted")
		}
	}
	c.fails(4, "found (run `conquest fsck --repair`", "fsck", "--pram", pram, "--disk", disk)
	out, errs, code := c.run("fsck", "--repair", "--pram", pram, "--disk", disk)
	if code != 1 {
		t.Fatalf("fsck --repair: exit %d, want 1 (repaired)\nstdout: %s\nstderr: %s", code, out, errs)
	}
	t.Logf("fsck --repair said:\n%s", out)
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	if b, err := os.ReadFile(filepath.Join(mp, "big")); err != nil || !bytes.Equal(b, big) {
		t.Errorf("large file after the repair: %d bytes, %v", len(b), err)
	}
	c.ok("umount", mp)
	c.ok("fsck", "--pram", pram, "--disk", disk)
}

// An arena on a block device: mkfs leaves room after it for the checkpoint
// slots of its RAM copy (and refuses an arena that leaves none), the mount
// keeps a RAM copy, a crash of the daemon keeps every completed write, and
// a power loss (the daemon killed, the copy lost) keeps what was fsync'd
// or checkpointed.
func TestBlockDeviceArena(t *testing.T) {
	c := newCLI(t)
	const devSize = 64 << 20
	dev := loopdev.New(t, devSize)
	disk := filepath.Join(t.TempDir(), "d.img")
	c.fails(1, "no room for its checkpoint slots", "mkfs", "--pram", dev, "--disk", disk, "--pram-size", "64M", "--disk-size", "64M")
	out, _ := c.ok("mkfs", "--pram", dev, "--disk", disk, "--disk-size", "64M")
	if want := formatSize(pram.DeviceArenaSize(devSize)); !strings.Contains(out, "("+want+" arena)") {
		t.Errorf("mkfs said %q, want the arena's size %s", out, want)
	}
	out, _ = c.ok("stat", "--pram", dev, "--disk", disk)
	if !strings.Contains(out, "a RAM copy") || !strings.Contains(out, "two slots of 8.0M after the arena") {
		t.Errorf("stat of a block-device arena (64 MiB: slots of 8 MiB):\n%s", out)
	}
	m := mounttest.MountProcess(t, mounttest.WithImages(dev, disk), mounttest.WithArgs("--commit", "1h"))
	writeSynced(t, m.Path("kept"), []byte("fsync'd"))
	if err := os.WriteFile(m.Path("done"), []byte("written before the crash"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A crash of the daemon alone: the RAM copy has every completed write.
	m.Kill()
	m.Remount()
	if out := m.Output(); !strings.Contains(out, "RAM copy") {
		t.Errorf("the mount after kill -9 said %q; want it to use the RAM copy", out)
	}
	if b, err := os.ReadFile(m.Path("done")); err != nil || string(b) != "written before the crash" {
		t.Errorf("after kill -9: %q, %v", b, err)
	}
	// That mount made the RAM copy durable; a power loss now loses only
	// what comes after it.
	if err := os.WriteFile(m.Path("lost"), []byte("never synced"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	if err := pram.RemoveShadow(dev, ""); err != nil {
		t.Fatal(err)
	}
	mp := c.mountpoint()
	out, errs := c.ok("mount", "--pram", dev, "--disk", disk, mp)
	if !strings.Contains(out+errs, "recovered from the last checkpoint") {
		t.Errorf("mount after the power loss said %q", out+errs)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "kept")); err != nil || string(b) != "fsync'd" {
		t.Errorf("kept: %q, %v", b, err)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "done")); err != nil || string(b) != "written before the crash" {
		t.Errorf("done, checkpointed by the mount after kill -9: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(mp, "lost")); !os.IsNotExist(err) {
		t.Errorf("a file never synced survived the power loss: %v", err)
	}
	c.ok("umount", mp)
	c.ok("fsck", "--pram", dev, "--disk", disk)
}
