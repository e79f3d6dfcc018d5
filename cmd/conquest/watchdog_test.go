package main

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// A daemon killed while its FUSE device stays open (one of its threads
// stuck in the kernel, waiting for a page lock that a request only it
// could answer holds: seen once in 52 kill -9 rounds by an outside review,
// session 49) leaves a connection no one serves and that the kernel never
// aborts: every request on the mount waits for good, and the dead daemon
// keeps the arena locked, so no remount either. The watchdog that mount
// starts beside the daemon aborts such a connection. Here a copy of the
// daemon's device descriptor, taken with pidfd_getfd, stands in for the
// stuck thread: it keeps the device open after the daemon is gone.
func TestWatchdogAbortsStrandedConnection(t *testing.T) {
	c, mp, pid, _ := mountWithF(t)
	dev := deviceCopy(t, pid)
	closeDev := func() {
		if dev >= 0 {
			unix.Close(dev)
			dev = -1
		}
	}
	// Before the mount point's own cleanup (cleanups run last first).
	t.Cleanup(closeDev)

	syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if processAlive(pid) {
		t.Fatalf("daemon %d still alive 10 s after SIGKILL", pid)
	}
	// A request to the mount: ENOTCONN once the connection is aborted;
	// without the watchdog it waits until closeDev.
	wantAborted(t, mp, closeDev)
	for len(watchdogsOf(pid)) > 0 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if dogs := watchdogsOf(pid); len(dogs) > 0 {
		t.Errorf("the watchdog outlived its abort: %v", dogs)
	}
	// Aborted at the pipe's EOF, at once and quietly: not by the looks at
	// /proc after their grace, which log.
	if b, _ := os.ReadFile(filepath.Join(c.home, "conquest.log")); strings.Contains(string(b), "watchdog") {
		t.Errorf("the daemon's log:\n%s", b)
	}
	closeDev()
	_, errs := c.ok("umount", mp)
	if !strings.Contains(errs, "daemon had died") {
		t.Errorf("umount of the dead mount: %q", errs)
	}
	remountHasF(t, c, mp)
}

// TestWatchdogEndsWithDaemon: the watchdog leaves with its daemon at a
// clean unmount, without touching the connection of a later mount.
func TestWatchdogEndsWithDaemon(t *testing.T) {
	c := newCLI(t)
	mp := c.mountpoint()
	c.ok("mount", mp)
	pram := filepath.Join(c.home, "pram.img")
	pid := holder(pram)
	dogs := watchdogsOf(pid)
	if len(dogs) != 1 {
		t.Fatalf("watchdogs of daemon %d: %v, want one", pid, dogs)
	}
	// It holds neither the device (the connection would outlive the
	// daemon), nor the images, nor any pipe but its own (descriptor 5).
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", dogs[0]))
	for _, p := range fds {
		target, err := os.Readlink(p)
		if err != nil {
			continue
		}
		if target == "/dev/fuse" || strings.HasPrefix(target, c.home) && !strings.HasSuffix(target, "conquest.log") ||
			strings.HasPrefix(target, "pipe:") && filepath.Base(p) != "5" {
			t.Errorf("the watchdog holds %s (descriptor %s)", target, filepath.Base(p))
		}
	}
	c.ok("umount", mp)
	deadline := time.Now().Add(10 * time.Second)
	for len(watchdogsOf(pid)) > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if dogs := watchdogsOf(pid); len(dogs) > 0 {
		t.Fatalf("the watchdog outlived its daemon's clean exit: %v", dogs)
	}
	// fusectl's files cannot seek: a pread of "waiting" failed, and every
	// clean exit was logged as a death.
	if b, err := os.ReadFile(filepath.Join(c.home, "conquest.log")); err != nil || strings.Contains(string(b), "watchdog") {
		t.Errorf("the daemon's log after a clean unmount (%v):\n%s", err, b)
	}
	c.ok("mount", mp)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("x"), 0o644); err != nil {
		t.Fatalf("the new mount: %v", err)
	}
	c.ok("umount", mp)
}

// mountWithF mounts the embedded default of a new data directory, writes
// the file f, and returns the daemon's pid and its one watchdog's.
func mountWithF(t *testing.T) (c *runner, mp string, pid int, dogs []int) {
	t.Helper()
	c = newCLI(t)
	mp = c.mountpoint()
	c.ok("mount", mp)
	if err := os.WriteFile(filepath.Join(mp, "f"), []byte("x"), 0o644); err != nil {
		t.Fatal(err)
	}
	pram := filepath.Join(c.home, "pram.img")
	if pid = holder(pram); pid == 0 {
		t.Fatalf("no process has %s open", pram)
	}
	if dogs = watchdogsOf(pid); len(dogs) != 1 {
		t.Fatalf("watchdogs of daemon %d: %v, want one", pid, dogs)
	}
	return c, mp, pid, dogs
}

