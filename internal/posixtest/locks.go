package posixtest

import (
	"fmt"
	"os"
	"strings"
	"testing"

	"golang.org/x/sys/unix"
)

// flock(2) and POSIX record locks (fcntl F_SETLK/F_GETLK), checked against
// a second process.
var lockTests = map[string]Test{
	"PosixLockConflict": testPosixLockConflict,
	"PosixLockSplit":    testPosixLockSplit,
	"Flock":             testFlock,
}

func testPosixLockConflict(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, make([]byte, 1000), 0644)
	fd := open(t, p, unix.O_RDWR, 0)
	ok(t, unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 100}), "F_SETLK write [0,100)")
	// Our own F_GETLK sees no conflict with our own lock.
	own := unix.Flock_t{Type: unix.F_WRLCK, Start: 50, Len: 10}
	ok(t, unix.FcntlFlock(uintptr(fd), unix.F_GETLK, &own), "F_GETLK own")
	if own.Type != unix.F_UNLCK {
		t.Fatalf("F_GETLK against own lock reports type %d", own.Type)
	}
	_, err := RunAs(t, Root, "setlk", p, "w", "50", "10")
	wantErrIn(t, err, "other process F_SETLK write over a write lock", unix.EAGAIN, unix.EACCES)
	_, err = RunAs(t, Root, "setlk", p, "r", "99", "1")
	wantErrIn(t, err, "other process F_SETLK read over a write lock", unix.EAGAIN, unix.EACCES)
	_, err = RunAs(t, Root, "setlk", p, "w", "100", "50")
	ok(t, err, "other process F_SETLK on an adjacent range")
	out, err := RunAs(t, Root, "getlk", p, "w", "10", "5")
	ok(t, err, "other process F_GETLK")
	var typ, pid, start, length int
	if _, err := fmt.Sscan(out, &typ, &pid, &start, &length); err != nil {
		t.Fatalf("getlk reply %q: %v", out, err)
	}
	if typ != unix.F_WRLCK || pid != os.Getpid() || start != 0 || length != 100 {
		t.Fatalf("F_GETLK: type %d pid %d range [%d,+%d), want write lock by %d on [0,+100)", typ, pid, start, length, os.Getpid())
	}
	// Downgrade to a read lock: other readers may share, writers not.
	ok(t, unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_RDLCK, Start: 0, Len: 100}), "downgrade")
	_, err = RunAs(t, Root, "setlk", p, "r", "0", "100")
	ok(t, err, "shared read lock")
	_, err = RunAs(t, Root, "setlk", p, "w", "0", "1")
	wantErrIn(t, err, "write lock over a read lock", unix.EAGAIN, unix.EACCES)
	// Unlock: now anything goes.
	ok(t, unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_UNLCK, Start: 0, Len: 0}), "unlock")
	_, err = RunAs(t, Root, "setlk", p, "w", "0", "0")
	ok(t, err, "write lock of whole file after unlock")
	// Closing any descriptor of the file drops the process's locks.
	ok(t, unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 0}), "relock")
	fd2, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	ok(t, err, "open second fd")
	unix.Close(fd2)
	_, err = RunAs(t, Root, "setlk", p, "w", "0", "0")
	ok(t, err, "lock after the holder closed another fd of the file")
}

func testPosixLockSplit(t *testing.T, dir string) {
	// Unlocking the middle of a lock leaves two locks around a gap.
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	fd := open(t, p, unix.O_RDWR, 0)
	ok(t, unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_WRLCK, Start: 0, Len: 300}), "lock")
	ok(t, unix.FcntlFlock(uintptr(fd), unix.F_SETLK, &unix.Flock_t{Type: unix.F_UNLCK, Start: 100, Len: 100}), "unlock middle")
	_, err := RunAs(t, Root, "setlk", p, "w", "100", "100")
	ok(t, err, "lock the gap")
	for _, r := range [][2]string{{"0", "100"}, {"200", "100"}, {"50", "200"}} {
		_, err := RunAs(t, Root, "setlk", p, "w", r[0], r[1])
		wantErrIn(t, err, "lock over a remaining piece "+strings.Join(r[:], "+"), unix.EAGAIN, unix.EACCES)
	}
}

func testFlock(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, nil, 0644)
	fd := open(t, p, unix.O_RDONLY, 0)
	ok(t, unix.Flock(fd, unix.LOCK_EX|unix.LOCK_NB), "flock LOCK_EX")
	_, err := RunAs(t, Root, "flock", p, "sh")
	wantErr(t, err, unix.EWOULDBLOCK, "other process LOCK_SH over LOCK_EX")
	_, err = RunAs(t, Root, "flock", p, "ex")
	wantErr(t, err, unix.EWOULDBLOCK, "other process LOCK_EX over LOCK_EX")
	// flock locks belong to the open file description: a second open in
	// this process conflicts too.
	fd2 := open(t, p, unix.O_RDONLY, 0)
	wantErr(t, unix.Flock(fd2, unix.LOCK_SH|unix.LOCK_NB), unix.EWOULDBLOCK, "second description LOCK_SH")
	ok(t, unix.Flock(fd, unix.LOCK_SH), "downgrade to LOCK_SH")
	_, err = RunAs(t, Root, "flock", p, "sh")
	ok(t, err, "shared flock")
	_, err = RunAs(t, Root, "flock", p, "ex")
	wantErr(t, err, unix.EWOULDBLOCK, "LOCK_EX over LOCK_SH")
	ok(t, unix.Flock(fd, unix.LOCK_UN), "LOCK_UN")
	_, err = RunAs(t, Root, "flock", p, "ex")
	ok(t, err, "LOCK_EX after unlock")
	// POSIX locks and flock locks do not interact on Linux.
	ok(t, unix.Flock(fd, unix.LOCK_EX), "flock again")
	_, err = RunAs(t, Root, "setlk", p, "w", "0", "0")
	ok(t, err, "POSIX lock while flock is held")
}
