package main

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
	"conquest/internal/mounttest"
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

func sumFiles(t *testing.T, paths ...string) [sha256.Size]byte {
	t.Helper()
	h := sha256.New()
	for _, p := range paths {
		b, err := os.ReadFile(p)
		if err != nil {
			t.Fatal(err)
		}
		h.Write(b)
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
	if out, _ := c.ok("df", "--pram", rp, "--disk", rd); !strings.Contains(out, "2 files (3.0M of data), 1 directories, 1 symlinks") {
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
	if err := os.WriteFile("/proc/sys/vm/drop_caches", []byte("3"), 0); err == nil {
		if b, err := os.ReadFile(filepath.Join(mp, "large")); err != nil || !bytes.Equal(b, large) {
			t.Errorf("read-only mount, caches dropped: large: %d bytes, %v", len(b), err)
		}
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
	c.fails(1, "needs recovery", "mount", "--read-only", "--pram", rp, "--disk", rd, mp)
	if after := sumFiles(t, pram, disk); after != crashed {
		t.Fatal("refused read-only opens changed the images")
	}
	if _, _, code := c.run("fsck", "--pram", pram, "--disk", disk); code != 1 {
		t.Errorf("fsck of the crashed images: exit %d, want 1 (recovered)", code)
	}
	if out, _ := c.ok("fsck", "--pram", rp, "--disk", rd); !strings.Contains(out, "opened read-only") {
		t.Errorf("fsck of recovered read-only images:\n%s", out)
	}
}
