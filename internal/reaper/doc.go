// Package reaper takes down what a test binary leaves when it ends without
// running its cleanups: Ctrl-C (SIGINT to the whole process group), a
// SIGTERM or kill -9, or go test's -timeout panic end it at once. A FUSE
// mount it was serving in-process then stays behind, dead, and a thread of
// it that was waiting in a request to that mount keeps the process a
// zombie for ever (the request waits, unkillably, for an answer only the
// dead process could give); a daemon it started stays mounted; tmpfs and
// ext4 mounts, loop devices, RAM copies, the built binary and the tests'
// temporary directories stay too (seen after a Ctrl-C of `go test
// ./cmd/conquest ./internal/e2e` in session 56).
//
// A package's TestMain calls Child first, then Start: this test binary is
// started again as the reaper, in a session of its own (a Ctrl-C does not
// reach it), its stdin the read end of a pipe whose write end only the
// test process holds, and none of go test's pipes (go test never waits on
// it). The test helpers record, before they make it, every mount point
// (Mount), loop device (Loop) and directory to remove at the end (Remove)
// in a file the reaper reads. The reaper waits until the test process is
// gone (the pipe's end) or a zombie (its main thread exited while another
// waits on a dead mount), then, in order: aborts the FUSE connection of
// every recorded mount point still mounted (through fusectl: the stuck
// thread gets ENOTCONN and the process can end), detaches the mounts,
// detaches the loop devices still backed by their recorded files, and
// removes the recorded directories, among them the temporary directory of
// the test (t.TempDir's root, in $GOTMPDIR) that held each mount point or
// backing file. Paths are recorded with their symbolic links resolved, as
// mountinfo names them, and a removal never enters a mount point or a
// directory of another file system. After a normal end the cleanups have
// done all that, and the reaper finds nothing to do.
//
// What it must never do: touch a mount, device or file that this test
// binary did not record; it imports nothing of the project, so that every
// package's tests (pram's among them) may use it. Not covered: a loop
// device attached in the moment before it is recorded, and processes a
// test starts on its own (an unshare(1) holding a mount namespace).
package reaper
