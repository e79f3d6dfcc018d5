package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"conquest/fusefs"
	"conquest/internal/reaper"
)

// TestUmountMountedElsewhere: a mount namespace made while the file system
// was mounted (unshare(1), a container) holds a copy of the mount, which
// keeps the FUSE connection and the daemon alive after the mount is gone
// here. `conquest umount` said nothing for its whole minute and then only
// that the daemon still held the arena (an outside review, whose mount was
// copied so by another session's chroot); it now says at once which
// process's namespace holds it and how to unmount it there, and the daemon
// closes the arena cleanly once that namespace lets go.
func TestUmountMountedElsewhere(t *testing.T) {
	unshare, err := exec.LookPath("unshare")
	if err != nil {
		t.Skip("no unshare(1)")
	}
	c := newCLI(t)
	mp := c.mountpoint()
	pram := filepath.Join(c.home, "pram.img")
	c.ok("mount", mp)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	// A private namespace with a copy of every mount, this one included.
	ns := exec.Command(unshare, "--mount", "--propagation", "private", "sleep", "600")
	var nsErr strings.Builder
	ns.Stderr = &nsErr
	if err := ns.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	exited := make(chan struct{})
	go func() { ns.Wait(); close(exited) }()
	stop := func() {
		ns.Process.Kill()
		<-exited
	}
	t.Cleanup(stop)
	mi := "/proc/" + strconv.Itoa(ns.Process.Pid) + "/mountinfo"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		select {
		case <-exited:
			// In a chroot whose root is no mount point, unshare cannot
			// make the new namespace's mounts private: no such
			// namespace can be made here.
			c.ok("umount", mp)
			t.Skipf("unshare could not make the namespace: %s", nsErr.String())
		default:
		}
		// unshare has made the namespace once it execs sleep.
		if comm, _ := os.ReadFile("/proc/" + strconv.Itoa(ns.Process.Pid) + "/comm"); strings.TrimSpace(string(comm)) == "sleep" {
			if b, _ := os.ReadFile(mi); strings.Contains(string(b), " "+mp+" ") {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatal("the new namespace shows no copy of the mount")
		}
	}

	start := time.Now()
	errs := c.fails(1, "another mount namespace still mounts it", "umount", mp)
	if took := time.Since(start); took > 20*time.Second {
		t.Errorf("umount took %v to say so", took)
	}
	for _, want := range []string{"process " + strconv.Itoa(ns.Process.Pid) + " (sleep)", "nsenter -t " + strconv.Itoa(ns.Process.Pid) + " -m umount " + mp} {
		if !strings.Contains(errs, want) {
			t.Errorf("umount's message %q does not name %q", errs, want)
		}
	}
	if !inUse(pram) {
		t.Fatal("the daemon let go of the arena while the other namespace still mounts it")
	}
	// A mount or fsck of the arena says where it is mounted, at once.
	for _, args := range [][]string{{"mount", mp}, {"fsck"}} {
		start := time.Now()
		_, errs, code := c.run(args...)
		if code == 0 || !strings.Contains(errs, "mounted in another mount namespace, where process "+strconv.Itoa(ns.Process.Pid)) {
			t.Errorf("conquest %v: exit %d, %q", args, code, errs)
		}
		if took := time.Since(start); took > 10*time.Second {
			t.Errorf("conquest %v took %v to say so", args, took)
		}
	}
	// The copy still serves the file.
	if b, err := exec.Command("nsenter", "-t", strconv.Itoa(ns.Process.Pid), "-m", "cat", filepath.Join(mp, "f")).Output(); err == nil && string(b) != "kept" {
		t.Errorf("through the other namespace: %q", b)
	}

	// The namespace goes: the kernel ends the connection, and the daemon
	// closes the arena cleanly.
	stop()
	for deadline := time.Now().Add(20 * time.Second); inUse(pram); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon still holds the arena after the other namespace ended")
		}
	}
	if err := closedCleanly(pram); err != nil {
		t.Error(err)
	}
	if out, _ := c.ok("fsck"); !strings.Contains(out, "clean") {
		t.Errorf("fsck: %q", out)
	}
}

// waitClosed waits for the daemon to let go of the arena at path and
// checks that it closed it cleanly.
func waitClosed(t *testing.T, path string) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); inUse(path); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the daemon still holds the arena")
		}
	}
	if err := closedCleanly(path); err != nil {
		t.Error(err)
	}
}

