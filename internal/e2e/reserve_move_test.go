package e2e

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"

	"golang.org/x/sys/unix"
)

// TestFallocateKeptAcrossMoveThroughMount: space fallocate reserved while
// a file was small (in the arena) stays reserved when the file grows past
// the large-file threshold and moves to the disk. With the disk then full,
// a write into the reserved range succeeds, as on ext4. It used to fail
// with ENOSPC: the move left the reserved blocks, which held zeros, as
// holes.
func TestFallocateKeptAcrossMoveThroughMount(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		dir := t.TempDir()
		m := mountNew(t, filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img"), 16<<20, wb)
		path := m.Path("f")
		head := bytes.Repeat([]byte("a"), 100<<10)
		if err := writeSynced(path, 0, head); err != nil {
			t.Fatal(err)
		}
		const reserved = 900 << 10 // below the 1 MB threshold: reserved in the arena
		tailAt := int64(3 << 20)   // past the threshold and the size a file may wait in the arena at: it moves at once
		tail := bytes.Repeat([]byte("t"), 128<<10)
		mid := bytes.Repeat([]byte("r"), reserved-len(head))
		err := func() error {
			fd, err := unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
			if err != nil {
				return err
			}
			defer unix.Close(fd)
			if err := unix.Fallocate(fd, 0, 0, reserved); err != nil {
				return err
			}
			if _, err := unix.Pwrite(fd, tail, tailAt); err != nil {
				return err
			}
			if err := unix.Fsync(fd); err != nil {
				return err
			}
			fillMount(t, m.Path("filler"))
			// Into the reserved range. (With the writeback cache an
			// ENOSPC would show at the fsync.)
			if _, err := unix.Pwrite(fd, mid, int64(len(head))); err != nil {
				return err
			}
			return unix.Fsync(fd)
		}()
		if err != nil {
			t.Fatalf("%v (a write into space fallocate reserved, on a full disk)\n%s", err, spaceReport(m))
		}
		want := make([]byte, tailAt+int64(len(tail)))
		copy(want, head)
		copy(want[len(head):], mid)
		copy(want[tailAt:], tail)
		m.Remount()
		got, err := os.ReadFile(path)
		if err != nil || !bytes.Equal(got, want) {
			t.Fatalf("after a remount: %d bytes (%v), want the %d written", len(got), err, len(want))
		}
	})
}

// fillMount writes path until the disk is full (ENOSPC at a write or an
// fsync), in pieces that shrink to one 4 KiB page, and keeps what it wrote.
func fillMount(t *testing.T, path string) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_EXCL|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := bytes.Repeat([]byte("f"), 1<<20)
	off := int64(0)
	for piece := len(buf); piece >= 4096; {
		n, err := unix.Pwrite(fd, buf[:piece], off)
		if err == nil {
			err = unix.Fsync(fd)
		}
		switch {
		case errors.Is(err, unix.ENOSPC):
			piece /= 2
		case err != nil:
			t.Fatalf("filling the disk: %v", err)
		default:
			off += int64(n)
		}
	}
}
