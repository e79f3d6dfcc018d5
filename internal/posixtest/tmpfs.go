package posixtest

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/reaper"
)

// MountTmpfs mounts a private tmpfs of the given size on a new directory
// under t.TempDir and unmounts it at cleanup (lazily, so a leaked
// descriptor cannot leave it behind). When mounting is not possible (not
// root, no mount namespace privileges) it returns a plain t.TempDir and
// false.
func MountTmpfs(t testing.TB, sizeBytes int64) (dir string, mounted bool) {
	t.Helper()
	dir = t.TempDir()
	if os.Geteuid() != 0 {
		return dir, false
	}
	opts := "size=" + formatInt(sizeBytes) + ",mode=0755"
	reaper.Mount(dir)
	if err := unix.Mount("tmpfs", dir, "tmpfs", unix.MS_NOSUID|unix.MS_NODEV, opts); err != nil {
		t.Logf("mount tmpfs on %s: %v; using the plain directory", dir, err)
		return dir, false
	}
	t.Cleanup(func() {
		if err := unix.Unmount(dir, 0); err != nil {
			t.Logf("unmount tmpfs %s: %v; detaching", dir, err)
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	return dir, true
}
