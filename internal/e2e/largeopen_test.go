package e2e

import (
	"bytes"
	"math/rand"
	"os"
	"sync"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/fusefs"
	"conquest/internal/mounttest"
)

// TestLargeFileOpenWhileWriting: while one thread rewrites random 8 KiB
// pieces of a 2 MiB file (on the disk path), opening and closing it for
// each write, three others open it and read it whole, again and again.
// Every open of a file whose atime is due invalidates its first page from
// inside the OPEN (fusefs atimeCache) while WRITEs and READs of the same
// file are in flight: nothing may hang, every read sees the whole file, and
// at the end the file holds exactly what was written, also after a
// remount; the file system checks clean. Both page-cache modes.
func TestLargeFileOpenWhileWriting(t *testing.T) {
	cacheModes(t, func(t *testing.T, wb bool) {
		m := mount(t, mounttest.WithFuseOptions(fusefs.Options{AllowOther: true, WritebackCache: wb}))
		p := m.Path("big")
		const size = 2 << 20
		r := rand.New(rand.NewSource(seed(t)))
		model := make([]byte, size)
		r.Read(model)
		if err := os.WriteFile(p, model, 0o644); err != nil {
			t.Fatal(err)
		}
		dur := 2 * time.Second
		if testing.Short() {
			dur = 500 * time.Millisecond
		}
		stop := time.Now().Add(dur)
		var wg sync.WaitGroup
		errs := make(chan error, 8)
		wg.Add(1)
		go func() { // the writer: the only one to change model
			defer wg.Done()
			piece := make([]byte, 8<<10)
			for time.Now().Before(stop) {
				off := r.Intn(size - len(piece))
				r.Read(piece)
				fd, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					errs <- err
					return
				}
				n, err := unix.Pwrite(fd, piece, int64(off))
				unix.Close(fd)
				if err != nil || n != len(piece) {
					errs <- err
					return
				}
				copy(model[off:], piece)
			}
		}()
		reads := make([]int, 3)
		for i := range reads {
			wg.Add(1)
			go func() {
				defer wg.Done()
				buf := make([]byte, size+1)
				for time.Now().Before(stop) {
					fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
					if err != nil {
						errs <- err
						return
					}
					got := 0
					for {
						n, err := unix.Read(fd, buf[got:])
						if err != nil {
							unix.Close(fd)
							errs <- err
							return
						}
						if n == 0 {
							break
						}
						got += n
					}
					unix.Close(fd)
					if got != size {
						t.Errorf("reader %d read %d bytes of a %d-byte file", i, got, size)
						return
					}
					reads[i]++
				}
			}()
		}
		waitAll(t, &wg, dur+60*time.Second, "readers or the writer")
		close(errs)
		for err := range errs {
			t.Errorf("I/O error: %v", err)
		}
		for i, n := range reads {
			if n == 0 {
				t.Errorf("reader %d never finished a read", i)
			}
		}
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, model) {
			t.Fatalf("after the run the file differs from what was written (%v)", err)
		}
		check(t, m, "after the run")
		remount(t, m)
		if got, err := os.ReadFile(p); err != nil || !bytes.Equal(got, model) {
			t.Fatalf("after a remount the file differs from what was written (%v)", err)
		}
	})
}
