package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/reaper"
)

// roView makes dir visible read-only at a new path (a read-only bind
// mount, removed at cleanup) and returns it; it skips where bind mounts
// are not allowed.
func roView(t *testing.T, dir string) string {
	t.Helper()
	ro := filepath.Join(t.TempDir(), "ro")
	if err := os.Mkdir(ro, 0o755); err != nil {
		t.Fatal(err)
	}
	reaper.Mount(ro)
	if err := unix.Mount(dir, ro, "", unix.MS_BIND, ""); err != nil {
		t.Skipf("bind mount: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(ro, 0); err != nil {
			t.Errorf("unmounting %s: %v", ro, err)
		}
	})
	if err := unix.Mount("", ro, "", unix.MS_REMOUNT|unix.MS_BIND|unix.MS_RDONLY, ""); err != nil {
		t.Fatalf("making %s read-only: %v", ro, err)
	}
	if f, err := os.OpenFile(filepath.Join(ro, "p.img"), os.O_RDWR, 0); !errors.Is(err, unix.EROFS) {
		if f != nil {
			f.Close()
		}
		t.Fatalf("opening an image in the read-only view for writing: %v, want EROFS", err)
	}
	return ro
}

// sumFiles hashes the files at paths, streaming them (an image of default
// size is gigabytes, sparse: read whole, one took the test binary, with the
// race detector's shadow memory, to 22 GiB and the OOM killer).
func sumFiles(t *testing.T, paths ...string) [sha256.Size]byte {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		_, err = io.Copy(h, f)
		if err := errors.Join(err, f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	var s [sha256.Size]byte
	copy(s[:], h.Sum(nil))
	return s
}

// TestReadOnlyImages: images that cannot be opened for writing (here on a
// read-only bind mount) are checked by fsck, measured by df and stat and
// mounted with --read-only, all without a byte of either image changing;
// what needs writing (a read-write mount, fsck --repair) is refused with a
// message that says what works. An image a crash left open is refused
// read-only (its recovery writes), naming that, until a writable open has
// recovered it.
func TestReadOnlyImages(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "32M", "--disk-size", "64M")
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	small := []byte("kept in the arena\n")
	large := make([]byte, 3<<20+777)
	for i := range large {
		large[i] = byte(i*13 + i>>11)
	}
	if err := os.WriteFile(filepath.Join(mp, "small"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mp, "large"), large, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("small", filepath.Join(mp, "link")); err != nil {
		t.Fatal(err)
	}
	c.ok("umount", mp)

	ro := roView(t, dir)
	rp, rd := filepath.Join(ro, "p.img"), filepath.Join(ro, "d.img")
	before := sumFiles(t, pram, disk)

	out, _ := c.ok("fsck", "--pram", rp, "--disk", rd)
	if !strings.Contains(out, "opened read-only") || !strings.HasSuffix(out, rp+": clean\n") {
		t.Errorf("fsck of read-only images:\n%s", out)
	}
	c.fails(fsckOperational, "cannot be opened for writing", "fsck", "--repair", "--pram", rp, "--disk", rd)
	if out, _ := c.ok("df", "--pram", rp, "--disk", rd); !strings.Contains(out, "2 files (3.0M of data), 1 directory, 1 symlink") {
		t.Errorf("df of read-only images:\n%s", out)
	}
	if out, _ := c.ok("stat", "--pram", rp, "--disk", rd); !strings.Contains(out, "  on the disk:        1 (") {
		t.Errorf("stat of read-only images:\n%s", out)
	}
	c.fails(1, "--read-only", "mount", "--pram", rp, "--disk", rd, mp)
	if _, ok := fusefs.Mounted(mp); ok {
		t.Fatal("a read-write mount of read-only images succeeded")
	}

	c.ok("mount", "--read-only", "--pram", rp, "--disk", rd, mp)
	for name, want := range map[string][]byte{"small": small, "large": large, "link": small} {
		if b, err := os.ReadFile(filepath.Join(mp, name)); err != nil || !bytes.Equal(b, want) {
			t.Errorf("read-only mount: %s: %d bytes, %v", name, len(b), err)
		}
	}
	if err := os.WriteFile(filepath.Join(mp, "new"), nil, 0o644); !errors.Is(err, unix.EROFS) {
		t.Errorf("creating a file on the read-only mount: %v, want EROFS", err)
	}
	dropCached(t, filepath.Join(mp, "large"), rd)
	if b, err := os.ReadFile(filepath.Join(mp, "large")); err != nil || !bytes.Equal(b, large) {
		t.Errorf("read-only mount, caches dropped: large: %d bytes, %v", len(b), err)
	}
	c.ok("umount", mp)
	if log, err := os.ReadFile(filepath.Join(c.home, "conquest.log")); err != nil || !strings.Contains(string(log), "opened read-only") {
		t.Errorf("the daemon's log does not say the images were opened read-only: %v\n%s", err, log)
	}
	if after := sumFiles(t, pram, disk); after != before {
		t.Fatal("the images changed while opened read-only")
	}

	// A crash leaves them needing recovery: refused read-only, until a
	// writable fsck has recovered them.
	m := mounttest.MountProcess(t, mounttest.WithImages(pram, disk))
	if err := os.WriteFile(m.Path("after"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	crashed := sumFiles(t, pram, disk)
	c.fails(fsckOperational, "needs recovery", "fsck", "--pram", rp, "--disk", rd)
	c.fails(fsckUncorrected, "without --no-write", "fsck", "-n", "--pram", pram, "--disk", disk)
	c.fails(1, "needs recovery", "mount", "--read-only", "--pram", rp, "--disk", rd, mp)
	if after := sumFiles(t, pram, disk); after != crashed {
		t.Fatal("refused read-only opens (and fsck --no-write) changed the images")
	}
	if _, _, code := c.run("fsck", "--pram", pram, "--disk", disk); code != 1 {
		t.Errorf("fsck of the crashed images: exit %d, want 1 (recovered)", code)
	}
	if out, _ := c.ok("fsck", "--pram", rp, "--disk", rd); !strings.Contains(out, "opened read-only") {
		t.Errorf("fsck of recovered read-only images:\n%s", out)
	}
}

// roLoop attaches path to a read-only loop device, detached at cleanup.
func roLoop(t *testing.T, path string) string {
	t.Helper()
	if _, err := exec.LookPath("losetup"); err != nil {
		t.Skip("no losetup")
	}
	out, err := exec.Command("losetup", "--read-only", "--find", "--show", path).CombinedOutput()
	if err != nil {
		t.Skipf("cannot attach a loop device: %v: %s", err, strings.TrimSpace(string(out)))
	}
	dev := strings.TrimSpace(string(out))
	reaper.Loop(dev, path)
	t.Cleanup(func() {
		if out, err := exec.Command("losetup", "--detach", dev).CombinedOutput(); err != nil {
			t.Errorf("detaching %s: %v: %s", dev, err, out)
		}
	})
	return dev
}

// TestReadOnlyDevicesAndHalves: a block device set read-only opens for
// writing all the same on Linux (its writes, and a shared writable mapping
// of it, fail): images on read-only loop devices are opened read-only as
// other read-only images are, and a read-write mount with such a disk is
// refused rather than failing every large write. When only the disk is
// read-only, the arena is not written either (the disk is opened first):
// not by df, fsck or a read-only mount, not by the refused read-write
// mount, and after a crash a read-only open is refused as needing
// recovery instead of recovering the writable arena. A read-only mount
// cannot be remounted read-write through the mount helper, and mkfs
// changes neither image when one of them cannot be written.
func TestReadOnlyDevicesAndHalves(t *testing.T) {
	c := newCLI(t)
	if os.Geteuid() != 0 {
		t.Skip("loop devices need root")
	}
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "32M", "--disk-size", "64M")
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	large := bytes.Repeat([]byte("read-only media "), 200<<10) // 3.2 MB: on the disk
	if err := os.WriteFile(filepath.Join(mp, "large"), large, 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("umount", mp)
	before := sumFiles(t, pram, disk)

	lp, ld := roLoop(t, pram), roLoop(t, disk)
	if out, _ := c.ok("fsck", "--pram", lp, "--disk", ld); !strings.Contains(out, "opened read-only") || !strings.HasSuffix(out, ": clean\n") {
		t.Errorf("fsck of read-only loop devices:\n%s", out)
	}
	if out, _ := c.ok("df", "--pram", lp, "--disk", ld); !strings.Contains(out, "1 file (3.1M of data), 1 directory") {
		t.Errorf("df of read-only loop devices:\n%s", out)
	}
	c.fails(1, "cannot be opened for writing", "mount", "--pram", pram, "--disk", ld, mp)
	c.ok("mount", "--read-only", "--pram", lp, "--disk", ld, mp)
	if b, err := os.ReadFile(filepath.Join(mp, "large")); err != nil || !bytes.Equal(b, large) {
		t.Errorf("read-only mount of loop devices: large: %d bytes, %v", len(b), err)
	}
	// mount(8) runs the helper for `mount -o remount,rw`: refused.
	_, errs, code := c.run(fsnamePrefix+lp, mp, "-o", "remount,rw,disk="+ld)
	if code == 0 || !strings.Contains(errs, "cannot remount read-write") {
		t.Errorf("remount,rw of a mount of read-only images: exit %d, %q; want a refusal", code, errs)
	}
	var sfs unix.Statfs_t
	if err := unix.Statfs(mp, &sfs); err != nil || sfs.Flags&unix.ST_RDONLY == 0 {
		t.Errorf("after the refused remount: statfs flags %#x, %v; want read-only", sfs.Flags, err)
	}
	c.ok("umount", mp)

	// Only the disk read-only: the arena is written by nothing.
	for _, args := range [][]string{
		{"fsck", "--pram", pram, "--disk", ld},
		{"df", "--pram", pram, "--disk", ld},
		{"stat", "--pram", pram, "--disk", ld},
		{"mount", "--read-only", "--pram", pram, "--disk", ld, mp},
		{"umount", mp},
	} {
		c.ok(args...)
	}
	c.fails(fsckOperational, "cannot be opened for writing", "fsck", "--repair", "--pram", pram, "--disk", ld)
	c.fails(1, "cannot be opened for writing", "mount", "--pram", pram, "--disk", ld, mp)
	if after := sumFiles(t, pram, disk); after != before {
		t.Fatal("the images changed, the disk being read-only")
	}
	// mkfs refuses before it formats either.
	c.fails(1, "cannot format it", "mkfs", "--force", "--pram", pram, "--disk", ld)
	c.fails(1, "cannot format it", "mkfs", "--force", "--pram", lp, "--disk", disk)
	// An immutable arena file (chattr +i): the disk was formatted before
	// the arena's open failed, and the file system lost.
	if setImmutable(t, pram, true) {
		c.fails(1, "cannot format it", "mkfs", "--force", "--pram", pram, "--disk", disk, "--pram-size", "32M", "--disk-size", "64M")
		setImmutable(t, pram, false)
	}
	if after := sumFiles(t, pram, disk); after != before {
		t.Fatal("a refused mkfs changed the images")
	}

	// After a crash, the writable arena is not recovered by a read-only
	// open of the pair.
	m := mounttest.MountProcess(t, mounttest.WithImages(pram, disk))
	if err := os.WriteFile(m.Path("after"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	crashed := sumFiles(t, pram)
	c.fails(fsckOperational, "needs recovery", "fsck", "--pram", pram, "--disk", ld)
	c.fails(1, "needs recovery", "mount", "--read-only", "--pram", pram, "--disk", ld, mp)
	c.fails(1, "was not unmounted cleanly: make the images writable", "mount", "--pram", pram, "--disk", ld, mp)
	if after := sumFiles(t, pram); after != crashed {
		t.Fatal("a refused read-only open changed the crashed arena")
	}
	if _, _, code := c.run("fsck", "--pram", pram, "--disk", disk); code != 1 {
		t.Errorf("fsck of the crashed images: exit %d, want 1 (recovered)", code)
	}
}

// setImmutable sets or clears path's immutable flag (chattr +i / -i); it
// reports false where the file system has no such flag. A flag set is
// cleared at cleanup too, so that the test's directory can be removed.
func setImmutable(t *testing.T, path string, on bool) bool {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	flags, err := unix.IoctlGetInt(int(f.Fd()), unix.FS_IOC_GETFLAGS)
	if err != nil {
		t.Logf("%s: no inode flags here: %v", path, err)
		return false
	}
	if on {
		flags |= fsImmutableFL
	} else {
		flags &^= fsImmutableFL
	}
	if err := unix.IoctlSetPointerInt(int(f.Fd()), unix.FS_IOC_SETFLAGS, flags); err != nil {
		t.Logf("%s: cannot set inode flags: %v", path, err)
		return false
	}
	if on {
		t.Cleanup(func() { setImmutable(t, path, false) })
	}
	return true
}

// fsImmutableFL is FS_IMMUTABLE_FL of linux/fs.h (chattr +i).
const fsImmutableFL = 0x10
