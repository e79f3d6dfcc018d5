package e2e

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFallocateOnFullFileSystemThroughMount: fallocate's promise through a
// mount, on a file system whose arena and disk are both full (found by an
// outside review, session 46): writes into what fallocate reserved on the
// disk succeed (they failed with ENOSPC once the arena was full: their
// checksums and unsynced records needed arena memory), and a truncate
// that grows the file keeps what KEEP_SIZE reserved past the new size, as
// ext4 does (it freed it, and the write there failed); and overwrites of
// what was written then succeed too (copy-on-write needs arena memory).
// Contents survive a remount.
func TestFallocateOnFullFileSystemThroughMount(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		dir := t.TempDir()
		m := mountNew(t, filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img"), 16<<20, wb)
		path := m.Path("f")
		const mib = 1 << 20
		if err := writeSynced(path, 0, bytes.Repeat([]byte("a"), 2*mib)); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		closed := false
		defer func() {
			if !closed {
				unix.Close(fd)
			}
		}()
		step := func(what string, err error) {
			t.Helper()
			if err != nil {
				t.Fatalf("%s: %v\n%s", what, err, spaceReport(m))
			}
		}
		step("fallocate [2, 4) MiB", unix.Fallocate(fd, 0, 2*mib, 2*mib))
		step("fallocate KEEP_SIZE [4, 7) MiB", unix.Fallocate(fd, unix.FALLOC_FL_KEEP_SIZE, 4*mib, 3*mib))
		step("ftruncate to 6 MiB", unix.Ftruncate(fd, 6*mib))
		step("fsync", unix.Fsync(fd))
		// The disk, then the arena (small files until ENOSPC).
		fillMount(t, m.Path("filler"))
		n := 0
		for ; n < 100000; n++ {
			if err = writeSmall(m.Path(fmt.Sprint("s", n)), uint64(n), wb || n%syncEvery == 0); err != nil {
				break
			}
		}
		isNoSpace(t, fmt.Sprint("small file ", n), err)
		want := bytes.Repeat([]byte("a"), 2*mib)
		for off := int64(2 * mib); off < 7*mib; off += 256 << 10 {
			piece := bytes.Repeat([]byte{byte('b' + off/mib)}, 256<<10)
			_, err := unix.Pwrite(fd, piece, off)
			if err == nil {
				err = unix.Fsync(fd)
			}
			step(fmt.Sprintf("write at %d into the reservation (%d small files filled the arena)", off, n), err)
			want = append(want, piece...)
		}
		// Then overwrite what is written, here and there (copy-on-write:
		// arena memory for the maps, on the heap's reserve).
		for i := 0; i < 600; i++ {
			off := int64((i*7919)%(7*mib/4096)) * 4096
			piece := bytes.Repeat([]byte{byte(i)}, 4096)
			_, err := unix.Pwrite(fd, piece, off)
			if err == nil && i%50 == 49 {
				err = unix.Fsync(fd)
			}
			step(fmt.Sprintf("overwrite %d at %d (%d small files filled the arena)", i, off, n), err)
			copy(want[off:], piece)
		}
		step("fsync", unix.Fsync(fd))
		closed = true
		step("close", unix.Close(fd))
		m.Remount()
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after a remount: %d bytes (%v), want the %d written", len(got), err, len(want))
		}
	})
}
