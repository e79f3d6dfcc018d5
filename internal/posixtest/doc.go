// Package posixtest is a POSIX conformance suite for a mounted file system,
// in the style of go-fuse's posixtest: Tests returns a map from test name to
// func(t *testing.T, dir string), where dir is an empty directory on the file
// system under test. The suite is first run against a temporary directory on
// the host (ext4 or tmpfs), which validates the suite itself, and then against
// a Conquest FUSE mount (package internal/e2e).
//
// Where Linux file systems differ, the tests expect what ext4 does.
//
// Besides the suite the package provides the pieces the end-to-end tests
// share:
//   - a helper process (HelperMain, RunAs) that re-executes the test binary to
//     act as a second process (lock conflicts) or as an unprivileged user
//     (permission checks);
//   - Snapshot and Diff, which capture a directory tree (names, types, modes,
//     sizes, contents, link structure) and compare two captures;
//   - Simulate, a seeded model-based simulation that applies the same random
//     operations to two directories and compares their errors and trees;
//   - Workload, a random workload whose every operation is mirrored on a
//     shadow directory, so that after a crash the survivor can be checked
//     against the state before or after the one operation in flight;
//   - MountTmpfs, a private tmpfs for reference trees.
//
// What posixtest must never do: import Conquest packages (it tests through
// the kernel only), touch anything outside the directories it is given and
// the test's own temporary directories, or leave mounts behind.
//
// Every test binary that runs the suite must call HelperMain at the start of
// its TestMain; tests that need a second process fail with a clear message
// otherwise.
package posixtest
