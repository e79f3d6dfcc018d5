package main

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/diskstore"
	"conquest/fusefs"
	"conquest/internal/loopdev"
	"conquest/internal/mounttest"
	"conquest/internal/reaper"
	"conquest/pram"
)

func TestMain(m *testing.M) { mounttest.Main(m) }

// runner runs the built conquest binary.
type runner struct {
	t    *testing.T
	bin  string
	home string
	env  []string // more environment for every command
	dir  string   // the commands' working directory, if not the test's
}

func newCLI(t *testing.T) *runner {
	t.Helper()
	if err := mounttest.Available(); err != nil {
		t.Skip(err)
	}
	c := &runner{t: t, bin: mounttest.Binary(t), home: t.TempDir()}
	return c
}

// run runs conquest with args and returns stdout, stderr and the exit code.
func (c *runner) run(args ...string) (string, string, int) {
	c.t.Helper()
	cmd := exec.Command(c.bin, args...)
	cmd.Env = append(append(os.Environ(), "CONQUEST_HOME="+c.home), c.env...)
	cmd.Dir = c.dir
	var out, errb bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errb
	err := cmd.Run()
	code := 0
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		code = ee.ExitCode()
	} else if err != nil {
		c.t.Fatalf("conquest %v: %v", args, err)
	}
	if strings.Contains(errb.String(), "goroutine ") {
		c.t.Errorf("conquest %v printed a stack trace:\n%s", args, errb.String())
	}
	return out.String(), errb.String(), code
}

// ok runs conquest and fails the test unless it exits 0.
func (c *runner) ok(args ...string) (string, string) {
	c.t.Helper()
	out, errs, code := c.run(args...)
	if code != 0 {
		c.t.Fatalf("conquest %v: exit %d\nstdout: %s\nstderr: %s", args, code, out, errs)
	}
	return out, errs
}

// fails runs conquest and wants exit code want and stderr mentioning msg.
func (c *runner) fails(want int, msg string, args ...string) string {
	c.t.Helper()
	out, errs, code := c.run(args...)
	if code != want || !strings.Contains(errs, msg) {
		c.t.Errorf("conquest %v: exit %d, stderr %q; want exit %d mentioning %q (stdout %q)", args, code, errs, want, msg, out)
	}
	return errs
}

// mountpoint makes a directory and registers a cleanup that unmounts it if
// a test left it mounted.
func (c *runner) mountpoint() string {
	mp := filepath.Join(c.t.TempDir(), "mnt")
	if err := os.Mkdir(mp, 0o755); err != nil {
		c.t.Fatal(err)
	}
	reaper.Mount(mp)
	c.t.Cleanup(func() {
		if _, ok := fusefs.Mounted(mp); ok {
			c.t.Errorf("%s left mounted", mp)
			c.run("umount", mp)
			if _, ok := fusefs.Mounted(mp); ok {
				fusefs.Unmount(mp, true)
			}
		}
	})
	return mp
}

func TestMkfs(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	out, _ := c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "32M", "--disk-size", "100M")
	if !strings.Contains(out, "formatted "+pram) {
		t.Errorf("mkfs output %q", out)
	}
	for p, size := range map[string]int64{pram: 32 << 20, disk: 100 << 20} {
		if st, err := os.Stat(p); err != nil || st.Size() != size {
			t.Errorf("%s: %v size %d, want %d", p, err, st.Size(), size)
		}
	}
	// An existing Conquest arena is refused without --force.
	c.fails(1, pram+": holds a Conquest arena", "mkfs", "--pram", pram, "--disk", disk)
	c.ok("mkfs", "--force", "--pram", pram, "--disk", disk)
	if st, _ := os.Stat(pram); st.Size() != 32<<20 {
		t.Errorf("reformat changed the size to %d", st.Size())
	}

	// Another file system, or just data.
	ext := filepath.Join(dir, "ext4.img")
	img := make([]byte, 1<<20)
	img[1080], img[1081] = 0x53, 0xEF
	if err := os.WriteFile(ext, img, 0o600); err != nil {
		t.Fatal(err)
	}
	c.fails(1, ext+": holds an ext2/ext3/ext4 file system", "mkfs", "--pram", ext, "--disk", filepath.Join(dir, "d2"))
	junk := filepath.Join(dir, "junk")
	if err := os.WriteFile(junk, []byte("precious"), 0o600); err != nil {
		t.Fatal(err)
	}
	c.fails(1, junk+": holds data", "mkfs", "--pram", filepath.Join(dir, "p3"), "--disk", junk, "--pram-size", "8M")
	if b, _ := os.ReadFile(junk); string(b) != "precious" {
		t.Error("refused mkfs still changed the file")
	}
	if real, err := exec.LookPath("mkfs.ext4"); err == nil {
		// A real ext4 image, if e2fsprogs is installed.
		e := filepath.Join(dir, "real-ext4.img")
		if err := os.WriteFile(e, make([]byte, 8<<20), 0o600); err != nil {
			t.Fatal(err)
		}
		if out, err := exec.Command(real, "-q", "-F", e).CombinedOutput(); err != nil {
			t.Fatalf("mkfs.ext4: %v %s", err, out)
		}
		c.fails(1, "ext2/ext3/ext4", "mkfs", "--pram", e, "--disk", filepath.Join(dir, "d4"))
	}
	c.fails(1, "bad size", "mkfs", "--pram", pram, "--disk", disk, "--force", "--pram-size", "lots")

	// The disk block size: checked before anything is written, and kept.
	p5, d5 := filepath.Join(dir, "p5"), filepath.Join(dir, "d5")
	c.fails(1, "--disk-block-size: 3072 is not a power of two", "mkfs", "--pram", p5, "--disk", d5, "--pram-size", "16M", "--disk-block-size", "3K")
	c.fails(1, "--disk-block-size: 2097152", "mkfs", "--pram", p5, "--disk", d5, "--pram-size", "16M", "--disk-block-size", "2M")
	// So is an arena size under the least (named as given, not rounded).
	c.fails(1, "--pram-size: an arena of 65536 bytes (64.0K) is too small", "mkfs", "--pram", p5, "--disk", d5, "--pram-size", "64K", "--disk-size", "64M")
	if exists(p5) || exists(d5) {
		t.Error("refused mkfs created its images")
	}
	// A format that fails part way (a disk too small for one block)
	// removes the images it created.
	c.fails(1, "holds no data block", "mkfs", "--pram", p5, "--disk", d5, "--pram-size", "16M", "--disk-size", "4K")
	if exists(p5) || exists(d5) {
		t.Error("failed mkfs left its images behind")
	}
	c.ok("mkfs", "--pram", p5, "--disk", d5, "--pram-size", "16M", "--disk-size", "64M", "--disk-block-size", "16K")
	if out, _ := c.ok("stat", "--pram", p5, "--disk", d5); !strings.Contains(out, "disk block size:      16.0K") {
		t.Errorf("stat after mkfs --disk-block-size 16K:\n%s", out)
	}
}

