package main

import (
	"bytes"
	"os"
	"path/filepath"
	"testing"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
)

// TestNullFUSE mounts the empty file system, writes to its file as the
// benchmark does (8 KiB writes and an fsync), and checks what it promises:
// every write is taken whole, the size covers them, reads give zeros, and
// a truncate sets the size. Then it unmounts, and serving ends.
func TestNullFUSE(t *testing.T) {
	if err := mounttest.Available(); err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	ready := make(chan struct{})
	done := make(chan error, 1)
	go func() { done <- run(dir, func() { close(ready) }) }()
	select {
	case <-ready:
	case err := <-done:
		t.Fatalf("mount: %v", err)
	case <-time.After(30 * time.Second):
		t.Fatal("mount: no answer in 30 s")
	}
	unmounted := false
	fd := -1
	t.Cleanup(func() {
		if fd >= 0 {
			unix.Close(fd)
		}
		if !unmounted && fuse.Unmount(dir) != nil {
			unix.Unmount(dir, unix.MNT_DETACH)
		}
	})
	// unix calls, not os.File: the test is the daemon's own process, and
	// the os package's netpoller registration of a regular file would
	// send POLL (see fusefs/poll.go).
	path := filepath.Join(dir, "f")
	var err error
	fd, err = unix.Open(path, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	buf := bytes.Repeat([]byte{0xab}, 8192)
	for i := 0; i < 100; i++ {
		if n, err := unix.Pwrite(fd, buf, int64(i)*8192); err != nil || n != len(buf) {
			t.Fatalf("write %d: %d bytes, %v", i, n, err)
		}
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatalf("fsync: %v", err)
	}
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil || st.Size != 100*8192 {
		t.Fatalf("size %d (%v), want %d", st.Size, err, 100*8192)
	}
	// The kernel keeps what was written in its page cache; past the end
	// of what it caches, the file system's zeros.
	if err := unix.Ftruncate(fd, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := make([]byte, 8192)
	if n, err := unix.Pread(fd, got, 1<<20-8192); err != nil || n != 8192 || !bytes.Equal(got, make([]byte, 8192)) {
		t.Fatalf("read past the written data: %d bytes, %v, zeros %v", n, err, bytes.Equal(got[:n], make([]byte, n)))
	}
	if n, err := unix.Pread(fd, got, 1<<20); err != nil || n != 0 {
		t.Fatalf("read at the end: %d bytes, %v", n, err)
	}
	if err := unix.Ftruncate(fd, 0); err != nil {
		t.Fatal(err)
	}
	err = unix.Close(fd)
	fd = -1
	if err != nil {
		t.Fatal(err)
	}
	if err := unix.Stat(path, &st); err != nil || st.Size != 0 {
		t.Fatalf("after truncate: size %d (%v)", st.Size, err)
	}
	if _, err := os.Lstat(filepath.Join(dir, "g")); !os.IsNotExist(err) {
		t.Fatalf("lstat of a name that is not there: %v", err)
	}
	if err := fuse.Unmount(dir); err != nil {
		t.Fatal(err)
	}
	unmounted = true
	select {
	case err := <-done:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("serving did not end after the unmount")
	}
}
