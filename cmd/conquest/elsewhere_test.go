package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"
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
	if err := ns.Start(); err != nil {
		t.Skipf("unshare: %v", err)
	}
	done := false
	stop := func() {
		if !done {
			done = true
			ns.Process.Kill()
			ns.Wait()
		}
	}
	t.Cleanup(stop)
	mi := "/proc/" + strconv.Itoa(ns.Process.Pid) + "/mountinfo"
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
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