// remountHasF mounts the embedded default on mp again and wants the file
// f written before the crash, then unmounts.
func remountHasF(t *testing.T, c *runner, mp string) {
	t.Helper()
	c.ok("mount", mp)
	if b, err := os.ReadFile(filepath.Join(mp, "f")); err != nil || string(b) != "x" {
		t.Errorf("after recovery: %q %v", b, err)
	}
	c.ok("umount", mp)
}

// wantAborted wants a request to the mount on mp to fail as on an aborted
// connection within 10 s; if it waits longer, it calls release (which
// lets the kernel abort the connection, so the request returns) and fails
// the test.
func wantAborted(t *testing.T, mp string, release func()) {
	t.Helper()
	res := make(chan error, 1)
	go func() {
		var sfs syscall.Statfs_t
		res <- syscall.Statfs(mp, &sfs)
	}()
	select {
	case err := <-res:
		// ECONNABORTED if the abort found it waiting.
		if !errors.Is(err, syscall.ENOTCONN) && !errors.Is(err, syscall.ECONNABORTED) {
			t.Fatalf("statfs of the dead mount: %v, want ENOTCONN or ECONNABORTED", err)
		}
	case <-time.After(10 * time.Second):
		release()
		<-res
		t.Fatal("statfs of the mount of a killed daemon whose device is still open waited 10 s: the connection was not aborted")
	}
}

// watchdogsOf lists the pids of the watchdogs of daemon pid.
func watchdogsOf(pid int) []int {
	var dogs []int
	dirs, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, p := range dirs {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		args := strings.Split(strings.TrimRight(string(b), "\x00"), "\x00")
		if len(args) < 4 || args[1] != "watchdog" {
			continue
		}
		for i, a := range args {
			if a == "--pid" && i+1 < len(args) && args[i+1] == strconv.Itoa(pid) {
				n, _ := strconv.Atoi(strings.Split(p, "/")[2])
				dogs = append(dogs, n)
			}
		}
	}
	return dogs
}

// processAlive reports whether pid exists and any of its threads has not
// exited. The main thread of a killed process is a zombie while others may
// still be on their way out: one that was entering read(2) on the FUSE
// device could still take a request sent after that and end it with EIO
// (its copy to user memory fails with the kill pending). That is the likely
// cause, not a proven one, of a statfs of the dead mount that answered EIO
// in one CI run (TestWatchdogAbortsStuckDaemon, session 57).
func processAlive(pid int) bool {
	tasks, _ := filepath.Glob(fmt.Sprintf("/proc/%d/task/*/stat", pid))
	for _, p := range tasks {
		b, err := os.ReadFile(p)
		if err != nil {
			continue
		}
		s := string(b)
		if i := strings.LastIndexByte(s, ')'); i >= 0 && i+2 < len(s) && s[i+2] != 'Z' && s[i+2] != 'X' {
			return true
		}
	}
	return false
}

// deviceCopy returns a descriptor of this process for the FUSE device
// file that daemon pid serves (pidfd_getfd: the same open file, not a new
// open of /dev/fuse).
func deviceCopy(t *testing.T, pid int) int {
	t.Helper()
	return fdCopy(t, pid, fdTo(t, pid, "/dev/fuse"))
}

// fdTo is the number of a descriptor of process pid whose link in
// /proc/PID/fd reads target (a path, or "pipe:[N]").
func fdTo(t *testing.T, pid int, target string) int {
	t.Helper()
	fds, _ := filepath.Glob(fmt.Sprintf("/proc/%d/fd/*", pid))
	for _, p := range fds {
		if l, err := os.Readlink(p); err == nil && l == target {
			fd, _ := strconv.Atoi(filepath.Base(p))
			return fd
		}
	}
	t.Fatalf("process %d has no descriptor for %s", pid, target)
	return -1
}

// fdCopy returns a descriptor of this process for the open file that
// process pid has as descriptor fd (pidfd_getfd).
func fdCopy(t *testing.T, pid, fd int) int {
	t.Helper()
	pidfd, err := unix.PidfdOpen(pid, 0)
	if err != nil {
		t.Skipf("pidfd_open: %v", err)
	}
	defer unix.Close(pidfd)
	dup, err := unix.PidfdGetfd(pidfd, fd, 0)
	if err != nil {
		t.Skipf("pidfd_getfd: %v", err)
	}
	return dup
}