// TestUmountHeldByBindMount (found by an outside review): a bind mount of a
// directory on the file system keeps it alive after `conquest umount` of
// its mount point, as on ext4. umount waited its whole timeout, then said
// only that the daemon still held the arena; it now names the bind mount
// at once, and the daemon closes the arena cleanly once that is unmounted.
func TestUmountHeldByBindMount(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	pram := filepath.Join(c.home, "pram.img")
	c.ok("mount", mp)
	must(t, os.Mkdir(filepath.Join(mp, "sub"), 0o755))
	must(t, os.WriteFile(filepath.Join(mp, "sub", "f"), []byte("kept"), 0o644))
	bind := t.TempDir()
	reaper.Mount(bind)
	if out, err := exec.Command("mount", "--bind", filepath.Join(mp, "sub"), bind).CombinedOutput(); err != nil {
		t.Skipf("mount --bind: %v: %s", err, out)
	}
	bound := true
	t.Cleanup(func() {
		if bound {
			exec.Command("umount", bind).Run()
		}
	})

	errs := c.fails(1, "still mounted on "+bind, "umount", "--timeout", "30s", mp)
	if !strings.Contains(errs, "umount "+bind) || strings.Contains(errs, "after 30s") {
		t.Errorf("umount's message %q does not say how to finish, or waited its timeout", errs)
	}
	if b, err := os.ReadFile(filepath.Join(bind, "f")); err != nil || string(b) != "kept" {
		t.Errorf("through the bind mount: %q, %v", b, err)
	}
	must(t, os.WriteFile(filepath.Join(bind, "g"), []byte("written through the bind"), 0o644))
	if out, err := exec.Command("umount", bind).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v: %s", bind, err, out)
	}
	bound = false
	waitClosed(t, pram)
	c.ok("fsck")
	c.ok("mount", mp)
	if b, err := os.ReadFile(filepath.Join(mp, "sub", "g")); err != nil || string(b) != "written through the bind" {
		t.Errorf("after a remount: %q, %v", b, err)
	}
	c.ok("umount", mp)
}

// TestHeldHereMatchesSource: a mount is taken for another mount of the
// file system just unmounted only if its source is the same too. The
// device number of a FUSE mount that is gone goes to the next one made,
// and an outside review saw umount name a test's unrelated mount as a
// bind mount keeping its daemon alive.
func TestHeldHereMatchesSource(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	c.ok("mount", mp)
	mi, ok := fusefs.Mounted(mp)
	if !ok {
		t.Fatalf("%s not mounted", mp)
	}
	if why := heldHere(mi.Device, mi.Source, "/nonexistent"); !strings.Contains(why, "still mounted on "+mp) {
		t.Errorf("the mount itself, of the same source: %q", why)
	}
	if why := heldHere(mi.Device, fsnamePrefix+"/another/arena.img", "/nonexistent"); why != "" {
		t.Errorf("a mount of another source with the same device number taken for a bind mount: %q", why)
	}
	c.ok("umount", mp)
}

// TestUmountHeldByOverlay: an overlay file system whose layers are
// directories on the mount holds it through private mounts that no
// mountinfo shows; umount names the overlay at once instead of waiting
// its timeout.
func TestUmountHeldByOverlay(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	pram := filepath.Join(c.home, "pram.img")
	c.ok("mount", mp)
	for _, d := range []string{"lower", "upper", "work"} {
		must(t, os.Mkdir(filepath.Join(mp, d), 0o755))
	}
	must(t, os.WriteFile(filepath.Join(mp, "lower", "f"), []byte("lower"), 0o644))
	ov := t.TempDir()
	opts := "lowerdir=" + filepath.Join(mp, "lower") + ",upperdir=" + filepath.Join(mp, "upper") + ",workdir=" + filepath.Join(mp, "work")
	reaper.Mount(ov)
	if out, err := exec.Command("mount", "-t", "overlay", "overlay", "-o", opts, ov).CombinedOutput(); err != nil {
		t.Skipf("mount -t overlay: %v: %s", err, out)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			exec.Command("umount", ov).Run()
		}
	})
	must(t, os.WriteFile(filepath.Join(ov, "f"), []byte("copied up"), 0o644))

	errs := c.fails(1, "the overlay file system on "+ov, "umount", "--timeout", "30s", mp)
	if !strings.Contains(errs, "umount "+ov) || strings.Contains(errs, "after 30s") {
		t.Errorf("umount's message %q does not say how to finish, or waited its timeout", errs)
	}
	if out, err := exec.Command("umount", ov).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v: %s", ov, err, out)
	}
	mounted = false
	waitClosed(t, pram)
	c.ok("fsck")
	c.ok("mount", mp)
	if b, err := os.ReadFile(filepath.Join(mp, "upper", "f")); err != nil || string(b) != "copied up" {
		t.Errorf("the overlay's upper layer after a remount: %q, %v", b, err)
	}
	c.ok("umount", mp)
}

