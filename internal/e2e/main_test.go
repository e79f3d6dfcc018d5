package e2e

import (
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/mounttest"
	"conquest/internal/posixtest"
	"conquest/internal/racetest"
)

func TestMain(m *testing.M) {
	posixtest.HelperMain() // helper processes exit here
	racetest.Select(heavy...)
	mounttest.Main(m)
}

// heavy are the tests that run a sample under -race and in full in `make
// test`'s second step, without it (internal/racetest): the 1 GiB file.
var heavy = []string{"TestLargeGiB"}

// mount serves a fresh file system in-process, open to other users (the
// permission checks run as nobody). Files on it may be opened with the os
// package: fusefs.Mount has already had the kernel's one POLL answered, so
// the netpoller's epoll_ctl cannot deadlock with the garbage collector.
func mount(t *testing.T, opts ...mounttest.Option) *mounttest.Mounted {
	t.Helper()
	opts = append([]mounttest.Option{mounttest.WithFuseOptions(fusefs.Options{AllowOther: true})}, opts...)
	return mounttest.Mount(t, opts...)
}

// cacheModes runs f as two subtests, "writethrough" and "writeback" (wb:
// the mount is to use the kernel's writeback cache).
func cacheModes(t *testing.T, f func(t *testing.T, wb bool)) {
	for _, wb := range []bool{false, true} {
		name := "writethrough"
		if wb {
			name = "writeback"
		}
		t.Run(name, func(t *testing.T) { f(t, wb) })
	}
}

// waitAll waits for wg, failing the test if that takes longer than limit
// (who names what hangs).
func waitAll(t *testing.T, wg *sync.WaitGroup, limit time.Duration, who string) {
	t.Helper()
	done := make(chan struct{})
	go func() { wg.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(limit):
		t.Fatalf("%s hang", who)
	}
}

// remount remounts an in-process mount.
func remount(t *testing.T, m *mounttest.Mounted) {
	t.Helper()
	m.Remount()
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
	checkWith(t, m, when, conquest.CheckOptions{VerifyData: true})
}

// checkWith is check with options: VerifyData off walks the metadata and
// accounts for every disk block without reading the data, for checks
// repeated between the steps of a test whose files all stay until the
// full check at unmount (mounttest) reads them.
func checkWith(t *testing.T, m *mounttest.Mounted, when string, o conquest.CheckOptions) {
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
		if errs = m.FS.CheckWith(o); len(errs) == 0 {
			if try > 0 {
				t.Logf("FS.Check %s: clean after %d retries", when, try)
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Errorf("FS.Check %s: %d errors, first: %v", when, len(errs), errs[0])
}