// TestWatchdogAbortsStuckDaemon is the stranded connection again, with
// the daemon's end of the watchdog's pipe kept open too, as a daemon stuck
// in the kernel keeps it: only the looks at /proc can tell the watchdog
// that the daemon is gone. It aborts after its grace and logs one line.
func TestWatchdogAbortsStuckDaemon(t *testing.T) {
	c, mp, pid, dogs := mountWithF(t)
	pipe, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%d", dogs[0], watchdogLifeFD))
	if err != nil || !strings.HasPrefix(pipe, "pipe:") {
		t.Fatalf("the watchdog's descriptor %d: %q %v", watchdogLifeFD, pipe, err)
	}
	held := []int{deviceCopy(t, pid), fdCopy(t, pid, fdTo(t, pid, pipe))}
	release := func() {
		for _, fd := range held {
			unix.Close(fd)
		}
		held = nil
	}
	t.Cleanup(release)

	syscall.Kill(pid, syscall.SIGKILL)
	deadline := time.Now().Add(10 * time.Second)
	for processAlive(pid) && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	start := time.Now()
	wantAborted(t, mp, release)
	if took := time.Since(start); took < time.Second {
		t.Errorf("aborted %v after the daemon died, before the watchdog's grace", took)
	}
	for len(watchdogsOf(pid)) > 0 && time.Now().Before(deadline.Add(10*time.Second)) {
		time.Sleep(10 * time.Millisecond)
	}
	if dogs := watchdogsOf(pid); len(dogs) > 0 {
		t.Errorf("the watchdog outlived its abort: %v", dogs)
	}
	b, _ := os.ReadFile(filepath.Join(c.home, "conquest.log"))
	if n := strings.Count(string(b), "died with its FUSE connection open"); n != 1 {
		t.Errorf("%d watchdog lines in the daemon's log, want 1:\n%s", n, b)
	}
	release()
	c.ok("umount", mp)
	remountHasF(t, c, mp)
}

// TestWatch covers watch's two signals and its look at the connection,
// with plain files standing in for fusectl's: a daemon whose main thread
// is a zombie while its descriptors stay open (the stuck case: here an
// exited child this test has not reaped, and the pipe's writer held by the
// test), a daemon whose pipe reads EOF, and a connection that ended first.
func TestWatch(t *testing.T) {
	type run struct {
		abort, waiting, life *os.File
		lifeW                *os.File
		done                 chan struct{}
		log                  strings.Builder
	}
	start := func(t *testing.T, pid int, started, waiting string) *run {
		t.Helper()
		dir := t.TempDir()
		r := &run{done: make(chan struct{})}
		var err error
		if r.abort, err = os.Create(filepath.Join(dir, "abort")); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(dir, "waiting"), []byte(waiting), 0o644); err != nil {
			t.Fatal(err)
		}
		if r.waiting, err = os.Open(filepath.Join(dir, "waiting")); err != nil {
			t.Fatal(err)
		}
		if r.life, r.lifeW, err = os.Pipe(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.abort.Close(); r.waiting.Close(); r.life.Close(); r.lifeW.Close() })
		go func() {
			watch(pid, started, "/mnt/x", r.abort, r.waiting, r.life, &r.log, 5*time.Millisecond)
			close(r.done)
		}()
		return r
	}
	aborted := func(t *testing.T, r *run) string {
		t.Helper()
		select {
		case <-r.done:
		case <-time.After(10 * time.Second):
			t.Fatal("watch did not return")
		}
		b, err := os.ReadFile(r.abort.Name())
		if err != nil {
			t.Fatal(err)
		}
		return string(b)
	}
	child := func(t *testing.T) *exec.Cmd {
		t.Helper()
		cmd := exec.Command("sleep", "30")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		return cmd
	}

	t.Run("zombie", func(t *testing.T) {
		// A child that ends by itself (no SIGKILL pending, which would
		// be seen first) and is not reaped: a zombie; the pipe's writer
		// stays open.
		cmd := exec.Command("sleep", "0.5")
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { cmd.Process.Kill(); cmd.Wait() })
		pid := cmd.Process.Pid
		started := processStarted(pid)
		if started == "" {
			t.Fatal("no start time for a live child")
		}
		r := start(t, pid, started, "3\n")
		time.Sleep(50 * time.Millisecond)
		select {
		case <-r.done:
			t.Fatal("watch returned while its daemon was alive")
		default:
		}
		if b, _ := os.ReadFile(r.abort.Name()); len(b) > 0 {
			t.Fatalf("abort written while the daemon was alive: %q", b)
		}
		if got := aborted(t, r); got != "1\n" {
			t.Fatalf("abort file: %q, want 1", got)
		}
		if !strings.Contains(r.log.String(), "3 requests waiting") {
			t.Errorf("log: %q", r.log.String())
		}
	})
	t.Run("exited", func(t *testing.T) {
		cmd := child(t)
		// The kernel aborted the connection at the device's close; its
		// callers not yet woken still count as waiting.
		r := start(t, cmd.Process.Pid, processStarted(cmd.Process.Pid), "9\n")
		r.lifeW.Close() // as at the daemon's exit
		if got := aborted(t, r); got != "1\n" {
			t.Fatalf("abort file: %q, want 1", got)
		}
		if r.log.Len() > 0 {
			t.Errorf("log after an exit: %q", r.log.String())
		}
	})
	t.Run("reused", func(t *testing.T) {
		cmd := child(t)
		r := start(t, cmd.Process.Pid, "1", "2\n") // another start time: another process
		if got := aborted(t, r); got != "1\n" {
			t.Fatalf("abort file: %q, want 1", got)
		}
	})
	t.Run("ended", func(t *testing.T) {
		cmd := child(t)
		r := start(t, cmd.Process.Pid, processStarted(cmd.Process.Pid), "")
		r.lifeW.Close()
		if got := aborted(t, r); got != "" {
			t.Fatalf("abort written for an ended connection: %q", got)
		}
		if r.log.Len() > 0 {
			t.Errorf("log: %q", r.log.String())
		}
	})
}

