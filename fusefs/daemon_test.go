package fusefs_test

import (
	"bytes"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/mounttest"
)

// `conquest mount --foreground` unmounts cleanly on SIGTERM: exit status 0,
// the mount gone, the arena marked clean, and the data there next time.
func TestDaemonSIGTERM(t *testing.T) {
	m := mounttest.MountProcess(t)
	must(t, os.WriteFile(m.Path("kept"), []byte("still here"), 0o644))
	must(t, os.Mkdir(m.Path("dir"), 0o755))
	m.Terminate()
	if _, ok := fusefs.Mounted(m.Dir); ok {
		t.Fatal("still mounted after SIGTERM")
	}
	cleanAndKept(t, m, "kept", "still here")
}

// SIGTERM while a file is open: the daemon detaches the mount lazily and
// exits once the file is closed.
func TestDaemonSIGTERMBusy(t *testing.T) {
	m := mounttest.MountProcess(t)
	f, err := os.Create(m.Path("open"))
	must(t, err)
	cmd := m.Cmd
	exited := make(chan error, 1)
	go func() { exited <- waitExit(cmd, 30*time.Second) }()
	terminateBusy(t, m)
	_, err = f.Write([]byte("still served"))
	must(t, err)
	must(t, f.Close())
	if err := <-exited; err != nil {
		t.Fatal(err)
	}
	m.Terminate() // reaps the process state; nothing left to do
	m.Remount()
	if b, err := os.ReadFile(m.Path("open")); err != nil || string(b) != "still served" {
		t.Errorf("after remount: %q %v", b, err)
	}
}