// The whole life of a file system through the command line: mount
// (daemonized), use, df, stat, double mount and fsck refused while mounted,
// umount waiting for the daemon, fsck clean.
// --version names the image formats the binary reads, which decide
// whether it can mount an image, and the build.
func TestVersion(t *testing.T) {
	c := newCLI(t)
	for _, flag := range []string{"--version", "-v"} {
		out, _ := c.ok(flag)
		want := fmt.Sprintf("; arena format %d, disk format %d\n", pram.Version, diskstore.DiskVersion)
		if !strings.HasPrefix(out, "conquest version ") || !strings.HasSuffix(out, want) || !strings.Contains(out, "built with go") {
			t.Errorf("conquest %s printed %q", flag, out)
		}
	}
}

func TestMountLifecycle(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "64M")
	mp := c.mountpoint()
	start := time.Now()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	t.Logf("mount returned in %v", time.Since(start))
	mi, ok := fusefs.Mounted(mp)
	if !ok || mi.FSType != "fuse.conquest" || mi.Source != "conquest:"+pram {
		t.Fatalf("after mount: %+v %v", mi, ok)
	}
	if err := os.WriteFile(filepath.Join(mp, "hello"), []byte("hi"), 0o644); err != nil {
		t.Fatal(err)
	}

	// In use: a second mount, fsck and mkfs are refused.
	mp2 := c.mountpoint()
	c.fails(1, "arena is in use: it is mounted on "+mp, "mount", "--pram", pram, "--disk", disk, mp2)
	if _, ok := fusefs.Mounted(mp2); ok {
		t.Error("double mount succeeded")
	}
	c.fails(1, "already mounted here", "mount", "--pram", pram, "--disk", disk, mp)
	c.fails(8, "in use", "fsck", "--pram", pram, "--disk", disk)
	c.fails(1, "in use", "mkfs", "--force", "--pram", pram, "--disk", disk)

	// df of a mount point shows the arena and the disk apart (the daemon
	// serves them as an extended attribute; statfs adds them together).
	if err := os.WriteFile(filepath.Join(mp, "large"), bytes.Repeat([]byte("L"), 3<<20), 0o644); err != nil {
		t.Fatal(err)
	}
	out, _ := c.ok("df", mp)
	if !strings.Contains(out, mp) || !strings.Contains(out, "mounted") || !strings.Contains(out, "arena") || !strings.Contains(out, "disk") {
		t.Errorf("df of a mount point:\n%s", out)
	}
	buf := make([]byte, 4096)
	n, err := unix.Getxattr(mp, fusefs.SpaceXattr, buf)
	if err != nil {
		t.Fatalf("getxattr %s: %v", fusefs.SpaceXattr, err)
	}
	live, err := fusefs.ParseSpace(buf[:n])
	if err != nil {
		t.Fatalf("%s %q: %v", fusefs.SpaceXattr, buf[:n], err)
	}
	if live.DiskUsed < 3<<20 || live.DiskFree+live.DiskUsed > live.DiskBytes || live.HeapUsed == 0 || live.Inodes != 3 ||
		live.DiskAvail == 0 || live.DiskAvail >= live.DiskFree { // the overwrite reserve is free, not available
		t.Errorf("space of a mount with a 3 MiB file and a small one: %+v", live)
	}
	out, _ = c.ok("df", "--pram", pram, "--disk", disk)
	if !strings.Contains(out, mp) {
		t.Errorf("df of mounted images should find the mount:\n%s", out)
	}

	c.ok("umount", mp)
	if _, ok := fusefs.Mounted(mp); ok {
		t.Fatal("still mounted after umount")
	}
	// umount waited for the daemon: the arena is free at once.
	if inUse(pram) {
		t.Error("arena still locked after umount returned")
	}
	out, _ = c.ok("fsck", "--pram", pram, "--disk", disk)
	if !strings.Contains(out, "clean") {
		t.Errorf("fsck: %s", out)
	}
	// The arena, which an open for writing changes (its mount counter);
	// the disk, of default size, is gigabytes to hash.
	images := sumFiles(t, pram)
	out, _ = c.ok("df", "--pram", pram, "--disk", disk)
	if !strings.Contains(out, "2 files") || !strings.Contains(out, "arena") {
		t.Errorf("df of images:\n%s", out)
	}
	if sumFiles(t, pram) != images {
		t.Error("df of unmounted images wrote to the arena (it opens read-only)")
	}
	// The same disk figures as the daemon served while mounted.
	fsys, err := conquest.Open(pram, disk, conquest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if u := fsys.Usage(); u.DiskUsed != live.DiskUsed || u.DiskBytes != live.DiskBytes {
		t.Errorf("disk usage after umount %d of %d, while mounted %d of %d", u.DiskUsed, u.DiskBytes, live.DiskUsed, live.DiskBytes)
	}
	fsys.Close()
	out, _ = c.ok("stat", "--pram", pram, "--disk", disk)
	for _, want := range []string{"uuid:", "arena size:", "heap:", "files:", "directories:",
		"  in the arena:       1 (", "  on the disk:        1 (3.0M of data)", "disk free space:", "disk errors:          0 checksum, 0 I/O"} {
		if !strings.Contains(out, want) {
			t.Errorf("stat lacks %q:\n%s", want, out)
		}
	}
	c.fails(1, "not mounted", "umount", mp)
}