// TestDaemonDying reads fake /proc files: SIGKILL pending in the main
// thread (stuck itself, in uninterruptible sleep) or in the shared set
// means dying; a read error other than the process's absence does not.
func TestDaemonDying(t *testing.T) {
	dir := t.TempDir()
	old := procDir
	procDir = dir
	t.Cleanup(func() { procDir = old })
	stat := func(state, start string) string {
		f := []string{state}
		for i := 4; i <= 22; i++ {
			f = append(f, strconv.Itoa(i))
		}
		f[len(f)-1] = start
		return "42 (conquest (x)) " + strings.Join(f, " ") + " 23 24\n"
	}
	status := func(sig, shd string) string {
		return "Name:\tconquest\nState:\tD (disk sleep)\nSigPnd:\t" + sig + "\nShdPnd:\t" + shd + "\nSigBlk:\t0000000000000100\n"
	}
	for _, c := range []struct {
		name, stat, status string
		want               bool
	}{
		{"alive", stat("S", "777"), status("0000000000000000", "0000000000000000"), false},
		{"stopped", stat("T", "777"), status("0000000000000000", "0000000000000000"), false},
		{"zombie", stat("Z", "777"), status("0000000000000000", "0000000000000000"), true},
		{"reused", stat("S", "778"), status("0000000000000000", "0000000000000000"), true},
		{"stuck, SIGKILL pending", stat("D", "777"), status("0000000000000100", "0000000000000000"), true},
		{"SIGKILL pending for the group", stat("D", "777"), status("0000000000000000", "0000000000000100"), true},
		{"SIGTERM pending", stat("S", "777"), status("0000000000004000", "0000000000000000"), false},
		{"gone", "", "", true},
	} {
		p := filepath.Join(dir, "42")
		os.RemoveAll(p)
		if c.stat != "" {
			os.Mkdir(p, 0o755)
			os.WriteFile(filepath.Join(p, "stat"), []byte(c.stat), 0o644)
			os.WriteFile(filepath.Join(p, "status"), []byte(c.status), 0o644)
		}
		d := &daemonProc{pid: 42, start: "777"}
		got := d.dying()
		d.close()
		if got != c.want {
			t.Errorf("%s: dying %v, want %v", c.name, got, c.want)
		}
	}
	// A real process: its files, opened while it lives, fail with ESRCH
	// once it is reaped (whatever process takes its pid later).
	procDir = old
	cmd := exec.Command("sleep", "30")
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	d := &daemonProc{pid: cmd.Process.Pid, start: processStarted(cmd.Process.Pid)}
	defer d.close()
	if d.dying() {
		t.Error("a live child taken for dying")
	}
	cmd.Process.Kill()
	cmd.Wait()
	if !d.dying() {
		t.Error("a reaped child not taken for dying")
	}
	procDir = dir

	// Unreadable (here a directory; for the watchdog, say, out of
	// descriptors): not taken for dead.
	p := filepath.Join(dir, "42")
	os.RemoveAll(p)
	os.MkdirAll(filepath.Join(p, "stat"), 0o755)
	os.WriteFile(filepath.Join(p, "status"), []byte(status("0000000000000100", "0")), 0o644)
	if d := (&daemonProc{pid: 42, start: "777"}); d.dying() {
		t.Error("an unreadable stat was taken for a dead daemon")
	}
}