// A second SIGTERM while a detached mount still has a file open stops the
// daemon at once: it exits 0 with the arena clean, what was written before
// is kept, and the open file fails from then on (ENOTCONN).
func TestDaemonSIGTERMTwiceBusy(t *testing.T) {
	m := mounttest.MountProcess(t)
	f, err := os.Create(m.Path("open"))
	must(t, err)
	defer f.Close()
	cmd := m.Cmd
	terminateBusy(t, m)
	_, err = f.Write([]byte("written before"))
	must(t, err)
	deadline := time.Now().Add(10 * time.Second)
	for !strings.Contains(m.Output(), "is busy: detached") {
		if time.Now().After(deadline) {
			t.Fatalf("no word of the busy mount; output:\n%s", m.Output())
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := waitExit(cmd, 200*time.Millisecond); err == nil {
		t.Fatal("daemon exited with a file still open, before a second signal")
	}
	must(t, cmd.Process.Signal(unix.SIGTERM))
	if err := waitExit(cmd, 10*time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Write([]byte("after")); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("write after the abort: %v, want ENOTCONN", err)
	}
	m.Terminate() // reaps the daemon; fails the test unless it exited 0
	cleanAndKept(t, m, "open", "written before")
}

// cleanAndKept checks, after the daemon of m exited, that it left the arena
// marked clean, then remounts and checks that file name holds want.
func cleanAndKept(t *testing.T, m *mounttest.Mounted, name, want string) {
	t.Helper()
	fs, err := mounttest.Open(m.Pram, m.Disk, mountOpts())
	must(t, err)
	dirty := fs.Arena().WasDirty()
	must(t, fs.Close())
	if dirty {
		t.Error("arena left dirty by the unmount")
	}
	m.Remount()
	if b, err := os.ReadFile(m.Path(name)); err != nil || string(b) != want {
		t.Errorf("after remount: %s: %q %v", name, b, err)
	}
}

// terminateBusy sends SIGTERM to the daemon of m, whose mount has files
// open, and waits until the mount is detached.
func terminateBusy(t *testing.T, m *mounttest.Mounted) {
	t.Helper()
	must(t, m.Cmd.Process.Signal(unix.SIGTERM))
	deadline := time.Now().Add(10 * time.Second)
	for {
		if _, ok := fusefs.Mounted(m.Dir); !ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatal("busy mount not detached after SIGTERM")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func waitExit(cmd *exec.Cmd, d time.Duration) error {
	// mounttest's goroutine reaps the daemon; until then it is a zombie.
	deadline := time.Now().Add(d)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", cmd.Process.Pid))
		if err != nil || bytes.Contains(b, []byte(") Z ")) {
			return nil
		}
		time.Sleep(10 * time.Millisecond)
	}
	return fmt.Errorf("daemon still running %v after SIGTERM", d)
}

// kill -9 of the daemon: every operation that returned survives, the
// restarted daemon recovers the arena and says so, and the check is clean.
func TestDaemonKill9(t *testing.T) {
	m := mounttest.MountProcess(t)
	for i := range 200 {
		must(t, os.WriteFile(m.Path(fmt.Sprintf("f%03d", i)), []byte(strings.Repeat("x", i)), 0o644))
	}
	must(t, os.Rename(m.Path("f000"), m.Path("renamed")))
	must(t, os.Remove(m.Path("f001")))
	m.Kill()
	if err := mounttest.CheckImages(m.Pram, m.Disk); err != nil {
		t.Fatal(err)
	}
	// CheckImages recovered the arena; make it dirty again for the daemon.
	m.Remount()
	m.Kill()
	m.Remount()
	if !strings.Contains(m.Output(), "not unmounted cleanly") {
		t.Errorf("remount after kill -9 did not report recovery; output:\n%s", m.Output())
	}
	names := readdirnames(t, m.Dir)
	if len(names) != 199 {
		t.Errorf("%d entries after kill -9, want 199", len(names))
	}
	for i := 2; i < 200; i++ {
		b, err := os.ReadFile(m.Path(fmt.Sprintf("f%03d", i)))
		if err != nil || len(b) != i {
			t.Errorf("f%03d: %d bytes, %v", i, len(b), err)
		}
	}
	if _, err := os.Stat(m.Path("renamed")); err != nil {
		t.Error(err)
	}
}

// A directory of 100,000 entries is listed in pages through the stable
// cursor while another goroutine deletes half of it: every surviving entry
// is listed exactly once, nothing twice. Then rm -rf removes it all.
func TestReaddirLargeConcurrentDelete(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 10_000
	}
	m := mounttest.MountProcess(t)
	dir := m.Path("big")
	must(t, os.Mkdir(dir, 0o755))
	name := func(i int) string { return fmt.Sprintf("f%06d", i) }
	start := time.Now()
	parallel(n, func(i int) error {
		return unix.Mknod(dir+"/"+name(i), unix.S_IFREG|0o644, 0)
	}, t)
	t.Logf("created %d entries in %v", n, time.Since(start))

	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	must(t, err)
	defer unix.Close(fd)
	buf := make([]byte, 4096) // many READDIR pages
	seen := make(map[string]int, n)
	var wg sync.WaitGroup
	wg.Add(1)
	var delErr error
	first := true
	for {
		nb, err := unix.Getdents(fd, buf)
		must(t, err)
		if nb == 0 {
			break
		}
		var names []string
		_, _, names = unix.ParseDirent(buf[:nb], -1, names)
		for _, s := range names {
			seen[s]++
		}
		if first {
			// Start deleting the odd entries once the scan is under way.
			first = false
			go func() {
				defer wg.Done()
				for i := 1; i < n; i += 2 {
					if err := unix.Unlink(dir + "/" + name(i)); err != nil {
						delErr = err
						return
					}
				}
			}()
		}
	}
	wg.Wait()
	must(t, delErr)
	for s, c := range seen {
		if c != 1 {
			t.Errorf("%s listed %d times", s, c)
		}
	}
	for i := 0; i < n; i += 2 {
		if seen[name(i)] != 1 {
			t.Errorf("surviving entry %s listed %d times", name(i), seen[name(i)])
		}
	}
	if len(seen) > n {
		t.Errorf("%d names listed, more than the %d created", len(seen), n)
	}
	t.Logf("listed %d names (%d deleted during the scan)", len(seen), n/2)

	start = time.Now()
	if out, err := exec.Command("rm", "-rf", dir).CombinedOutput(); err != nil {
		t.Fatalf("rm -rf: %v\n%s", err, out)
	}
	t.Logf("rm -rf of %d entries: %v", n/2, time.Since(start))
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Errorf("after rm -rf: %v", err)
	}
}

// parallel runs fn(0..n-1) on a few goroutines, failing on the first error.
func parallel(n int, fn func(int) error, t *testing.T) {
	t.Helper()
	const workers = 4
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < n; i += workers {
				if err := fn(i); err != nil {
					errs <- fmt.Errorf("item %d: %w", i, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}

func mountOpts() conquest.Options { return conquest.Options{} }

// Abort works where fusectl is not mounted (a container, or someone
// unmounted it): it mounts it and aborts, and does not mount it twice.
func TestAbortWithoutFusectl(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("mounting fusectl needs root")
	}
	dir := t.TempDir()
	t.Cleanup(fusefs.SetFusectlDir(dir))
	t.Cleanup(func() {
		for unix.Unmount(dir, 0) == nil {
		}
	})
	m := mounttest.Mount(t)
	f, err := os.Create(m.Path("open"))
	must(t, err)
	defer f.Close()
	_, err = f.Write([]byte("written before"))
	must(t, err)
	must(t, m.Server.Abort())
	var st unix.Statfs_t
	must(t, unix.Statfs(dir, &st))
	if st.Type != 0x65735543 {
		t.Fatalf("%s: f_type %#x after Abort, want fusectl's", dir, st.Type)
	}
	if _, err := f.Write([]byte("after")); !errors.Is(err, unix.ENOTCONN) {
		t.Errorf("write after the abort: %v, want ENOTCONN", err)
	}
	select {
	case <-m.Server.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("the serve loop still runs 10 s after Abort")
	}
	// Aborting again finds fusectl mounted and stacks no second mount.
	must(t, m.Server.Abort())
	if n := strings.Count(mountinfo(t), " "+dir+" "); n != 1 {
		t.Errorf("fusectl mounted %d times on %s", n, dir)
	}
	// Once the mount is gone, so is the connection, and an abort is no
	// error (a third SIGINT to a daemon said "open .../abort: no such file
	// or directory" after a clean unmount).
	srv := m.Server
	f.Close()
	m.Unmount()
	for i := 0; ; i++ {
		if _, err := os.Stat(filepath.Join(dir, srv.ConnID())); errors.Is(err, fs.ErrNotExist) {
			break
		}
		if i == 500 {
			t.Fatal("the connection is still listed 5 s after the unmount")
		}
		time.Sleep(10 * time.Millisecond)
	}
	must(t, srv.Abort())
}

func mountinfo(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("/proc/self/mountinfo")
	must(t, err)
	return string(b)
}