// TestClosedCleanlyUnreadable (found by an outside review): an arena that
// cannot be read after the unmount (its image on another FUSE file system
// whose daemon died) was reported as closed cleanly, and umount exited 0.
func TestClosedCleanlyUnreadable(t *testing.T) {
	err := closedCleanly(filepath.Join(t.TempDir(), "gone.img"))
	if err == nil || !strings.Contains(err.Error(), "cannot tell whether the daemon closed the arena") {
		t.Errorf("closedCleanly of an image that cannot be read: %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestUmountHeldByRelativeOverlay (found by a second review): an overlay
// whose layers were given by relative paths shows them so in mountinfo,
// and umount missed it and waited its timeout; it is now named as one
// that may hold the file system, with a command that can be pasted (its
// mount point has a space).
func TestUmountHeldByRelativeOverlay(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	pram := filepath.Join(c.home, "pram.img")
	c.ok("mount", mp)
	for _, d := range []string{"lower", "upper", "work"} {
		must(t, os.Mkdir(filepath.Join(mp, d), 0o755))
	}
	ov := filepath.Join(t.TempDir(), "over lay")
	must(t, os.Mkdir(ov, 0o755))
	rel := filepath.Base(mp)
	reaper.Mount(ov)
	cmd := exec.Command("mount", "-t", "overlay", "overlay", "-o",
		"lowerdir="+rel+"/lower,upperdir="+rel+"/upper,workdir="+rel+"/work", ov)
	cmd.Dir = filepath.Dir(mp)
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Skipf("mount -t overlay with relative layers: %v: %s", err, out)
	}
	mounted := true
	t.Cleanup(func() {
		if mounted {
			exec.Command("umount", ov).Run()
		}
	})
	errs := c.fails(1, "names its layers by relative paths", "umount", "--timeout", "30s", mp)
	if !strings.Contains(errs, "umount '"+ov+"'") {
		t.Errorf("umount's message %q does not give a command that can be pasted", errs)
	}
	if out, err := exec.Command("umount", ov).CombinedOutput(); err != nil {
		t.Fatalf("umount %s: %v: %s", ov, err, out)
	}
	mounted = false
	waitClosed(t, pram)
	c.ok("fsck")
}

func TestLayersUnder(t *testing.T) {
	for _, c := range []struct {
		opts            string
		under, relative bool
	}{
		{"rw,lowerdir=/mnt/c/lower,upperdir=/mnt/c/upper,workdir=/mnt/c/work", true, false},
		{"rw,lowerdir=/srv/a:/mnt/c,upperdir=/srv/u,workdir=/srv/w", true, false},
		{"rw,lowerdir=/mnt/c2/lower,upperdir=/mnt/cc,workdir=/srv/w", false, false}, // prefixes only
		{"rw,lowerdir+=/srv/a,lowerdir+=/mnt/c/l,upperdir=/srv/u", true, false},     // Linux 6.8+
		{"rw,datadir+=/mnt/c/d,lowerdir=/srv/a", true, false},
		{"rw,lowerdir=c/lower,upperdir=/srv/u,workdir=/srv/w", false, true},
		{"rw,lowerdir=/mnt/c\\040x/l,upperdir=/srv/u", false, false},
	} {
		under, rel := layersUnder(c.opts, "/mnt/c")
		if under != c.under || rel != c.relative {
			t.Errorf("layersUnder(%q) = %v, %v; want %v, %v", c.opts, under, rel, c.under, c.relative)
		}
	}
	if u, _ := layersUnder("rw,lowerdir=/mnt/c\\040x/l", "/mnt/c x"); !u {
		t.Error("an escaped space in a layer path is not unescaped")
	}
	for in, want := range map[string]string{"/mnt/a": "/mnt/a", "/mnt/a b": "'/mnt/a b'", "/mnt/it's": `'/mnt/it'\''s'`, "": "''"} {
		if got := shellQuote(in); got != want {
			t.Errorf("shellQuote(%q) = %s, want %s", in, got, want)
		}
	}
}
