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
package e2e
