package main

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"

	"conquest/internal/loopdev"
	"conquest/internal/mounttest"
	"conquest/internal/reaper"
)

// TestRAMCopyAfterHostRemount (found by an outside review): the daemon is
// killed, and the ext4 that holds the images is unmounted and mounted
// again from another loop device, so the image files come back with
// another device number. The mount after that must still find the RAM copy
// the killed daemon left (pram/shadow_moved.go): it used to start from the
// image's last checkpoint and lose every change made since, though each had
// returned to its caller.
func TestRAMCopyAfterHostRemount(t *testing.T) {
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("no mkfs.ext4")
	}
	c := newCLI(t)
	back := loopdev.NewFile(t, 256<<20)
	dev1 := loopdev.Attach(t, back)
	if out, err := exec.Command("mkfs.ext4", "-q", dev1).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
	host := t.TempDir()
	mountHost := func(dev string) {
		t.Helper()
		reaper.Mount(host)
		if out, err := exec.Command("mount", dev, host).CombinedOutput(); err != nil {
			t.Fatalf("mounting %s: %v: %s", dev, err, out)
		}
	}
	unmountHost := func() error {
		if out, err := exec.Command("umount", host).CombinedOutput(); err != nil {
			return fmt.Errorf("umount %s: %v: %s", host, err, strings.TrimSpace(string(out)))
		}
		return nil
	}
	mountHost(dev1)
	// Registered before the Conquest mount's own cleanup, so it runs after it.
	t.Cleanup(func() {
		if _, err := os.Stat(filepath.Join(host, "lost+found")); err == nil {
			if err := unmountHost(); err != nil {
				t.Error(err)
				exec.Command("umount", "-l", host).Run()
			}
		}
	})
	pram, disk := filepath.Join(host, "p.img"), filepath.Join(host, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M", "--disk-size", "64M")
	devOf := func() uint64 {
		t.Helper()
		var st syscall.Stat_t
		if err := syscall.Stat(pram, &st); err != nil {
			t.Fatal(err)
		}
		return st.Dev
	}
	before := devOf()

	m := mounttest.MountProcess(t, mounttest.WithImages(pram, disk), mounttest.WithArgs("--commit", "1h"))
	const data = "returned to its caller before the crash"
	if err := os.WriteFile(m.Path("done"), []byte(data), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Mkdir(m.Path("dir"), 0o755); err != nil {
		t.Fatal(err)
	}
	m.Kill()

	if err := unmountHost(); err != nil {
		t.Fatal(err)
	}
	dev2 := loopdev.Attach(t, back) // dev1 is still attached: another number
	mountHost(dev2)
	if after := devOf(); after == before {
		t.Fatalf("the images' file system came back with the same device number %#x (%s, then %s)", after, dev1, dev2)
	}
	m.Remount()
	if b, err := os.ReadFile(m.Path("done")); err != nil || string(b) != data {
		t.Errorf("after the crash and the host's remount: %q, %v; want %q", b, err, data)
	}
	if _, err := os.Stat(m.Path("dir")); err != nil {
		t.Error(err)
	}
	if out := m.Output(); !strings.Contains(out, "another device number") {
		t.Errorf("the mount did not say it took the RAM copy made under the old device number:\n%s", out)
	}
	m.Unmount()
	c.ok("fsck", "--pram", pram, "--disk", disk)
}
