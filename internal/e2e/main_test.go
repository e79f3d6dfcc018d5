package e2e

import (
	"os"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
)

func TestMain(m *testing.M) {
	posixtest.HelperMain() // helper processes exit here
	mounttest.Main(m)
}

// mount serves a fresh file system in-process, open to other users (the
// permission checks run as nobody).
func mount(t *testing.T, opts ...mounttest.Option) *mounttest.Mounted {
	t.Helper()
	opts = append([]mounttest.Option{mounttest.WithFuseOptions(fusefs.Options{AllowOther: true})}, opts...)
	m := mounttest.Mount(t, opts...)
	primePoll(t, m)
	return m
}

// remount remounts an in-process mount (see primePoll).
func remount(t *testing.T, m *mounttest.Mounted) {
	t.Helper()
	m.Remount()
	primePoll(t, m)
}

// primePoll makes the kernel learn, right after mounting and while nothing
// else runs, that the daemon does not implement POLL. The os package
// registers every file it opens with the netpoller (epoll_ctl, a raw system
// call that keeps its P), and the first epoll_ctl on a file of a FUSE
// connection sends a POLL request to the daemon: when the daemon is this
// process and the GC stops the world at that moment, nothing can answer
// and the test hangs (seen under -race). After one ENOSYS answer the kernel
// stops asking. The tests use posixtest.ReadFile and friends anyway; this
// protects any os.Open they miss. (go-fuse does the same in its server.)
// The file stays, so that priming after a remount changes nothing (a
// remount test compares directory mtimes).
func primePoll(t *testing.T, m *mounttest.Mounted) {
	t.Helper()
	p := m.Path(".poll-prime")
	var st unix.Stat_t
	if err := unix.Lstat(p, &st); err != nil {
		if err := posixtest.WriteFile(p, nil, 0o600); err != nil {
			t.Fatal(err)
		}
	}
	f, err := os.Open(p) // epoll_ctl -> POLL -> ENOSYS -> no_poll
	if err != nil {
		t.Fatal(err)
	}
	f.Close()
}

// writeAll writes all of data to fd.
func writeAll(fd int, data []byte) error {
	for len(data) > 0 {
		n, err := unix.Write(fd, data)
		if err != nil {
			return err
		}
		data = data[n:]
	}
	return nil
}

// check runs the full consistency walk on a live in-process mount.
func check(t *testing.T, m *mounttest.Mounted, when string) {
	t.Helper()
	if m.FS == nil {
		return
	}
	// The kernel sends RELEASE and FORGET asynchronously, and the core
	// updates its open/reference counts just before it takes the lock to
	// free an unlinked inode; a check in that window reports the inode as
	// leaked. Only errors that persist count.
	var errs []error
	for try := 0; try < 20; try++ {
		if errs = m.FS.Check(); len(errs) == 0 {
			if try > 0 {
				t.Logf("FS.Check %s: clean after %d retries", when, try)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("FS.Check %s: %d errors, first: %v", when, len(errs), errs[0])
}
