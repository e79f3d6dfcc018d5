package fusefs_test

import (
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
	"conquest/internal/mounttest"
)

// A mount made by root honours set-user-ID bits and device nodes, as a disk
// file system mounted by root does (posixtest's SetuidExec and DeviceOpen
// check that they work); NoSUID and NoDev, or `conquest mount --nosuid
// --nodev`, turn them off.
func TestMountSUIDDev(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("only root mounts get suid and dev")
	}
	flags := func(dir string) int64 {
		t.Helper()
		var sfs unix.Statfs_t
		must(t, unix.Statfs(dir, &sfs))
		return sfs.Flags & (unix.ST_NOSUID | unix.ST_NODEV)
	}
	m := mounttest.Mount(t)
	if f := flags(m.Dir); f != 0 {
		t.Errorf("default mount: statfs flags %#x, want neither nosuid nor nodev", f)
	}
	m = mounttest.Mount(t, mounttest.WithFuseOptions(fusefs.Options{NoSUID: true, NoDev: true}))
	if f := flags(m.Dir); f != unix.ST_NOSUID|unix.ST_NODEV {
		t.Errorf("NoSUID and NoDev: statfs flags %#x, want nosuid and nodev", f)
	}
	p := mounttest.MountProcess(t, mounttest.WithArgs("--nosuid", "--nodev"))
	if f := flags(p.Dir); f != unix.ST_NOSUID|unix.ST_NODEV {
		t.Errorf("conquest mount --nosuid --nodev: statfs flags %#x, want nosuid and nodev", f)
	}
}
