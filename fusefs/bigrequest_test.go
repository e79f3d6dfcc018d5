package fusefs_test

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"sync"
	"testing"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/fusefs"
	"conquest/internal/mounttest"
)

// requestSizes records the largest WRITE and file READ the daemon serves.
type requestSizes struct {
	mu          sync.Mutex
	write, read int
}

func (rs *requestSizes) hook(req fuse.Request) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	switch r := req.(type) {
	case *fuse.WriteRequest:
		rs.write = max(rs.write, len(r.Data))
	case *fuse.ReadRequest:
		if !r.Dir {
			rs.read = max(rs.read, r.Size)
		}
	}
}

func (rs *requestSizes) take() (write, read int) {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	write, read = rs.write, rs.read
	rs.write, rs.read = 0, 0
	return write, read
}

// The kernel sends a 1 MiB write(2), and a 1 MiB read, as one request of
// 1 MiB (max_pages, negotiated by the patched bazil.org/fuse in
// third_party/bazil-fuse), to a file in the arena and to one on the disk,
// and the data comes back intact through the page cache and past it. With
// bazil's upstream INIT the largest request is 128 KiB.
func TestOneMiBRequests(t *testing.T) {
	const mib = 1 << 20
	if !fusefs.KernelAtLeast(4, 20) {
		t.Skip("the kernel has no max_pages (Linux before 4.20)")
	}
	m := mounttest.Mount(t)
	if !m.Server.MaxPagesNegotiated() {
		t.Error("max_pages not negotiated at INIT")
	}
	var rs requestSizes
	t.Cleanup(fusefs.SetServeHook(rs.hook))
	files := []struct {
		name string
		size int
	}{
		{"arena", 1000000 - 1}, // below the 1 MB threshold: one WRITE
		{"disk", 4 * mib},      // on the disk: four WRITEs of 1 MiB
	}
	contents := map[string][]byte{}
	rng := rand.New(rand.NewPCG(1, 2))
	for _, c := range files {
		data := make([]byte, c.size)
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		contents[c.name] = data
		p := m.Path(c.name)
		fd, err := unix.Open(p, unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		for off := 0; off < len(data); off += mib {
			end := min(off+mib, len(data))
			if n, err := unix.Pwrite(fd, data[off:end], int64(off)); err != nil || n != end-off {
				unix.Close(fd)
				t.Fatalf("%s: pwrite at %d: %d, %v", c.name, off, n, err)
			}
		}
		err = unix.Fsync(fd)
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		if w, _ := rs.take(); w != min(c.size, mib) {
			t.Errorf("%s: largest WRITE %d bytes, want %d (one request per write(2))", c.name, w, min(c.size, mib))
		}

		// Past the page cache: an O_DIRECT read of 1 MiB is one READ.
		got, err := readChunks(p, unix.O_DIRECT, mib)
		if err != nil {
			t.Fatalf("%s: direct reads: %v", c.name, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: direct reads returned %d bytes, not the %d written", c.name, len(got), len(data))
		}
		if _, r := rs.take(); r != mib {
			t.Errorf("%s: largest direct READ %d bytes, want %d", c.name, r, mib)
		}
	}

	// Through the page cache, after a remount (nothing cached): readahead
	// asks for up to 1 MiB at once, and every byte is right.
	m.Remount()
	rs.take()
	for _, c := range files {
		data := contents[c.name]
		got, err := readChunks(m.Path(c.name), 0, mib)
		if err != nil {
			t.Fatalf("%s: reads after remount: %v", c.name, err)
		}
		if !bytes.Equal(got, data) {
			t.Errorf("%s: reads after remount returned %d bytes, not the %d written", c.name, len(got), len(data))
		}
	}
	if _, r := rs.take(); r <= 128<<10 {
		t.Errorf("largest READ through the page cache %d bytes, want more than 128 KiB", r)
	}
}

// readChunks reads the file at p to its end in reads of chunk bytes, each
// of which must return chunk bytes or what is left: a short read before the
// end is an error.
func readChunks(p string, flags, chunk int) ([]byte, error) {
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|flags, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var st unix.Stat_t
	if err := unix.Fstat(fd, &st); err != nil {
		return nil, err
	}
	out := make([]byte, st.Size+int64(chunk))
	n := 0
	for {
		k, err := unix.Pread(fd, out[n:n+chunk], int64(n))
		if err != nil {
			return nil, fmt.Errorf("pread at %d: %w", n, err)
		}
		if k == 0 {
			return out[:n], nil
		}
		if want := min(chunk, int(st.Size)-n); k != want {
			return nil, fmt.Errorf("pread of %d bytes at %d returned %d, want %d", chunk, n, k, want)
		}
		n += k
	}
}
