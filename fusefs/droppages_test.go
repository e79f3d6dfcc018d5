package fusefs

import (
	"bytes"
	"errors"
	"fmt"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"
)

// A drop of cached pages waits for a READ that holds one of them locked,
// and that READ must find a reader: here the only one (MaxReaders 1) is
// serving an OPEN whose atime is due, whose drop of the file's pages
// (atimeCache) waits for a READ queued just before it. Before dropPages
// started a reader for it, the open and the read waited for good. In the
// second case another OPEN of the file is queued before the READ: the
// reader started for the drop takes it, and it waits for the file's
// dropLock; that wait must start a reader too (a third review: it only
// raised the bound, and the READ was never read).
func TestDropFindsReader(t *testing.T) {
	for _, second := range []bool{false, true} {
		t.Run(fmt.Sprintf("secondOpen=%v", second), func(t *testing.T) { dropFindsReader(t, second) })
	}
}

func dropFindsReader(t *testing.T, secondOpen bool) {
	srv, mnt := mountHere(t, Options{Readers: 1, MaxReaders: 1})
	if srv.connNumber() == "" {
		t.Skip("the connection's number is unknown: a hang could not be ended")
	}
	const size = 64 << 10
	p := filepath.Join(mnt, "f")
	data := bytes.Repeat([]byte{'d'}, size)
	writeFile(t, p, unix.O_RDWR, data)
	// O_NOATIME: this open drops nothing (atimeCache), so it starts no
	// reader; the one reader stays alone.
	rd, err := unix.Open(p, unix.O_RDONLY|unix.O_NOATIME|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rd)
	// atime before mtime: relatime has the next open drop the pages.
	now := time.Now()
	if err := unix.UtimesNano(p, []unix.Timespec{unix.NsecToTimespec(now.Add(-time.Hour).UnixNano()), unix.NsecToTimespec(now.UnixNano())}); err != nil {
		t.Fatal(err)
	}
	if err := unix.Fadvise(rd, 0, 0, unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}

	readDone := make(chan error, 1)
	secondDone := make(chan error, 1)
	var hookErr atomic.Value
	var once atomic.Bool
	h := func(req fuse.Request) {
		if _, ok := req.(*fuse.OpenRequest); !ok || !once.CompareAndSwap(false, true) {
			return
		}
		queued := 1 // this OPEN, in service
		if secondOpen {
			go func() {
				fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err == nil {
					unix.Close(fd)
				}
				secondDone <- err
			}()
			queued++
			if !waitRequests(srv, queued, 10*time.Second) {
				hookErr.Store(errors.New("the second OPEN was not seen waiting"))
				return
			}
		}
		// A read of the file's pages, queued while the only reader is
		// here: its pages are locked until it is answered.
		go func() {
			b := make([]byte, size)
			n, err := unix.Pread(rd, b, 0)
			if err == nil && (n != size || !bytes.Equal(b, data)) {
				err = unix.EIO
			}
			readDone <- err
		}()
		if !waitRequests(srv, queued+1, 10*time.Second) {
			hookErr.Store(errors.New("the READ was not seen waiting"))
			return
		}
		srv.mu.Lock()
		if srv.readers != 1 || srv.idle != 0 {
			hookErr.Store(fmt.Errorf("%d readers, %d waiting: the READ could be served before the drop", srv.readers, srv.idle))
		}
		srv.mu.Unlock()
	}
	testHookServe.Store(&h)
	t.Cleanup(func() { testHookServe.Store(nil) })

	opened := make(chan error, 1)
	go func() {
		fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err == nil {
			unix.Close(fd)
		}
		opened <- err
	}()
	select {
	case err := <-opened:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		// The hang: end it, so that the test ends.
		if err := srv.Abort(); err != nil {
			t.Error(err)
		}
		for _, c := range []chan error{opened, readDone, secondDone} {
			select {
			case <-c:
			case <-time.After(10 * time.Second):
			}
		}
		t.Fatal("the open whose drop waited for a queued READ did not return in 20 s")
	}
	testHookServe.Store(nil)
	if !once.Load() {
		t.Fatal("the hook saw no OPEN")
	}
	if err, _ := hookErr.Load().(error); err != nil {
		t.Fatal(err)
	}
	if secondOpen {
		select {
		case err := <-secondDone:
			if err != nil {
				t.Fatalf("the second open: %v", err)
			}
		case <-time.After(10 * time.Second):
			t.Fatal("the second open did not return")
		}
	}
	select {
	case err := <-readDone:
		if err != nil {
			t.Fatalf("the read: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the read did not return")
	}
}
