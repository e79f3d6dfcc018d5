package posixtest

import "golang.org/x/sys/unix"

// Prefault faults in the pages of m, a shared mapping of a file, inside a
// system call (madvise MADV_POPULATE_READ, or MADV_POPULATE_WRITE if
// write), so that touching them afterwards does not fault. A test process
// that serves the mount it maps must not fault on a FUSE page in user
// code: the faulting thread waits in the kernel for a READ that this
// process serves and cannot be preempted, so a garbage collection that
// stops the world then waits for it forever while the server's goroutines
// are stopped (a suite run hung so in session 27; fusefs's ops_test turns
// collection off around its one touch for the same reason). In a system
// call the goroutine is no obstacle to stopping the world. Kernels before
// 5.14 lack the advice (EINVAL): the pages then fault at the first touch,
// as before.
func Prefault(m []byte, write bool) {
	if len(m) == 0 {
		return
	}
	advice := unix.MADV_POPULATE_READ
	if write {
		advice = unix.MADV_POPULATE_WRITE
	}
	for unix.Madvise(m, advice) == unix.EINTR {
	}
}
