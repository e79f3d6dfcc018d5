package fusefs_test

import (
	"encoding/binary"
	"math/rand/v2"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/fusefs"
	"conquest/internal/mounttest"
)

// TestNoStalePagesAfterAtimeOpen: a small file rewritten in place while
// readers keep opening it (each open's read due to update atime, relatime)
// never reads back older than the last write that returned. Opens that
// dropped a small file's whole page cache for atime raced the writer and
// left stale pages in the kernel's cache (found by an outside review: 46
// stale reads in 30 s with its reproducer; 0 since only the first page is
// dropped, as for larger files).
func TestNoStalePagesAfterAtimeOpen(t *testing.T) {
	m := mounttest.Mount(t, mounttest.WithFuseOptions(fusefs.Options{}))
	const size = 100 << 10
	p := m.Path("f")
	fd, err := unix.Open(p, unix.O_RDWR|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	buf := make([]byte, size)
	if _, err := unix.Pwrite(fd, buf, 0); err != nil {
		t.Fatal(err)
	}
	var published atomic.Uint32
	var stale, reads atomic.Int64
	deadline := time.Now().Add(8 * time.Second)
	var wg sync.WaitGroup
	for r := range 2 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			rng := rand.New(rand.NewPCG(uint64(r), 1))
			b := make([]byte, size)
			for time.Now().Before(deadline) {
				lo := published.Load()
				pg := rng.IntN(25)
				n := min(4096*(1+rng.IntN(16)), size-pg*4096)
				f, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Error(err)
					return
				}
				got, err := unix.Pread(f, b[:n], int64(pg*4096))
				unix.Close(f)
				if err != nil {
					t.Error(err)
					return
				}
				reads.Add(1)
				for i := 0; i+4 <= got; i += 4 {
					if binary.LittleEndian.Uint32(b[i:]) < lo {
						stale.Add(1)
						break
					}
				}
			}
		}()
	}
	rng := rand.New(rand.NewPCG(9, 9))
	for g := uint32(1); time.Now().Before(deadline); g++ {
		for i := 0; i < size; i += 4 {
			binary.LittleEndian.PutUint32(buf[i:], g)
		}
		if _, err := unix.Pwrite(fd, buf, 0); err != nil {
			t.Fatal(err)
		}
		published.Store(g)
		time.Sleep(time.Duration(rng.IntN(3000)) * time.Microsecond)
	}
	wg.Wait()
	if n := stale.Load(); n > 0 {
		t.Errorf("%d of %d reads returned data older than the last write that had returned", n, reads.Load())
	}
	t.Logf("%d reads", reads.Load())
}

// TestAtimeOpenSparesWrittenFile: an open whose read would update atime
// drops the file's first cached page (atimeCache), except while another
// handle has the file open for writing. Without the writeback cache the
// kernel copies a write into its cached pages before the WRITE reaches the
// daemon, and a page dropped in between is read back from before the
// write and kept after it returns: the stale read that
// TestNoStalePagesAfterAtimeOpen caught once in a CI run. Checked here by
// the READs the reads cost: none while a writer has the file open (the
// page stays cached), one or more once the writer has closed it (and atime
// is then updated).
func TestAtimeOpenSparesWrittenFile(t *testing.T) {
	m := mounttest.Mount(t, mounttest.WithFuseOptions(fusefs.Options{}))
	p := m.Path("f")
	data := make([]byte, 64<<10)
	for i := range data {
		data[i] = byte(i * 5)
	}
	if err := os.WriteFile(p, data, 0o644); err != nil {
		t.Fatal(err)
	}
	readPage := func() {
		t.Helper()
		f, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Close(f)
		b := make([]byte, 4096)
		if n, err := unix.Pread(f, b, 0); err != nil || n != len(b) || b[1] != data[1] {
			t.Fatalf("reading the first page: %d, %v", n, err)
		}
	}
	readPage() // atime caught up with mtime
	time.Sleep(10 * time.Millisecond)
	w, err := unix.Open(p, unix.O_RDWR|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	data[1] = 0xAB
	if _, err := unix.Pwrite(w, data[:4096], 0); err != nil {
		unix.Close(w)
		t.Fatal(err)
	}
	var st unix.Stat_t
	if err := unix.Stat(p, &st); err != nil || st.Atim.Nano() > st.Mtim.Nano() {
		unix.Close(w)
		t.Fatalf("after the write: atime %v after mtime %v (%v): no read would be due", st.Atim, st.Mtim, err)
	}
	reads := m.Server.Stats()["READ"]
	readPage()
	if n := m.Server.Stats()["READ"] - reads; n != 0 {
		t.Errorf("a read with atime due while a writer has the file open sent %d READs: its open dropped a cached page", n)
	}
	if err := unix.Close(w); err != nil {
		t.Fatal(err)
	}
	// The kernel sends the RELEASE after close returns: until the daemon
	// has it, the file still counts as open for writing.
	for deadline := time.Now().Add(10 * time.Second); m.FS.OpenForWrite(conquest.Ino(st.Ino), 0); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer's RELEASE did not arrive in 10 s")
		}
	}
	reads = m.Server.Stats()["READ"]
	readPage()
	if n := m.Server.Stats()["READ"] - reads; n == 0 {
		t.Errorf("a read with atime due and no writer sent no READ: atime cannot be updated")
	}
	if err := unix.Stat(p, &st); err != nil || st.Atim.Nano() < st.Mtim.Nano() {
		t.Errorf("after the read: atime %v before mtime %v (%v)", st.Atim, st.Mtim, err)
	}
}
