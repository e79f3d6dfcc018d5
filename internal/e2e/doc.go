// Package e2e holds end-to-end tests that mount Conquest for real (through
// internal/mounttest) and exercise it only through the kernel: the
// posixtest conformance suite, permission checks as an unprivileged user, a
// model-based simulation against tmpfs, remount and kill -9 persistence,
// concurrent workloads, and stress-ng's file-system stressors with
// --verify as an independent exerciser. The tests serve the mount in-process where they can,
// so that `go test -race` covers the daemon too; the kill -9 tests use a
// separate daemon process.
//
// The package has no non-test code. What it must never do: reach into the
// core (package conquest) except through FS.Check and the images, or leave
// a mount behind (mounttest's cleanup unmounts and checks every mount).
//
// Time: this package is the suite's longest and the Makefile starts it
// first. Its seven longest tests (the three posixtest runs, the full-device
// tests, stress-ng and the two large-file tests, each on mounts and images
// of its own) call t.Parallel, so that up to -parallel of them (GOMAXPROCS)
// run at once after the serial tests: a FUSE test keeps about one CPU
// busy, and in a suite run on two CPUs the other is otherwise idle once
// the remaining packages have finished. A test that changes process-wide
// state (the environment, the umask, a hook in another package) must not
// be one of them.
package e2e
