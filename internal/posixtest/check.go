package posixtest

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"
)

// Small assertion helpers shared by the suite. Every helper takes t and
// reports the caller's line.

// ok fails the test if err is not nil.
func ok(t testing.TB, err error, what string) {
	t.Helper()
	if err != nil {
		t.Fatalf("%s: %v", what, err)
	}
}

// wantErr fails unless err is the errno want.
func wantErr(t testing.TB, err error, want syscall.Errno, what string) {
	t.Helper()
	if err == nil {
		t.Fatalf("%s: succeeded, want %v (%s)", what, want, errnoName(want))
	}
	if !errors.Is(err, want) {
		t.Fatalf("%s: got %v, want %v (%s)", what, err, want, errnoName(want))
	}
}

// wantErrIn fails unless err is one of the errnos in want (for the rare case
// where POSIX allows a choice and Linux file systems differ).
func wantErrIn(t testing.TB, err error, what string, want ...syscall.Errno) {
	t.Helper()
	for _, w := range want {
		if errors.Is(err, w) {
			return
		}
	}
	t.Fatalf("%s: got %v, want one of %v", what, err, want)
}

func errnoName(e syscall.Errno) string { return unix.ErrnoName(e) }

func lstat(t testing.TB, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	ok(t, unix.Lstat(path, &st), "lstat "+path)
	return st
}

func stat(t testing.TB, path string) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	ok(t, unix.Stat(path, &st), "stat "+path)
	return st
}

func fstat(t testing.TB, fd int) unix.Stat_t {
	t.Helper()
	var st unix.Stat_t
	ok(t, unix.Fstat(fd, &st), "fstat")
	return st
}

func writeFile(t testing.TB, path string, data []byte, mode os.FileMode) {
	t.Helper()
	ok(t, WriteFile(path, data, uint32(mode.Perm())), "write "+path)
}

func readFile(t testing.TB, path string) []byte {
	t.Helper()
	b, err := ReadFile(path)
	ok(t, err, "read "+path)
	return b
}

func wantContent(t testing.TB, path string, want []byte) {
	t.Helper()
	got := readFile(t, path)
	if !bytes.Equal(got, want) {
		t.Fatalf("%s: content differs: %s", path, describeDiff(got, want))
	}
}

func mkdir(t testing.TB, path string, mode uint32) {
	t.Helper()
	ok(t, unix.Mkdir(path, mode), "mkdir "+path)
}

// open opens path and closes it at cleanup.
func open(t testing.TB, path string, flags int, mode uint32) int {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CLOEXEC, mode)
	ok(t, err, "open "+path)
	closeAtCleanup(t, fd)
	return fd
}

// closeAtCleanup closes fd when the test ends unless the test closed it
// itself. Tests may close what open gave them, and the number is then free
// for any descriptor the process opens: with tests running in parallel
// (e2e), a blind second close took another test's file away (its next
// write failed with EBADF). So the cleanup closes fd only if it still
// names the file it named at open (device and inode; every test has a
// mount of its own).
func closeAtCleanup(t testing.TB, fd int) {
	var st unix.Stat_t
	if unix.Fstat(fd, &st) != nil {
		return
	}
	t.Cleanup(func() {
		var now unix.Stat_t
		if unix.Fstat(fd, &now) == nil && now.Dev == st.Dev && now.Ino == st.Ino {
			unix.Close(fd)
		}
	})
}

func pwrite(t testing.TB, fd int, data []byte, off int64) {
	t.Helper()
	n, err := unix.Pwrite(fd, data, off)
	ok(t, err, "pwrite")
	if n != len(data) {
		t.Fatalf("pwrite at %d: wrote %d of %d", off, n, len(data))
	}
}

// pread reads exactly n bytes at off, or fewer at EOF.
func pread(t testing.TB, fd int, n int, off int64) []byte {
	t.Helper()
	buf := make([]byte, n)
	got := 0
	for got < n {
		m, err := unix.Pread(fd, buf[got:], off+int64(got))
		ok(t, err, "pread")
		if m == 0 {
			break
		}
		got += m
	}
	return buf[:got]
}

// pattern returns n deterministic bytes that differ for each seed and offset
// (so a shifted or misplaced block is detected).
func pattern(seed uint64, n int) []byte {
	b := make([]byte, n)
	x := seed*0x9E3779B97F4A7C15 + 1
	for i := range b {
		x ^= x << 13
		x ^= x >> 7
		x ^= x << 17
		b[i] = byte(x)
	}
	return b
}

func isZero(b []byte) bool {
	for _, c := range b {
		if c != 0 {
			return false
		}
	}
	return true
}

// describeDiff summarises how got differs from want.
func describeDiff(got, want []byte) string {
	msg := ""
	if len(got) != len(want) {
		msg = fmt.Sprintf("length %d, want %d", len(got), len(want))
	}
	for i := 0; i < min(len(got), len(want)); i++ {
		if got[i] != want[i] {
			return msg + fmt.Sprintf("; first difference at byte %d (%#x, want %#x)", i, got[i], want[i])
		}
	}
	return msg
}

// needRoot skips the test unless it runs as root (mknod of devices, chown,
// trusted xattrs).
func needRoot(t testing.TB) {
	t.Helper()
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
}

// needMountFlagOff skips the test when dir's mount has flag (unix.ST_NODEV,
// unix.ST_NOSUID) set, named name in the message.
func needMountFlagOff(t testing.TB, dir string, flag int64, name string) {
	t.Helper()
	var sfs unix.Statfs_t
	ok(t, unix.Statfs(dir, &sfs), "statfs")
	if sfs.Flags&flag != 0 {
		t.Skip("mounted " + name)
	}
}

// tsTime converts a Timespec to time.Time for messages and ordering.
func tsTime(ts unix.Timespec) time.Time { return time.Unix(ts.Sec, ts.Nsec) }

// tsEqual reports whether two timestamps are identical to the nanosecond.
func tsEqual(a, b unix.Timespec) bool { return a.Sec == b.Sec && a.Nsec == b.Nsec }

// tsAfter reports whether a is strictly later than b.
func tsAfter(a, b unix.Timespec) bool {
	return a.Sec > b.Sec || (a.Sec == b.Sec && a.Nsec > b.Nsec)
}

// tickSleep sleeps long enough for the kernel's coarse clock (one jiffy, at
// most 10 ms) to advance, so that "was this timestamp updated" is observable.
func tickSleep() { time.Sleep(25 * time.Millisecond) }

// The unprivileged identity for permission checks (nobody/nogroup on
// Debian).
const (
	nobodyUID = 65534
	nobodyGID = 65534
)

// join joins path elements with "/" without cleaning, so that ".", ".." and
// trailing slashes reach the file system as written.
func join(elem ...string) string { return strings.Join(elem, "/") }

func itoa(i int) string { return strconv.Itoa(i) }

func formatInt(i int64) string { return strconv.FormatInt(i, 10) }
