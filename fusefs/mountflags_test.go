package fusefs_test

import (
	"os"
	"testing"
	"unsafe"

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

// `conquest mount --cached-writes` keeps what a write-only descriptor
// writes in the kernel's page cache; by default it is not kept (the handle
// bypasses the cache, fusefs.Options.CachedWrites).
func TestCachedWritesFlag(t *testing.T) {
	const size = 128 << 10
	pages := size / os.Getpagesize()
	for _, args := range [][]string{nil, {"--cached-writes"}} {
		p := mounttest.MountProcess(t, mounttest.WithArgs(args...))
		path := p.Path("f")
		must(t, os.WriteFile(path, nil, 0o644))
		probe, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		must(t, err)
		wr, err := unix.Open(path, unix.O_WRONLY|unix.O_CLOEXEC, 0)
		must(t, err)
		_, err = unix.Pwrite(wr, make([]byte, size), 0)
		must(t, err)
		must(t, unix.Close(wr))
		m, err := unix.Mmap(probe, 0, size, unix.PROT_READ, unix.MAP_SHARED)
		must(t, err)
		vec := make([]byte, pages)
		_, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), size, uintptr(unsafe.Pointer(&vec[0])))
		must(t, unix.Munmap(m))
		must(t, unix.Close(probe))
		if e != 0 {
			t.Fatal(e)
		}
		k := 0
		for _, v := range vec {
			k += int(v & 1)
		}
		if want := map[bool]int{false: 0, true: pages}[args != nil]; k != want {
			t.Errorf("conquest mount %v: %d of %d pages written through O_WRONLY cached, want %d", args, k, pages, want)
		}
	}
}
