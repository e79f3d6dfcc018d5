package main

import (
	"bytes"
	"crypto/rand"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// TestMountGivesDiskSpaceBack: the space of large files deleted from a
// mount goes back to the disk image's file system at the next mount
// (diskstore/giveback.go), the file left reads back the same, and fsck,
// which verifies every checksum, finds the images clean.
func TestMountGivesDiskSpaceBack(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "64M", "--disk-size", "256M")
	host := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(disk, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	keep := make([]byte, 40<<20)
	rand.Read(keep)
	for _, name := range []string{"gone", "kept"} {
		if err := os.WriteFile(filepath.Join(mp, name), keep, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Remove(filepath.Join(mp, "gone")); err != nil {
		t.Fatal(err)
	}
	c.ok("umount", mp)
	before := host()
	if before < 80<<20 {
		t.Fatalf("the image takes %d bytes on the host after two 40 MiB files", before)
	}

	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	if given := before - host(); given < 36<<20 {
		t.Errorf("the mount gave back %d bytes of the image's %d, after a 40 MiB file was deleted", given, before)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "kept")); err != nil || !bytes.Equal(b, keep) {
		t.Errorf("the file left reads back wrong (%d bytes, %v)", len(b), err)
	}
	// Space reserved ahead of writes and never written (a growing file's
	// extent past its end, given back at close) is not data, but it takes
	// blocks of the host too (a review: ten 5 MiB files kept 81 MiB).
	for i := range 10 {
		if err := os.WriteFile(filepath.Join(mp, fmt.Sprint("five", i)), keep[:5<<20], 0o644); err != nil {
			t.Fatal(err)
		}
	}
	c.ok("umount", mp)
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	if got, data := host(), int64(90<<20); got > data+4<<20 {
		t.Errorf("the image takes %d bytes on the host for %d bytes of data after a mount", got, data)
	}
	c.ok("umount", mp)
	if log, err := os.ReadFile(filepath.Join(c.home, "conquest.log")); err != nil || !strings.Contains(string(log), "back to the file system of "+disk) {
		t.Errorf("the daemon's log does not say what it gave back: %v\n%s", err, log)
	}
	out, _ := c.ok("fsck", "--pram", pram, "--disk", disk)
	if !strings.HasSuffix(out, pram+": clean\n") {
		t.Errorf("fsck:\n%s", out)
	}
}
