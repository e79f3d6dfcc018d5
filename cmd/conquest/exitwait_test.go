package main

import (
	"bytes"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// umount(8) and `fusermount3 -u` return once the kernel has detached the
// mount, while the daemon is still closing the file system and holds the
// arena: fsck, mount, df and mkfs run right after them wait for it
// (waitExited) instead of refusing an arena "in use".
func TestCommandsRightAfterPlainUmount(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "64M", "--disk-size", "256M")
	mp := c.mountpoint()
	large := bytes.Repeat([]byte("0123456789abcdef"), 40<<20/16) // its data on the disk
	write := func(round int) {
		t.Helper()
		large[round] = byte('A' + round)
		if err := os.WriteFile(filepath.Join(mp, "large"), large, 0o644); err != nil {
			t.Fatal(err)
		}
		for i := range 100 {
			if err := os.WriteFile(filepath.Join(mp, fmt.Sprintf("small%d.%d", round, i)), []byte(fmt.Sprint(round, i)), 0o644); err != nil {
				t.Fatal(err)
			}
		}
	}
	umount := func() {
		t.Helper()
		if err := syscall.Unmount(mp, 0); err != nil {
			t.Fatal(err)
		}
	}
	check := func(round int) {
		t.Helper()
		got, err := os.ReadFile(filepath.Join(mp, "large"))
		if err != nil || !bytes.Equal(got, large) {
			t.Fatalf("round %d: the large file after a remount: %d bytes, %v", round, len(got), err)
		}
		got, err = os.ReadFile(filepath.Join(mp, fmt.Sprintf("small%d.99", round)))
		if err != nil || string(got) != fmt.Sprint(round, 99) {
			t.Fatalf("round %d: a small file after a remount: %q, %v", round, got, err)
		}
	}

	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	write(0)
	umount()
	if out, _ := c.ok("fsck", "--pram", pram, "--disk", disk); !strings.Contains(out, "clean") {
		t.Errorf("fsck right after umount: %s", out)
	}
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	check(0)
	write(1)
	umount()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	check(1)
	write(2)
	umount()
	if out, _ := c.ok("df", "--pram", pram, "--disk", disk); !strings.Contains(out, "301 files") {
		t.Errorf("df right after umount:\n%s", out)
	}
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	check(2)
	umount()
	c.ok("mkfs", "--force", "--pram", pram, "--disk", disk, "--pram-size", "64M", "--disk-size", "256M")
	if out, _ := c.ok("fsck", "--pram", pram, "--disk", disk); !strings.Contains(out, "clean") {
		t.Errorf("fsck after mkfs: %s", out)
	}
}

// An arena held by some process while no mount names it is waited for up
// to $CONQUEST_EXIT_WAIT (30 s unless set), with a note, and then refused.
func TestHeldArenaWaitedForThenRefused(t *testing.T) {
	c := newCLI(t)
	if _, err := exec.LookPath("flock"); err != nil {
		t.Skip("no flock(1)")
	}
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M", "--disk-size", "32M")
	hold := func(d time.Duration) *exec.Cmd {
		t.Helper()
		h := exec.Command("flock", "--exclusive", "--no-fork", pram, "sleep", fmt.Sprint(d.Seconds()))
		if err := h.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { h.Process.Kill(); h.Wait() })
		for deadline := time.Now().Add(5 * time.Second); !inUse(pram); time.Sleep(5 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatal("flock(1) did not take the arena's lock")
			}
		}
		return h
	}

	hold(1500 * time.Millisecond)
	start := time.Now()
	out, errs := c.ok("fsck", "--pram", pram, "--disk", disk)
	if !strings.Contains(out, "clean") || !strings.Contains(errs, "waiting (up to 30s) for the process holding the arena") {
		t.Errorf("fsck of an arena held for 1.5 s: stdout %q stderr %q", out, errs)
	}
	if waited := time.Since(start); waited < time.Second {
		t.Errorf("fsck returned after %v while the arena was held for 1.5 s", waited)
	}

	c.env = []string{"CONQUEST_EXIT_WAIT=300ms"}
	h := hold(time.Minute)
	c.fails(8, "arena is in use by another process, though no mount shows it", "fsck", "--pram", pram, "--disk", disk)
	c.fails(1, "arena is in use by another process", "df", "--pram", pram, "--disk", disk)
	c.fails(1, "in use", "mkfs", "--force", "--pram", pram, "--disk", disk)
	mp := c.mountpoint()
	c.fails(1, "though no mount shows it", "mount", "--pram", pram, "--disk", disk, mp)
	h.Process.Kill()
	h.Wait()
	c.ok("fsck", "--pram", pram, "--disk", disk)
}
