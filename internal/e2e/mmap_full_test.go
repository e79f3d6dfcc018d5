package e2e

import (
	"bytes"
	"path/filepath"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/internal/mounttest"
)

// TestMmapStoresOnFullDiskThroughMount: stores through a shared mapping
// into the holes of a large file on a full disk fail to reach the file
// system (msync says ENOSPC), and then the file must read as what it holds:
// zeros there, before and after a remount. The kernel marks the pages of a
// failed write of cached pages clean and keeps them; reads went on showing
// the stores until the pages were evicted, and a remount showed zeros
// (found by an outside review, session 46). The daemon now drops those
// pages (fusefs dropUnstored). It runs in a process of its own: this one
// maps files of the mount.
func TestMmapStoresOnFullDiskThroughMount(t *testing.T) {
	for _, args := range [][]string{nil, {"--writeback-cache"}} {
		name := "writethrough"
		if args != nil {
			name = "writeback"
		}
		t.Run(name, func(t *testing.T) {
			dir := t.TempDir()
			pram, disk := filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img")
			if err := conquest.Mkfs(pram, disk, conquest.MkfsOptions{PramSize: 16 << 20, DiskSize: 32 << 20}); err != nil {
				t.Fatal(err)
			}
			m := mounttest.MountProcess(t, mounttest.WithImages(pram, disk), mounttest.WithArgs(args...))
			const mib = 1 << 20
			path := m.Path("f")
			fd, err := unix.Open(path, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Fatal(err)
			}
			var mem []byte
			defer func() { // before the mount's cleanup, after a failure too
				if mem != nil {
					unix.Munmap(mem)
				}
				unix.Close(fd)
			}()
			if err := unix.Ftruncate(fd, 8*mib); err != nil {
				t.Fatal(err)
			}
			fillMount(t, m.Path("filler"))
			if mem, err = unix.Mmap(fd, 0, 8*mib, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED); err != nil {
				t.Fatal(err)
			}
			for off := 0; off < 8*mib; off += mib {
				copy(mem[off:off+64<<10], bytes.Repeat([]byte{0xab}, 64<<10))
			}
			if err := unix.Msync(mem, unix.MS_SYNC); err == nil {
				t.Fatal("msync of stores into holes on a full disk succeeded; the test needs them to fail")
			}
			zeros := make([]byte, 64<<10)
			stored := func() bool {
				buf := make([]byte, 64<<10)
				for off := int64(0); off < 8*mib; off += mib {
					if n, err := unix.Pread(fd, buf, off); err != nil || n != len(buf) || !bytes.Equal(buf, zeros) {
						return false
					}
				}
				return true
			}
			// The pages are dropped right after the failed WRITEs' replies.
			deadline := time.Now().Add(5 * time.Second)
			for !stored() {
				if time.Now().After(deadline) {
					t.Fatal("5 s after msync failed with ENOSPC, reads still show stores the file system did not keep")
				}
				time.Sleep(10 * time.Millisecond)
			}
			if err := unix.Munmap(mem); err != nil {
				t.Fatal(err)
			}
			mem = nil
			unix.Close(fd)
			fd = -1
			m.Remount()
			if fd, err = unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0); err != nil {
				t.Fatal(err)
			}
			if !stored() {
				t.Fatal("after a remount the file does not read as zeros where the stores failed")
			}
		})
	}
}
