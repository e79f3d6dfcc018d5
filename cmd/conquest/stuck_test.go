package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
)

// stuckDaemon makes the state a daemon killed with a thread stuck in the
// kernel leaves when its watchdog was killed with it: no daemon serving,
// the FUSE connection held open and the arena's lock held, under the dead
// daemon's pid in /proc/locks. This test process holds the copies of the
// device and the arena (pidfd_getfd) that stand in for the stuck thread,
// and, like that thread, lets them go once the connection is aborted (a
// statfs of the mount returns then). It returns a channel closed at that.
func stuckDaemon(t *testing.T) (c *runner, mp string, pid int, released chan struct{}) {
	t.Helper()
	c, mp, pid, dogs := mountWithF(t)
	pram := filepath.Join(c.home, "pram.img")
	held := []int{deviceCopy(t, pid), fdCopy(t, pid, fdTo(t, pid, pram))}
	released = make(chan struct{})
	release := func() {
		for _, fd := range held {
			unix.Close(fd)
		}
		close(released)
	}
	for _, dog := range dogs {
		syscall.Kill(dog, syscall.SIGKILL)
	}
	syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for (processAlive(pid) || len(watchdogsOf(pid)) > 0) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	go func() {
		var sfs syscall.Statfs_t
		syscall.Statfs(mp, &sfs) // waits until the connection is aborted
		release()
	}()
	// Not aborted by the code under test within stuckLimit (before the
	// fix, a mount there waited for good in its stat of the mount point):
	// end it here, through the connection's own fusectl file (opened now:
	// this test holds the device, so the connection and its number stay),
	// so that the test fails instead of hanging, and nothing is left.
	mi, ok := fusefs.Mounted(mp)
	if !ok {
		t.Fatalf("%s is not mounted", mp)
	}
	abort, waiting, err := fusefs.MountControlFiles(mi)
	if err != nil {
		t.Fatal(err)
	}
	waiting.Close()
	var byTest atomic.Bool
	abortHere := func() {
		byTest.Store(true)
		abort.Write([]byte("1\n"))
		select {
		case <-released:
		case <-time.After(10 * time.Second):
			t.Error("the connection was not released 10 s after the test aborted it")
		}
	}
	go func() {
		select {
		case <-released:
		case <-time.After(stuckLimit):
			abortHere()
		}
	}()
	t.Cleanup(func() {
		select {
		case <-released:
		default:
			abortHere()
		}
		abort.Close()
		if byTest.Load() {
			t.Errorf("the stuck connection was not aborted within %v: the test did it", stuckLimit)
		}
	})
	return c, mp, pid, released
}

// stuckLimit is how long stuckDaemon waits for the code under test to
// abort the connection (it takes 2–3 s).
const stuckLimit = 30 * time.Second

// TestMountAbortsStuckDaemon: `conquest mount` on the mount point of a
// daemon stuck so, with no watchdog, aborts its connection, says so, clears
// the dead mount and mounts the recovered arena. Before, it refused: the
// arena's lock was held, so the mount counted as alive.
func TestMountAbortsStuckDaemon(t *testing.T) {
	c, mp, pid, released := stuckDaemon(t)
	start := time.Now()
	_, errs := c.ok("mount", mp)
	if !strings.Contains(errs, fmt.Sprintf("its daemon (pid %d) died with its FUSE connection open and no watchdog left to end it: aborted the connection", pid)) {
		t.Errorf("mount's messages do not tell of the abort:\n%s", errs)
	}
	if took := time.Since(start); took < 2*time.Second {
		t.Errorf("aborted after %v, before the 2 s that a daemon exiting the plain way may take", took)
	}
	select {
	case <-released:
	default:
		t.Error("mounted while the stuck connection was still held")
	}
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "x" {
		t.Errorf("after recovery: %q %v", b, err)
	}
	c.ok("umount", mp)
}

// TestUmountAbortsStuckDaemon: `conquest umount` of such a mount aborts the
// connection and takes the mount down; the next mount recovers the arena.
func TestUmountAbortsStuckDaemon(t *testing.T) {
	c, mp, pid, released := stuckDaemon(t)
	_, errs := c.ok("umount", mp)
	if !strings.Contains(errs, fmt.Sprintf("its daemon (pid %d) died with its FUSE connection open and no watchdog left to end it: aborted the connection", pid)) ||
		!strings.Contains(errs, "its daemon had died") {
		t.Errorf("umount's messages do not tell of the abort and the unmount:\n%s", errs)
	}
	<-released
	if _, ok := fusefs.Mounted(mp); ok {
		t.Fatalf("%s still mounted after umount", mp)
	}
	remountHasF(t, c, mp)
}

// TestStuckLiveDaemonLeftAlone: a mount whose daemon is alive is never
// aborted, however its lock looks: mount refuses at once (the mount point
// is taken), umount unmounts as usual.
func TestStuckLiveDaemonLeftAlone(t *testing.T) {
	c, mp, _, _ := mountWithF(t)
	start := time.Now()
	errs := c.fails(1, "already mounted here", "mount", mp)
	if strings.Contains(errs, "aborted") {
		t.Errorf("mount over a live mount aborted it:\n%s", errs)
	}
	if took := time.Since(start); took >= watchdogInterval*watchdogGrace {
		t.Errorf("mount over a live mount took %v to refuse: as long as the grace for a dying daemon", took)
	}
	var sfs syscall.Statfs_t
	if err := syscall.Statfs(mp, &sfs); err != nil {
		t.Errorf("the live mount after a refused mount: %v", err)
	}
	_, errs = c.ok("umount", mp)
	if strings.Contains(errs, "aborted") || strings.Contains(errs, "had died") {
		t.Errorf("umount of a live mount: %s", errs)
	}
}
