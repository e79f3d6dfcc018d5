// Package mounttest mounts Conquest for real in tests.
//
//	m := mounttest.Mount(t)            // fresh images in t.TempDir(), served in-process
//	os.WriteFile(m.Path("f"), ...)     // use m.Dir like any directory
//	m.Remount()                        // unmount, check, mount the same images again
//
//	p := mounttest.MountProcess(t)     // `conquest mount --foreground` as a child process
//	p.Kill()                           // kill -9 it (the mount is cleaned up)
//	p.Remount()                        // a new daemon recovers the arena
//
// Every mount registers a t.Cleanup that unmounts (fusermount3 -u, lazily if
// busy), waits for the serve loop or daemon to end, closes the file system,
// reopens the images and runs FS.Check, failing the test on any error. No
// mount or daemon outlives the test, even when it fails (a daemon started by
// MountProcess also gets SIGTERM if the test process dies). Tests skip
// (t.Skip) when /dev/fuse or fusermount3 is missing.
//
// A test binary that ends without its cleanups (Ctrl-C, a kill, go test's
// -timeout) leaves nothing either: every mount point is recorded with
// internal/reaper before it is mounted, and Main's reaper takes down what
// is left once the process is gone.
//
// MountProcess and Binary build the conquest command once per test binary
// when the package's TestMain calls mounttest.Main; without it they build
// into each test's t.TempDir().
//
// What mounttest must never do: leave anything outside t.TempDir() (the
// shared build directory is removed by Main), or hide a failed check.
package mounttest