// With no --pram/--disk, mount formats the embedded default on first use
// and says so, and finds the same file system the next time.
func TestEmbeddedDefault(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	_, errs := c.ok("mount", mp)
	if !strings.Contains(errs, "formatted a new file system in "+c.home) {
		t.Errorf("first mount did not say it formatted: %q", errs)
	}
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("persist"), 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("umount", mp)
	_, errs = c.ok("mount", mp)
	if strings.Contains(errs, "formatted") {
		t.Errorf("second mount formatted again: %q", errs)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "persist" {
		t.Errorf("after remount: %q %v", b, err)
	}
	c.ok("umount", mp)
	if b, err := os.ReadFile(filepath.Join(c.home, "conquest.log")); err != nil || !strings.Contains(string(b), "closed cleanly") {
		t.Errorf("daemon log: %q %v", b, err)
	}
	c.ok("fsck")
}

// A damaged superblock is refused, by name, by mount and fsck.
func TestCorruptImageRefused(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M")
	f, err := os.OpenFile(pram, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt([]byte{0xde, 0xad}, 40); err != nil { // inside the checksummed superblock
		t.Fatal(err)
	}
	f.Close()
	mp := c.mountpoint()
	c.fails(1, pram, "mount", "--pram", pram, "--disk", disk, mp)
	errs := c.fails(4, "damaged", "fsck", "--pram", pram, "--disk", disk)
	if !strings.Contains(errs, "backup copy is intact") {
		t.Errorf("fsck does not say the superblock's copy is intact: %s", errs)
	}
	t.Logf("fsck said: %s", errs)
	if _, ok := fusefs.Mounted(mp); ok {
		t.Error("a corrupt image was mounted")
	}
	// A disk from another pair.
	p2, d2 := filepath.Join(dir, "p2.img"), filepath.Join(dir, "d2.img")
	c.ok("mkfs", "--pram", p2, "--disk", d2, "--pram-size", "16M", "--disk-size", "16M")
	// A refusal of the pair writes nothing to either image: the disk is
	// checked before the arena's open counts the mount (an outside test
	// saw the mount counter and checkpoint sequence change).
	arena2 := sumFiles(t, p2)
	c.fails(1, "not formatted together", "mount", "--pram", p2, "--disk", disk, mp)
	c.fails(1, "not formatted together", "df", "--pram", p2, "--disk", disk)
	c.fails(8, "not formatted together", "fsck", "--pram", p2, "--disk", disk)
	if sumFiles(t, p2) != arena2 {
		t.Error("a refused mount, df or fsck of a mismatched pair changed the arena")
	}
	// A disk truncated since mkfs: refused by mount, named by fsck.
	p3, d3 := filepath.Join(dir, "p3.img"), filepath.Join(dir, "d3.img")
	c.ok("mkfs", "--pram", p3, "--disk", d3, "--pram-size", "16M", "--disk-size", "64M")
	if err := os.Truncate(d3, 16<<20); err != nil {
		t.Fatal(err)
	}
	arena3 := sumFiles(t, p3)
	c.fails(1, "does not match arena", "mount", "--pram", p3, "--disk", d3, mp)
	c.fails(4, "device has 16777216 bytes", "fsck", "--pram", p3, "--disk", d3)
	if sumFiles(t, p3) != arena3 {
		t.Error("a refused mount or fsck of a truncated disk changed the arena")
	}
	// Both copies of the arena superblock's version field damaged: damage
	// (exit 4), not a format of a later Conquest (exit 8), as a corruption
	// review saw ("unsupported ... version: found version 1831600129").
	// A version a later format could have is still "unsupported".
	p4, d4 := filepath.Join(dir, "p4.img"), filepath.Join(dir, "d4.img")
	c.ok("mkfs", "--pram", p4, "--disk", d4, "--pram-size", "16M", "--disk-size", "16M")
	setVersion := func(v uint32) {
		t.Helper()
		f, err := os.OpenFile(p4, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		b := binary.LittleEndian.AppendUint32(nil, v)
		_, err1 := f.WriteAt(b, 8)
		_, err2 := f.WriteAt(b, 2048+8)
		if err := errors.Join(err1, err2, f.Close()); err != nil {
			t.Fatal(err)
		}
	}
	setVersion(1831600129)
	c.fails(1, "the version field reads 1831600129 and the checksum fails", "mount", "--pram", p4, "--disk", d4, mp)
	if errs := c.fails(4, "superblock is damaged", "fsck", "--pram", p4, "--disk", d4); strings.Contains(errs, "unsupported") {
		t.Errorf("a damaged version field is reported as an unsupported format: %s", errs)
	}
	setVersion(2)
	c.fails(8, "unsupported Conquest arena format version: found version 2", "fsck", "--pram", p4, "--disk", d4)
	// Not a Conquest image at all.
	other := filepath.Join(dir, "other")
	os.WriteFile(other, make([]byte, 1<<20), 0o600)
	c.fails(1, "not a Conquest arena", "mount", "--pram", other, "--disk", disk, mp)
	// A disk whose first 4 KiB (the superblock and its copy) are zeros, or
	// a wrong file given as the disk: refused, and the message does not
	// advise mkfs, which would lose the arena's files.
	for _, d := range []string{other, d2} {
		if d == d2 {
			zeroAt(t, d2, 0, 4096)
		}
		errs := c.fails(1, "not the disk formatted with this arena, or both copies of its superblock", "mount", "--pram", p2, "--disk", d, mp)
		if !strings.Contains(errs, "would format both images anew, losing every file") {
			t.Errorf("the refusal of %s does not warn against mkfs: %s", d, errs)
		}
		if sumFiles(t, p2) != arena2 {
			t.Errorf("the refused mount with %s as its disk changed the arena", d)
		}
	}
}

// An arena whose mkfs was killed before it formatted the heap (every root
// slot empty, no heap header where the geometry puts it) is named as such,
// with the mkfs --force that formats the pair again, not as plain damage
// (an outside review killed mkfs at random moments). A damaged root slot 0
// beside an intact header is still damage, which fsck --repair mends, and
// so is root slot 0 zeroed with the header's magic while the other root
// slots are set: those are written after the heap, so files may exist
// (that used to be named an interrupted mkfs "holding no files", with
// mkfs --force advised).
func TestInterruptedMkfs(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	p, d := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", p, "--disk", d, "--pram-size", "16M", "--disk-size", "16M")
	g, err := pram.ReadGeometry(p)
	if err != nil {
		t.Fatal(err)
	}
	const rootSlot0 = 576 // pram: offRoots
	zeroAt(t, p, rootSlot0, 8)
	if errs := c.fails(4, "damaged", "fsck", "--pram", p, "--disk", d); strings.Contains(errs, "mkfs did not finish") {
		t.Errorf("a damaged root slot beside an intact heap is taken for an interrupted mkfs: %s", errs)
	}
	zeroAt(t, p, int64(g.HeapOff), 8) // the heap header's magic
	mp := c.mountpoint()
	if errs := c.fails(1, "damaged", "mount", "--pram", p, "--disk", d, mp); strings.Contains(errs, "mkfs") {
		t.Errorf("a damaged root slot 0 and heap magic beside the other root slots are taken for an interrupted mkfs: %s", errs)
	}
	if out, errs, code := c.run("fsck", "--repair", "--pram", p, "--disk", d); code != 1 || !strings.Contains(out, "rewrote the header's static part") {
		t.Errorf("fsck --repair: exit %d\nstdout: %s\nstderr: %s", code, out, errs)
	}
	c.ok("fsck", "--pram", p, "--disk", d)
	// As before Format: no root slot set, no heap magic.
	zeroAt(t, p, rootSlot0, 8*pram.NumRoots)
	zeroAt(t, p, int64(g.HeapOff), 8)
	c.fails(1, "mkfs did not finish formatting it (interrupted?)", "mount", "--pram", p, "--disk", d, mp)
	c.fails(4, "mkfs --force --pram", "fsck", "--pram", p, "--disk", d)
	// Stopped before it wrote the disk's superblock as well: still named
	// as an interrupted mkfs, not as a disk of another arena.
	zeroAt(t, d, 0, 4096)
	c.fails(1, "mkfs did not finish formatting it (interrupted?)", "mount", "--pram", p, "--disk", d, mp)
	c.fails(4, "mkfs --force --pram", "fsck", "--pram", p, "--disk", d)
	c.fails(4, "mkfs --force --pram", "fsck", "--repair", "--pram", p, "--disk", d)
	c.ok("mkfs", "--force", "--pram", p, "--disk", d, "--pram-size", "16M", "--disk-size", "16M")
	c.ok("fsck", "--pram", p, "--disk", d)
}

// zeroAt overwrites n bytes of the file at path with zeros from off.
func zeroAt(t *testing.T, path string, off int64, n int) {
	t.Helper()
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	_, err = f.WriteAt(make([]byte, n), off)
	if err := errors.Join(err, f.Close()); err != nil {
		t.Fatal(err)
	}
}

// fsck exit codes after a crash: 1 (recovered), then 0.
func TestFsckAfterKill(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M")
	m := mounttest.MountProcess(t, mounttest.WithImages(pram, disk))
	if err := os.WriteFile(m.Path("f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	m.Kill()
	out, _, code := c.run("fsck", "--pram", pram, "--disk", disk)
	if code != 1 || !strings.Contains(out, "not unmounted cleanly") {
		t.Errorf("fsck after kill -9: exit %d, %q; want 1", code, out)
	}
	if _, _, code := c.run("fsck", "--pram", pram, "--disk", disk); code != 0 {
		t.Errorf("second fsck: exit %d, want 0", code)
	}
}

// SIGTERM, SIGINT or SIGHUP (its terminal closed) to `conquest mount
// --foreground` unmounts cleanly and exits 0.
func TestForegroundSIGTERM(t *testing.T) {
	// SIGQUIT (found by an outside review) left a dead mount: Go's
	// default dumped the goroutines and exited.
	for _, sig := range []syscall.Signal{syscall.SIGTERM, syscall.SIGINT, syscall.SIGHUP, syscall.SIGQUIT} {
		t.Run(sig.String(), func(t *testing.T) { foregroundSignal(t, sig) })
	}
}

func foregroundSignal(t *testing.T, sig syscall.Signal) {
	c := newCLI(t)
	mp := c.mountpoint()
	cmd := exec.Command(c.bin, "mount", "--foreground", mp)
	cmd.Env = append(os.Environ(), "CONQUEST_HOME="+c.home)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := fusefs.Mounted(mp); ok {
			break
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			cmd.Wait()
			t.Fatalf("never mounted: %s", errb.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(sig)
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after %v: %v\n%s", sig, err, errb.String())
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatalf("no exit after %v", sig)
	}
	if _, ok := fusefs.Mounted(mp); ok {
		t.Errorf("still mounted after %v", sig)
	}
	if !strings.Contains(errb.String(), "closed cleanly") {
		t.Errorf("stderr: %s", errb.String())
	}
	if sig == syscall.SIGQUIT && !strings.Contains(errb.String(), "the daemon's goroutines:\ngoroutine ") {
		t.Errorf("no goroutine dump after SIGQUIT: %s", errb.String())
	}
}

// A foreground daemon whose stderr is a pipe nobody reads any more (its
// `| tee` gone) keeps serving, and still unmounts cleanly on SIGTERM.
func TestForegroundBrokenPipe(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // every write to w fails from the start
	cmd := exec.Command(c.bin, "mount", "--foreground", mp)
	cmd.Env = append(os.Environ(), "CONQUEST_HOME="+c.home)
	cmd.Stdout, cmd.Stderr = w, w
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	w.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	deadline := time.Now().Add(30 * time.Second)
	for {
		if _, ok := fusefs.Mounted(mp); ok {
			break
		}
		select {
		case err := <-done:
			t.Fatalf("the daemon exited before mounting: %v", err)
		default:
		}
		if time.Now().After(deadline) {
			cmd.Process.Kill()
			<-done
			t.Fatal("never mounted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v", err)
		}
	case <-time.After(30 * time.Second):
		cmd.Process.Kill()
		<-done
		t.Fatal("no exit after SIGTERM")
	}
	if _, ok := fusefs.Mounted(mp); ok {
		t.Error("still mounted after SIGTERM")
	}
}

// The daemons started from one data directory share its log; one that
// starts when the log is over maxLog moves it to conquest.log.1 first.
func TestLogRotation(t *testing.T) {
	c := newCLI(t)
	log := filepath.Join(c.home, "conquest.log")
	if err := os.WriteFile(log, []byte("old line\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Truncate(log, maxLog+1); err != nil {
		t.Fatal(err)
	}
	mp := c.mountpoint()
	c.ok("mount", mp)
	c.ok("umount", mp)
	if st, err := os.Stat(log + ".1"); err != nil || st.Size() != maxLog+1 {
		t.Fatalf("conquest.log.1 after a mount with a %d-byte log: %v", maxLog+1, err)
	}
	b, err := os.ReadFile(log)
	if err != nil || len(b) > 64<<10 || !strings.Contains(string(b), "mounted") {
		t.Fatalf("the new log: %d bytes, %v", len(b), err)
	}
	// Under the limit, the log goes on.
	c.ok("mount", mp)
	c.ok("umount", mp)
	if b2, _ := os.ReadFile(log); !bytes.HasPrefix(b2, b) || len(b2) <= len(b) {
		t.Errorf("a second mount did not append to the log (%d bytes, then %d)", len(b), len(b2))
	}
}

// After kill -9 of the daemon, umount removes the dead mount, and the next
// mount recovers the arena and says so; mount also clears a dead mount by
// itself.
func TestDeadMount(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	c.ok("mount", mp)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	// The kernel caches the root's attributes (a stat of the mount point
	// then never reaches the dead daemon), and a descriptor keeps the mount
	// busy: umount must still take the dead mount down.
	if _, err := os.Stat(mp); err != nil {
		t.Fatal(err)
	}
	held, err := os.Open(filepath.Join(mp, "f"))
	if err != nil {
		t.Fatal(err)
	}
	// Find and kill the daemon: it holds the arena lock.
	pram := filepath.Join(c.home, "pram.img")
	pid := holder(pram)
	if pid == 0 {
		t.Fatalf("no process has %s open", pram)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for inUse(pram) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mp, &sfs); !errors.Is(err, syscall.ENOTCONN) {
		t.Fatalf("statfs of the dead mount: %v, want ENOTCONN", err)
	}
	if _, errs := c.ok("umount", mp); !strings.Contains(errs, "daemon had died") || !strings.Contains(errs, "detached") {
		t.Errorf("umount of a busy dead mount: %q", errs)
	}
	if _, ok := fusefs.Mounted(mp); ok {
		t.Fatal("umount left the dead mount on the mount point")
	}
	if _, err := held.Read(make([]byte, 1)); !errors.Is(err, syscall.ENOTCONN) {
		t.Errorf("read from the detached dead mount: %v, want ENOTCONN", err)
	}
	held.Close()
	_, errs := c.ok("mount", mp)
	if !strings.Contains(errs, "not unmounted cleanly") {
		t.Errorf("remount after kill -9 did not report recovery: %q", errs)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "x" {
		t.Errorf("after recovery: %q %v", b, err)
	}

	// Mounting straight over the dead mount clears it first, even while a
	// process still holds a descriptor into it (the detach is lazy then)
	// and the mount point's attributes are cached.
	held, err = os.Open(filepath.Join(mp, "f"))
	if err != nil {
		t.Fatal(err)
	}
	defer held.Close()
	if _, err := os.Stat(mp); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mp, "g"), []byte("y"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid = holder(pram)
	syscall.Kill(pid, syscall.SIGKILL)
	for inUse(pram) && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	_, errs = c.ok("mount", mp)
	if !strings.Contains(errs, "dead Conquest mount") || !strings.Contains(errs, "not unmounted cleanly") {
		t.Errorf("mount over a dead mount: %q", errs)
	}
	for name, want := range map[string]string{"f": "x", "g": "y"} {
		if b, err := os.ReadFile(filepath.Join(mp, name)); err != nil || string(b) != want {
			t.Errorf("after mounting over the dead mount, %s: %q %v", name, b, err)
		}
	}
	c.ok("umount", mp)
	if _, ok := fusefs.Mounted(mp); ok {
		t.Error("a mount is left on the mount point")
	}
}

// A daemon killed while `conquest umount` waits for it to close the arena
// lets go of the arena's lock as a clean exit does: umount then asks the
// arena (closedCleanly) and says that it was not closed, rather than report
// a clean unmount. (The race itself cannot be timed from here: a stopped
// daemon hangs umount's own look at the mount point.)
func TestUmountReportsUnclosedArena(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	pram := filepath.Join(c.home, "pram.img")
	c.ok("mount", mp)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	pid := holder(pram)
	if pid == 0 {
		t.Fatalf("no process has %s open", pram)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); inUse(pram); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed daemon still holds the arena")
		}
	}
	if err := closedCleanly(pram); err == nil || !strings.Contains(err.Error(), "exited without closing the arena") {
		t.Errorf("closedCleanly after kill -9: %v", err)
	}
	c.ok("umount", mp) // the dead mount
	if _, errs := c.ok("mount", mp); !strings.Contains(errs, "not unmounted cleanly") {
		t.Errorf("the mount after: %q", errs)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "kept" {
		t.Errorf("after recovery: %q %v", b, err)
	}
	c.ok("umount", mp)
	if err := closedCleanly(pram); err != nil {
		t.Errorf("after a clean umount: %v", err)
	}
}

// `conquest umount` of a mount whose daemon is stopped (or hung) does not
// hang: it unmounts without asking the daemon anything, waits for it to let
// go of the arena, and says that the arena was not closed when the daemon
// is then killed. (Until session 39 its look at the mount point, a GETATTR
// of the root, hung it for good.)
func TestUmountStoppedDaemon(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	c.ok("mount", mp)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("kept"), 0o644); err != nil { // the root's attributes go stale
		t.Fatal(err)
	}
	pram := filepath.Join(c.home, "pram.img")
	pid := holder(pram)
	if pid == 0 {
		t.Fatalf("no process has %s open", pram)
	}
	if err := syscall.Kill(pid, syscall.SIGSTOP); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { syscall.Kill(pid, syscall.SIGKILL) })
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "umount", mp)
	cmd.Env = append(os.Environ(), "CONQUEST_HOME="+c.home)
	var errb bytes.Buffer
	cmd.Stderr = &errb
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	gone := false
	for deadline := time.Now().Add(20 * time.Second); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		if _, ok := fusefs.Mounted(mp); !ok {
			gone = true
			break
		}
	}
	syscall.Kill(pid, syscall.SIGKILL)
	err := cmd.Wait()
	if !gone {
		t.Fatalf("umount did not take down the mount of a stopped daemon within 20 s (umount: %v, %q)", err, errb.String())
	}
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != 1 || !strings.Contains(errb.String(), "exited without closing the arena") {
		t.Errorf("umount of a stopped daemon, then killed: %v, stderr %q; want exit 1 saying the arena was not closed", err, errb.String())
	}
	if _, errs := c.ok("mount", mp); !strings.Contains(errs, "not unmounted cleanly") {
		t.Errorf("the mount after: %q", errs)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "kept" {
		t.Errorf("after recovery: %q %v", b, err)
	}
	c.ok("umount", mp)
}

// A live mount whose arena file was replaced under it (moved away, another
// file put at its path) is not taken for a dead one: the new file's free
// lock says nothing of the mount's daemon, so mount refuses to mount over
// it and umount unmounts it instead of detaching it (and says it cannot
// tell whether the arena was closed: the file at its path is another).
func TestLiveMountWithReplacedArena(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	c.ok("mount", mp)
	pram := filepath.Join(c.home, "pram.img")
	moved := pram + ".moved"
	if err := os.Rename(pram, moved); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(pram, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	c.fails(1, "already mounted here", "mount", mp)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("alive"), 0o644); err != nil {
		t.Fatalf("the live mount after a refused mount over it: %v", err)
	}
	// The file at the arena's path says nothing of whether the daemon
	// closed the arena: umount says it cannot tell (exit 1).
	if _, errs, code := c.run("umount", mp); strings.Contains(errs, "daemon had died") || code != 1 || !strings.Contains(errs, "cannot tell whether the daemon closed the arena") {
		t.Errorf("umount of a live mount whose arena path holds another file: exit %d, %q", code, errs)
	}
	if _, ok := fusefs.Mounted(mp); ok {
		t.Fatal("umount left the mount on the mount point")
	}
	if err := os.Rename(moved, pram); err != nil {
		t.Fatal(err)
	}
	// umount waited for the lock of the file now at the arena's path, not
	// for the daemon's: wait until the daemon lets go of the moved arena.
	for deadline := time.Now().Add(10 * time.Second); inUse(pram) && time.Now().Before(deadline); {
		time.Sleep(10 * time.Millisecond)
	}
	c.ok("mount", mp)
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "alive" {
		t.Errorf("after remounting the moved arena: %q %v", b, err)
	}
	c.ok("umount", mp)
}

// holder finds a process that has path open, by its /proc fd links.
func holder(path string) int {
	fds, _ := filepath.Glob("/proc/[0-9]*/fd/*")
	for _, fd := range fds {
		if target, err := os.Readlink(fd); err == nil && target == path {
			var pid int
			fmt.Sscanf(strings.Split(fd, "/")[2], "%d", &pid)
			if pid != os.Getpid() {
				return pid
			}
		}
	}
	return 0
}

// A mount is open to every user within its permission bits, as any mounted
// file system is (allow_other, the default for root); --private keeps it to
// the mounter. Run as root (the CI runs as root); a non-root run skips.
func TestMountOpenToOtherUsers(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "64M")
	mp := c.mountpoint()
	// nobody must be able to walk down to the mount point.
	for p := filepath.Dir(mp); p != filepath.Dir(p) && strings.HasPrefix(p, os.TempDir()+"/"); p = filepath.Dir(p) {
		if err := os.Chmod(p, 0o755); err != nil {
			t.Fatal(err)
		}
	}
	nobody := func(name string, args ...string) (string, error) {
		cmd := exec.Command(name, args...)
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
		out, err := cmd.CombinedOutput()
		return string(out), err
	}

	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	if mi, _ := fusefs.Mounted(mp); !strings.Contains(mi.Options, "allow_other") {
		t.Errorf("mounted without allow_other: %q", mi.Options)
	}
	if err := os.WriteFile(filepath.Join(mp, "public"), []byte("for all\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mp, "secret"), []byte("root only\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := nobody("cat", filepath.Join(mp, "public")); err != nil || out != "for all\n" {
		t.Errorf("nobody reading a 0644 file: %q %v", out, err)
	}
	if out, err := nobody("cat", filepath.Join(mp, "secret")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("nobody reading a 0600 root file: %q %v; want Permission denied", out, err)
	}
	if out, err := nobody("sh", "-c", "echo x > "+filepath.Join(mp, "public")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("nobody writing a 0644 root file: %q %v; want Permission denied", out, err)
	}
	c.ok("umount", mp)

	c.ok("mount", "--private", "--pram", pram, "--disk", disk, mp)
	if mi, _ := fusefs.Mounted(mp); strings.Contains(mi.Options, "allow_other") {
		t.Errorf("--private mounted with allow_other: %q", mi.Options)
	}
	if out, err := nobody("cat", filepath.Join(mp, "public")); err == nil || !strings.Contains(out, "Permission denied") {
		t.Errorf("nobody reading through a --private mount: %q %v; want Permission denied", out, err)
	}
	if b, err := os.ReadFile(filepath.Join(mp, "public")); err != nil || string(b) != "for all\n" {
		t.Errorf("root reading through a --private mount: %q %v", b, err)
	}
	c.ok("umount", mp)
	c.fails(1, "contradict", "mount", "--private", "--allow-other", "--pram", pram, "--disk", disk, mp)
}

// Block devices for both the arena and the disk (the product's real
// configuration, with loop devices standing in): mkfs sizes them itself,
// the disk is used with O_DIRECT, and data survives a remount and a cold
// cache.
func TestBlockDevices(t *testing.T) {
	c := newCLI(t)
	arena, disk := loopdev.New(t, 96<<20), loopdev.New(t, 256<<20)
	out, _ := c.ok("mkfs", "--pram", arena, "--disk", disk)
	// The arena leaves room for its checkpoint slots (pram/slot.go).
	if want := formatSize(pram.DeviceArenaSize(96 << 20)); !strings.Contains(out, "("+want+" arena)") {
		t.Errorf("mkfs on a block device: %q, want a %s arena", out, want)
	}
	// Formatted devices are refused the second time without --force.
	c.fails(1, "--force", "mkfs", "--pram", arena, "--disk", disk)

	mp := c.mountpoint()
	c.ok("mount", "--pram", arena, "--disk", disk, mp)
	small := []byte("kept in the arena\n")
	large := make([]byte, 5<<20+12345)
	for i := range large {
		large[i] = byte(i*7 + i>>13)
	}
	if err := os.WriteFile(filepath.Join(mp, "small"), small, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(mp, "large"), large, 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("umount", mp)
	out, _ = c.ok("fsck", "--pram", arena, "--disk", disk)
	if !strings.Contains(out, "clean") {
		t.Errorf("fsck: %s", out)
	}
	out, _ = c.ok("df", "--pram", arena, "--disk", disk)
	if !strings.Contains(out, "disk") {
		t.Errorf("df of block devices:\n%s", out)
	}
	out, _ = c.ok("stat", "--pram", arena, "--disk", disk)
	if !strings.Contains(out, "files:                2 ") {
		t.Errorf("stat after remount:\n%s", out)
	}

	c.ok("mount", "--pram", arena, "--disk", disk, mp)
	check := func(when string) {
		t.Helper()
		if b, err := os.ReadFile(filepath.Join(mp, "small")); err != nil || !bytes.Equal(b, small) {
			t.Errorf("%s: small file %q %v", when, b, err)
		}
		if b, err := os.ReadFile(filepath.Join(mp, "large")); err != nil || !bytes.Equal(b, large) {
			t.Errorf("%s: large file differs (%d bytes, %v)", when, len(b), err)
		}
	}
	check("after remount")
	dropCached(t, filepath.Join(mp, "small"), filepath.Join(mp, "large"))
	check("after dropping caches")
	c.ok("umount", mp)
	// The disk, a block device, is used with O_DIRECT (diskstore/doc.go).
	if b, err := os.ReadFile(filepath.Join(c.home, "conquest.log")); err != nil || !strings.Contains(string(b), "(disk "+disk+" (O_DIRECT))") {
		t.Errorf("daemon log does not show the disk in O_DIRECT mode: %v\n%s", err, b)
	}
}

// A user who cannot open /dev/fuse learns that from mount's error, not only
// fusermount3's exit status. It runs where /dev/fuse is closed to other
// users (some containers; this development machine is one); where it
// has the usual mode 0666 there is nothing to report, and it skips.
func TestMountWithoutFUSEAccess(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root to switch users")
	}
	st, err := os.Stat("/dev/fuse")
	if err != nil {
		t.Skipf("no /dev/fuse: %v", err)
	}
	if st.Mode().Perm()&0o006 == 0o006 {
		t.Skip("/dev/fuse is open to every user here")
	}
	c := newCLI(t)
	mp := c.mountpoint()
	home := t.TempDir()
	// A copy of the binary that nobody may run.
	bin := filepath.Join(t.TempDir(), "conquest")
	data, err := os.ReadFile(c.bin)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(bin, data, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, p := range []string{mp, home, bin} {
		if err := os.Chown(p, 65534, 65534); err != nil {
			t.Fatal(err)
		}
		for d := filepath.Dir(p); d != filepath.Dir(d) && strings.HasPrefix(d, os.TempDir()+"/"); d = filepath.Dir(d) {
			if err := os.Chmod(d, 0o755); err != nil {
				t.Fatal(err)
			}
		}
	}
	cmd := exec.Command(bin, "mount", mp)
	cmd.Env = append(os.Environ(), "CONQUEST_HOME="+home)
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err == nil {
		fusefs.Unmount(mp, true)
		t.Fatalf("nobody mounted although /dev/fuse (mode %#o) is closed to it: %s", st.Mode().Perm(), out)
	}
	if !strings.Contains(string(out), "cannot open /dev/fuse") {
		t.Errorf("mount as nobody without access to /dev/fuse: %v, %q; want it to name /dev/fuse", err, out)
	}
}

// Two arenas that name one disk (here a copy of an arena) never use it at
// once: the daemon holds the disk as it holds its arena, so while the first
// is mounted, mounting, checking or reading the copy with the same disk is
// refused, as is formatting that disk for another arena. Without the disk's
// lock both daemons allocated and wrote the same blocks, and reads of the
// first mount's large files failed with EIO.
func TestSharedDiskRefused(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "32M", "--disk-size", "64M")
	b, err := os.ReadFile(pram)
	if err != nil {
		t.Fatal(err)
	}
	cp := filepath.Join(dir, "copy.img")
	if err := os.WriteFile(cp, b, 0o600); err != nil {
		t.Fatal(err)
	}
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	mp2 := c.mountpoint()
	// The refusals name the mount that holds the disk (an outside review:
	// "in use by another process (... mounted from another arena?)").
	by := "in use by the file system mounted on " + mp + " (from the arena " + pram + ")"
	c.fails(1, "disk is "+by, "mount", "--pram", cp, "--disk", disk, mp2)
	if _, ok := fusefs.Mounted(mp2); ok {
		t.Error("a second arena was mounted with the disk of a mounted file system")
		c.run("umount", mp2)
	}
	c.fails(8, "disk is "+by, "fsck", "--pram", cp, "--disk", disk)
	c.fails(1, "disk is "+by, "df", "--pram", cp, "--disk", disk)
	// Refused at once: the process holding the disk holds a mounted arena,
	// so it is no daemon on its way out (before, mkfs waited the 30 s
	// meant for those, and said so after a second).
	if errs := c.fails(1, disk+": "+by, "mkfs", "--force", "--pram", filepath.Join(dir, "new.img"), "--disk", disk, "--pram-size", "16M"); strings.Contains(errs, "waiting") {
		t.Errorf("mkfs waited for the disk of a mounted file system: %s", errs)
	}
	// The same pair still says that its arena is mounted.
	c.fails(1, "arena is in use: it is mounted on "+mp, "mount", "--pram", pram, "--disk", disk, mp2)
	data := bytes.Repeat([]byte("L"), 3<<20)
	if err := os.WriteFile(filepath.Join(mp, "large"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	c.ok("umount", mp)
	// Released with the arena: fsck right after umount finds both free.
	out, _ := c.ok("fsck", "--pram", pram, "--disk", disk)
	if !strings.Contains(out, "clean") {
		t.Errorf("fsck: %s", out)
	}
}

// The mount named as holding a disk is the one its daemon serves, though
// the arena path another mount names is now another file: an arena renamed
// while mounted, and another formatted and mounted under its old name
// (an outside review saw the first mount named for the second's disk).
func TestDiskHolderAfterArenaRenamed(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	a1, d1, d2 := filepath.Join(dir, "a1.img"), filepath.Join(dir, "d1.img"), filepath.Join(dir, "d2.img")
	c.ok("mkfs", "--pram", a1, "--disk", d1, "--pram-size", "16M", "--disk-size", "64M")
	mp1 := c.mountpoint()
	c.ok("mount", "--pram", a1, "--disk", d1, mp1)
	if got := daemonMountpoint(holder(a1)); got != mp1 {
		t.Errorf("the daemon's mount point from its command line: %q, want %q", got, mp1)
	}
	moved := filepath.Join(dir, "a1-moved.img")
	if err := os.Rename(a1, moved); err != nil {
		t.Fatal(err)
	}
	c.ok("mkfs", "--pram", a1, "--disk", d2, "--pram-size", "16M", "--disk-size", "64M")
	mp2 := c.mountpoint()
	c.ok("mount", "--pram", a1, "--disk", d2, mp2)
	errs := c.fails(1, d2+": in use by the file system mounted on "+mp2+" ", "mkfs", "--force", "--pram", filepath.Join(dir, "z.img"), "--disk", d2, "--pram-size", "16M")
	if strings.Contains(errs, mp1) {
		t.Errorf("the first mount named for the second's disk: %s", errs)
	}
	c.ok("umount", mp2)
	c.ok("umount", mp1)
}

// A block device that is in use (here: a mounted ext4) is never formatted,
// not even with --force, as mkfs.ext4 -F refuses a mounted device. Without
// the check, mkfs --force overwrote the mounted file system's superblock.
func TestMkfsRefusesBusyDevice(t *testing.T) {
	c := newCLI(t)
	mkext4, err := exec.LookPath("mkfs.ext4")
	if err != nil {
		t.Skip("no mkfs.ext4")
	}
	dev := loopdev.New(t, 32<<20)
	if out, err := exec.Command(mkext4, "-q", dev).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	mnt := t.TempDir()
	reaper.Mount(mnt)
	if err := unix.Mount(dev, mnt, "ext4", 0, ""); err != nil {
		t.Skipf("mounting ext4: %v", err)
	}
	t.Cleanup(func() {
		if err := unix.Unmount(mnt, 0); err != nil {
			t.Errorf("unmounting %s: %v", mnt, err)
		}
	})
	dir := t.TempDir()
	c.fails(1, dev+": in use", "mkfs", "--force", "--pram", filepath.Join(dir, "p.img"), "--disk", dev, "--pram-size", "16M")
	c.fails(1, dev+": in use", "mkfs", "--force", "--pram", dev, "--disk", filepath.Join(dir, "d.img"))
	if what, err := probe(dev); err != nil || !strings.Contains(what, "ext2/ext3/ext4") {
		t.Errorf("the mounted device now holds %q (%v)", what, err)
	}
}

// TestMountAfterLazyUnmount: after `umount -l` with a file still open on
// the mount, its daemon keeps the arena until that file closes. A mount of
// the same arena meanwhile said "already mounted? unmount it with
// `conquest umount`", though nothing was left to unmount (found by a
// review helper); it now says what holds the arena. Once the file closes,
// the daemon exits and the arena mounts again.
func TestMountAfterLazyUnmount(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M", "--disk-size", "32M")
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	f, err := os.Create(filepath.Join(mp, "held"))
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			f.Close()
		}
	}()
	if _, err := f.WriteString("still here"); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Unmount(mp, syscall.MNT_DETACH); err != nil {
		t.Fatal(err)
	}
	mp2 := c.mountpoint()
	// The mount waits for an arena held while no mount names it
	// (waitExited), which a lazily detached daemon with files open holds
	// until they close: shortened here.
	c.env = []string{"CONQUEST_EXIT_WAIT=300ms"}
	c.fails(1, "a daemon whose mount was detached (umount -l)", "mount", "--pram", pram, "--disk", disk, mp2)
	c.env = nil
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	deadline := time.Now().Add(20 * time.Second)
	for {
		_, errs, code := c.run("mount", "--pram", pram, "--disk", disk, mp2)
		if code == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the arena did not mount again after the last file closed: %s", errs)
		}
		time.Sleep(100 * time.Millisecond)
	}
	got, err := os.ReadFile(filepath.Join(mp2, "held"))
	if err != nil || string(got) != "still here" {
		t.Fatalf("after the remount: %q, %v", got, err)
	}
	c.ok("umount", mp2)
}

// dropCached drops the kernel's cached pages of the files at paths
// (POSIX_FADV_DONTNEED), so that their next reads reach the daemon. Not
// through /proc/sys/vm/drop_caches: that empties every cache on the
// machine, and a test of another package running beside this one that
// counts the requests its cached pages save failed so in CI.
func dropCached(t *testing.T, paths ...string) {
	t.Helper()
	for _, p := range paths {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		err = unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
		unix.Close(fd)
		if err != nil {
			t.Fatalf("dropping the cached pages of %s: %v", p, err)
		}
	}
}

// TestRelativeShadowDir (found by an outside review): a relative
// $CONQUEST_SHADOW_DIR named a directory under / for the daemon (which
// runs there) and another under the caller's directory for fsck, which
// then recovered a crashed file system from its image's last checkpoint,
// losing what the daemon's RAM copy held. It is made absolute against the
// directory the command runs in.
func TestRelativeShadowDir(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	rel := fmt.Sprintf("conquest-rel-shadow-%d", os.Getpid())
	t.Cleanup(func() { os.RemoveAll("/" + rel) }) // where it went before
	c.dir = dir
	c.env = []string{"CONQUEST_SHADOW_DIR=" + rel}
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	c.ok("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M", "--disk-size", "64M")
	mp := c.mountpoint()
	c.ok("mount", "--pram", pram, "--disk", disk, mp)
	defer c.ok("umount", mp)
	copies, _ := filepath.Glob(filepath.Join(dir, rel, "*.arena"))
	stray, _ := filepath.Glob(filepath.Join("/", rel, "*.arena"))
	if len(copies) != 1 || len(stray) != 0 {
		t.Errorf("RAM copies under the caller's directory: %v; under /: %v", copies, stray)
	}
}

// TestConcurrentMountsOnOneMountpoint (found by an outside review): two
// `conquest mount`s of different file systems started together on one
// mount point both passed the check for a Conquest mount there before
// either had mounted, and both mounted, one over the other. The daemon
// locks the mount point and checks again: one of them is refused, and
// says why.
func TestConcurrentMountsOnOneMountpoint(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	var pairs [2][]string
	for i := range pairs {
		p, d := filepath.Join(dir, fmt.Sprintf("p%d", i)), filepath.Join(dir, fmt.Sprintf("d%d", i))
		c.ok("mkfs", "--pram", p, "--disk", d, "--pram-size", "16M", "--disk-size", "64M")
		pairs[i] = []string{"--pram", p, "--disk", d}
	}
	mp := c.mountpoint()
	stacked := func() int {
		b, err := os.ReadFile("/proc/self/mountinfo")
		if err != nil {
			t.Fatal(err)
		}
		n := 0
		for _, l := range strings.Split(string(b), "\n") {
			if f := strings.Fields(l); len(f) > 4 && f[4] == mp {
				n++
			}
		}
		return n
	}
	for try := 0; try < 3; try++ {
		var wg sync.WaitGroup
		var codes [2]int
		var errs [2]string
		for i := range pairs {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, errs[i], codes[i] = c.run(append(append([]string{"mount"}, pairs[i]...), mp)...)
			}()
		}
		wg.Wait()
		n := stacked()
		for stacked() > 0 {
			if _, _, code := c.run("umount", mp); code != 0 {
				fusefs.Unmount(mp, true)
			}
		}
		ok := 0
		for i := range codes {
			if codes[i] == 0 {
				ok++
			} else if !strings.Contains(errs[i], "is already mounted here") {
				t.Errorf("try %d: the refused mount said %q", try, errs[i])
			}
		}
		if n != 1 || ok != 1 {
			t.Fatalf("try %d: %d mounts on the mount point, %d mount commands succeeded (exit codes %v); want 1 and 1", try, n, ok, codes)
		}
	}
}

// TestMountpointSymlink (found by an outside review): a mount point given
// as a symbolic link to a directory failed ("fusermount: exit status 1",
// and the log blamed a disconnected transport). It is followed, as
// mount(8) follows it, by mount, df and umount alike.
func TestMountpointSymlink(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	link := filepath.Join(filepath.Dir(mp), "link")
	if err := os.Symlink("mnt", link); err != nil {
		t.Fatal(err)
	}
	c.ok("mount", link)
	if mi, ok := fusefs.Mounted(mp); !ok || mi.FSType != "fuse.conquest" {
		t.Fatalf("nothing mounted on %s: %+v", mp, mi)
	}
	if err := os.WriteFile(filepath.Join(link, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, _ := c.ok("df", link); !strings.Contains(out, "arena") {
		t.Errorf("df %s: %q", link, out)
	}
	c.ok("umount", link)
	if _, ok := fusefs.Mounted(mp); ok {
		t.Errorf("%s still mounted", mp)
	}
	// A dead mount behind the link (its daemon killed) is cleared through
	// it, without a stat of the mount point, which a stopped daemon's
	// would never answer (TestUmountStoppedDaemon).
	c.ok("mount", link)
	pid := holder(filepath.Join(c.home, "pram.img"))
	if pid == 0 {
		t.Fatal("no daemon holds the arena")
	}
	syscall.Kill(pid, syscall.SIGKILL)
	for deadline := time.Now().Add(10 * time.Second); holder(filepath.Join(c.home, "pram.img")) != 0; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the killed daemon still holds the arena")
		}
	}
	if _, errs := c.ok("umount", link); !strings.Contains(errs, "its daemon had died") {
		t.Errorf("umount of a dead mount through a link: %q", errs)
	}
	if _, ok := fusefs.Mounted(mp); ok {
		t.Errorf("%s still mounted", mp)
	}
}

// TestFileSizeLimitNamed (found by an outside review): under a file size
// limit (`ulimit -f`), mkfs blamed the file system ("a file larger than
// its file system allows", beside 75 GiB free), and mount printed the
// image's path twice and nothing of the limit. Both name the limit now.
func TestFileSizeLimitNamed(t *testing.T) {
	c := newCLI(t)
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "p.img"), filepath.Join(dir, "d.img")
	limited := func(args ...string) (string, int) {
		cmd := exec.Command("bash", append([]string{"-c", `ulimit -f 81920 && exec "$0" "$@"`, c.bin}, args...)...) // KiB
		cmd.Env = append(os.Environ(), "CONQUEST_HOME="+c.home)
		out, err := cmd.CombinedOutput()
		code := 0
		if ee, ok := err.(*exec.ExitError); ok {
			code = ee.ExitCode()
		} else if err != nil {
			t.Fatal(err)
		}
		return string(out), code
	}
	out, code := limited("mkfs", "--pram", pram, "--disk", disk, "--pram-size", "16M", "--disk-size", "256M")
	if code == 0 || !strings.Contains(out, "cannot make a disk of 256M there: a file larger than this process may write (ulimit -f: 80.0M)") {
		t.Errorf("mkfs under ulimit -f: exit %d: %s", code, out)
	}
	// An arena that fits under the limit, its checkpoint slots not.
	c.ok("mkfs", "--force", "--pram", pram, "--disk", disk, "--pram-size", "64M", "--disk-size", "64M")
	mp := c.mountpoint()
	out, code = limited("mount", "--pram", pram, "--disk", disk, mp)
	if code == 0 || !strings.Contains(out, "this process may write files of at most 80.0M (ulimit -f)") || strings.Contains(out, pram+": "+pram) {
		t.Errorf("mount under ulimit -f: exit %d: %s", code, out)
	}
}

// TestLogFIFORefused (found by an outside review): a FIFO in place of the
// daemon's log made `conquest mount` wait for ever in its open.
func TestLogFIFORefused(t *testing.T) {
	c := newCLI(t)
	if err := unix.Mkfifo(filepath.Join(c.home, "conquest.log"), 0o600); err != nil {
		t.Fatal(err)
	}
	mp := c.mountpoint()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, c.bin, "mount", mp)
	cmd.Env = append(os.Environ(), "CONQUEST_HOME="+c.home)
	out, err := cmd.CombinedOutput()
	if ctx.Err() != nil {
		t.Fatal("mount waited on the FIFO")
	}
	if err == nil || !strings.Contains(string(out), "the daemon's log is a FIFO, not a file: move it away") {
		t.Errorf("mount with a FIFO for its log: %v: %s", err, out)
	}
}
