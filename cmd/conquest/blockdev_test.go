package main

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/loopdev"
)

// otherNode makes a second device node for the block device dev, in dir:
// the same device through another inode, as mknod or a container's /dev
// gives it.
func otherNode(t *testing.T, dir, dev string) string {
	t.Helper()
	var st unix.Stat_t
	if err := unix.Stat(dev, &st); err != nil {
		t.Fatal(err)
	}
	p := filepath.Join(dir, "node-"+filepath.Base(dev))
	if err := unix.Mknod(p, unix.S_IFBLK|0o600, int(st.Rdev)); err != nil {
		t.Skipf("cannot make a device node: %v", err)
	}
	return p
}

// A mounted pair of block devices is claimed (claim.go): reached through
// other device nodes, whose inodes its flock(2) locks do not cover, it is
// neither mounted a second time (two daemons corrupted one heap), nor
// formatted or checked (df reports the mount); and other programs' exclusive opens
// (mkfs.ext4's) get EBUSY. Once it is unmounted, the other nodes work.
func TestBlockDeviceClaimedAcrossNodes(t *testing.T) {
	c := newCLI(t)
	arena, disk := loopdev.New(t, 64<<20), loopdev.New(t, 128<<20)
	c.ok("mkfs", "--pram", arena, "--disk", disk)
	dir := t.TempDir()
	pa, da := otherNode(t, dir, arena), otherNode(t, dir, disk)

	// One device as both images, through two nodes (sameImage read the
	// device numbers from the wrong type and never matched).
	c.fails(1, "are the same file", "mkfs", "--force", "--pram", arena, "--disk", pa)

	mp, mp2 := c.mountpoint(), c.mountpoint()
	c.ok("mount", "--pram", arena, "--disk", disk, mp)
	want := bytes.Repeat([]byte("claimed "), 300_000) // on the disk
	if err := os.WriteFile(filepath.Join(mp, "f"), want, 0o644); err != nil {
		t.Fatal(err)
	}
	c.fails(1, "in use", "mkfs", "--force", "--pram", pa, "--disk", da)
	c.fails(8, "arena is in use: it is mounted on "+mp, "fsck", "--pram", pa, "--disk", da)
	// df through the other nodes reports the mount, as through the first.
	if out, _ := c.ok("df", "--pram", pa, "--disk", da); !strings.Contains(out, "arena") {
		t.Errorf("df through the other nodes:\n%s", out)
	}
	// The disk alone through another node, beside an arena file: the
	// flock of the disk's path does not see the mount either.
	c.fails(1, "in use", "mkfs", "--force", "--pram", filepath.Join(dir, "p.img"), "--pram-size", "16M", "--disk", da)
	for _, p := range []string{pa, da} {
		f, err := os.OpenFile(p, os.O_RDONLY|unix.O_EXCL, 0)
		if err == nil {
			f.Close()
		}
		if !errors.Is(err, unix.EBUSY) {
			t.Errorf("exclusive open of %s while it is mounted: %v, want EBUSY", p, err)
		}
	}
	c.fails(1, "arena is in use: it is mounted on "+mp, "mount", "--pram", pa, "--disk", da, mp2)
	c.ok("umount", mp)

	out, _ := c.ok("fsck", "--pram", pa, "--disk", da)
	if !strings.Contains(out, "clean") {
		t.Errorf("fsck through the other nodes: %s", out)
	}
	c.ok("mount", "--pram", pa, "--disk", da, mp2)
	if got, err := os.ReadFile(filepath.Join(mp2, "f")); err != nil || !bytes.Equal(got, want) {
		t.Errorf("reading through the other nodes: %d bytes, %v", len(got), err)
	}
	c.ok("umount", mp2)
}

// mkfs of block devices that held other data checks clean: a device keeps
// its old bytes where a new image file has zeros, and the heap header's
// unused words were left as they were (448 errors from fsck right after
// mkfs, with the first 64 KiB zero as a wiped device has them).
func TestMkfsReusedDevices(t *testing.T) {
	c := newCLI(t)
	arena, disk := loopdev.New(t, 64<<20), loopdev.New(t, 64<<20)
	rng := rand.New(rand.NewPCG(1, 2))
	for _, dev := range []string{arena, disk} {
		f, err := os.OpenFile(dev, os.O_WRONLY, 0)
		if err != nil {
			t.Fatal(err)
		}
		buf := make([]byte, 1<<20)
		for off := int64(0); ; off += int64(len(buf)) {
			for i := range buf {
				buf[i] = byte(rng.Uint32())
			}
			if off == 0 {
				clear(buf[:64<<10])
			}
			if _, err := f.WriteAt(buf, off); err != nil {
				break // the end of the device
			}
		}
		if err := f.Close(); err != nil {
			t.Fatal(err)
		}
	}
	for _, size := range []string{"32M", ""} {
		args := []string{"mkfs", "--force", "--pram", arena, "--disk", disk}
		if size != "" {
			args = append(args, "--pram-size", size)
		}
		c.ok(args...)
		out, errs, code := c.run("fsck", "--pram", arena, "--disk", disk)
		if code != 0 || !strings.Contains(out, "clean") {
			t.Fatalf("fsck right after mkfs (arena size %q): exit %d\n%s%s", size, code, out, errs)
		}
	}
}

// --disk-size on a block device uses that much of it, as mkfs.ext4 DEVICE
// SIZE does (it was ignored: the whole device became the disk), and a size
// larger than the device is refused.
func TestDiskSizeOnBlockDevice(t *testing.T) {
	c := newCLI(t)
	disk := loopdev.New(t, 128<<20)
	pram := filepath.Join(t.TempDir(), "p.img")
	c.fails(1, "does not fit on "+disk, "mkfs", "--pram", pram, "--pram-size", "16M", "--disk", disk, "--disk-size", "200M")
	c.ok("mkfs", "--pram", pram, "--pram-size", "16M", "--disk", disk, "--disk-size", "64M")
	if out, _ := c.ok("stat", "--pram", pram, "--disk", disk); !strings.Contains(out, "disk usage:           0B of 64.0M") {
		t.Errorf("stat of a 64M disk on a 128M device:\n%s", out)
	}
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	var st unix.Statfs_t
	if err := unix.Statfs(mp, &st); err != nil {
		t.Fatal(err)
	}
	if total := st.Blocks * uint64(st.Bsize); total > 64<<20+16<<20 {
		t.Errorf("statfs: %d bytes in all, want the 16M arena and the 64M disk at most", total)
	}
	// More than the disk holds does not fit, though the device would.
	f, err := os.Create(filepath.Join(mp, "big"))
	if err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 1<<20)
	for i := range buf {
		buf[i] = byte(i*31 + 7)
	}
	n := 0
	for ; n < 100; n++ {
		if _, err = f.Write(buf); err != nil {
			break
		}
	}
	f.Close()
	if !errors.Is(err, unix.ENOSPC) || n >= 64 {
		t.Errorf("writing 100 MiB into a 64M disk: %d MiB written, then %v; want ENOSPC before 64 MiB", n, err)
	}
	c.ok("umount", mp)
	if out, _ := c.ok("fsck", "--pram", pram, "--disk", disk); !strings.Contains(out, "clean") {
		t.Errorf("fsck: %s", out)
	}
}
