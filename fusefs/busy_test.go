package fusefs

import (
	"fmt"
	"time"

	"bazil.org/fuse"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"

	"golang.org/x/sys/unix"
)

// Requests are busy (Options.OnBusy, Server.Busy) only when several
// callers wait on the daemon at once: hardly any from one caller alone,
// some from sixteen goroutines creating and removing files side by side;
// OnBusy is called once for each. Each CREATE is served 1 ms late, so
// that the sixteen's requests meet in the daemon.
func TestBusyCallers(t *testing.T) {
	var calls atomic.Int64
	s, mnt := mountHere(t, Options{OnBusy: func() { calls.Add(1) }})
	h := func(req fuse.Request) {
		if _, ok := req.(*fuse.CreateRequest); ok {
			time.Sleep(time.Millisecond)
		}
	}
	testHookServe.Store(&h)
	t.Cleanup(func() { testHookServe.Store(nil) })
	churn := func(w, n int) {
		for i := 0; i < n; i++ {
			p := filepath.Join(mnt, fmt.Sprintf("w%d", w), fmt.Sprint(i))
			fd, err := unix.Open(p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Error(err)
				return
			}
			unix.Write(fd, []byte("x"))
			unix.Close(fd)
			if err := unix.Unlink(p); err != nil {
				t.Error(err)
				return
			}
		}
	}
	for w := 0; w <= 16; w++ {
		// A directory each: the kernel serves one CREATE at a time in
		// a directory.
		if err := unix.Mkdir(filepath.Join(mnt, fmt.Sprintf("w%d", w)), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	total := func() (n uint64) {
		for _, k := range s.Stats() {
			n += k
		}
		return n
	}
	before := total()
	churn(0, 500)
	// A handler counts its request out only after replying, so on a
	// loaded machine (the suite under -race beside other packages) the
	// caller's next requests can find a few that replied but are still
	// counted: a review saw 1 to 17 of about 2,500 requests in 2 of 25
	// runs. A crowd makes a third of all its requests busy (RELEASEs and
	// FORGETs, which nobody waits for, are counted in all).
	if n, all := s.Busy(), total()-before; n*50 > int64(all) {
		t.Errorf("one caller alone made %d busy requests of %d", n, all)
	}
	alone := s.Busy()
	before = total()
	var wg sync.WaitGroup
	for w := 1; w <= 16; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			churn(w, 50)
		}()
	}
	wg.Wait()
	if n, all := s.Busy()-alone, total()-before; n*10 < int64(all) {
		t.Errorf("sixteen callers at once made %d busy requests of %d, want a tenth or more", n, all)
	}
	if c, n := calls.Load(), s.Busy(); c != n {
		t.Errorf("OnBusy called %d times for %d busy requests", c, n)
	}
	t.Logf("busy requests: %d", s.Busy())
}

// With the writeback cache the kernel writes a single writer's dirty pages
// back in many WRITEs at once, which nobody waits for: they are not busy
// requests (before, one writer made hundreds, a code review found).
func TestBusyWritebackAlone(t *testing.T) {
	s, mnt := mountHere(t, Options{WritebackCache: true})
	fd, err := unix.Open(filepath.Join(mnt, "f"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, 1<<20)
	for i := range 16 {
		buf[0] = byte(i)
		if _, err := unix.Write(fd, buf); err != nil {
			t.Fatal(err)
		}
	}
	if err := unix.Fsync(fd); err != nil {
		t.Fatal(err)
	}
	if w := s.Stats()["WRITE"]; w < 16 {
		t.Fatalf("only %d WRITEs reached the daemon", w)
	}
	if n := s.Busy(); n != 0 {
		t.Errorf("one writer made %d busy requests through the writeback cache", n)
	}
}
