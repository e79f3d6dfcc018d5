package diskstore

import (
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"

	"conquest/internal/reaper"
	"conquest/pram"
)

func testDeviceRoundTrip(t *testing.T, dev Device) {
	t.Helper()
	// Aligned, unaligned and straddling transfers.
	for _, c := range []struct {
		off int64
		n   int
	}{{0, 4096}, {4096, 1 << 20}, {100, 10}, {4090, 20}, {12345, 3 << 20}, {dev.Size() - 7, 7}} {
		data := pattern(uint32(c.off), c.off, c.n)
		if n, err := dev.WriteAt(data, c.off); err != nil || n != c.n {
			t.Fatalf("write [%d, +%d): %d, %v", c.off, c.n, n, err)
		}
		got := make([]byte, c.n)
		if n, err := dev.ReadAt(got, c.off); err != nil || n != c.n || !bytes.Equal(got, data) {
			t.Fatalf("read [%d, +%d): %d, %v, equal %v", c.off, c.n, n, err, bytes.Equal(got, data))
		}
	}
	// Aligned buffer, aligned offset.
	b := AlignedBuffer(64 << 10)
	copy(b, pattern(5, 0, len(b)))
	if _, err := dev.WriteAt(b, 1<<20); err != nil {
		t.Fatal(err)
	}
	got := AlignedBuffer(64 << 10)
	if _, err := dev.ReadAt(got, 1<<20); err != nil || !bytes.Equal(got, b) {
		t.Fatalf("aligned read: %v", err)
	}
	// Beyond the end: an error, not a silent short read.
	if _, err := dev.ReadAt(make([]byte, 8192), dev.Size()-4096); err == nil {
		t.Fatal("read past the end succeeded")
	}
	if err := dev.Sync(); err != nil {
		t.Fatal(err)
	}
}

func TestFileDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	if err := CreateFile(path, 8<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := OpenDevice(path, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if dev.Size() != 8<<20 || dev.(*fileDevice).direct {
		t.Fatalf("size %d, direct %v", dev.Size(), dev.(*fileDevice).direct)
	}
	testDeviceRoundTrip(t, dev)
	dev.Close()
	if _, err := OpenDevice(t.TempDir(), DeviceOptions{}); err == nil {
		t.Fatal("opened a directory")
	}
}

func TestDirectDevice(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	if err := CreateFile(path, 8<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := OpenDevice(path, DeviceOptions{Direct: DirectOn})
	if errors.Is(err, syscall.EINVAL) {
		t.Skip("file system refuses O_DIRECT")
	}
	if err != nil {
		t.Fatal(err)
	}
	defer dev.Close()
	if !dev.(*fileDevice).direct {
		t.Fatal("not direct")
	}
	testDeviceRoundTrip(t, dev)
	// The whole store on it.
	e := newEnv(t, envOpts{dev: dev})
	seg := e.newFile(1)
	data := pattern(1, 3, 3<<20+17)
	e.must(func(tx *pram.Tx) error { return e.s.WriteThrough(tx, seg, 3, data) })
	if got, err := e.read(seg, 3, len(data)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("store on O_DIRECT: %v", err)
	}
	e.restart()
	if got, err := e.read(seg, 3, len(data)); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("store on O_DIRECT after restart: %v", err)
	}
}

func TestMemAndCrashDevice(t *testing.T) {
	testDeviceRoundTrip(t, NewMemDevice(8<<20))
	testDeviceRoundTrip(t, NewCrashDevice(8<<20))
	m := NewMemDevice(8192)
	m.Close()
	if _, err := m.ReadAt(make([]byte, 1), 0); !errors.Is(err, ErrClosed) {
		t.Fatalf("read after close: %v", err)
	}
}

func TestCrashDeviceSemantics(t *testing.T) {
	c := NewCrashDevice(1 << 20)
	a, b := bytes.Repeat([]byte{1}, 4096), bytes.Repeat([]byte{2}, 4096)
	c.WriteAt(a, 0)
	c.Sync()
	c.WriteAt(b, 0)
	c.WriteAt(b, 8192)
	got := make([]byte, 4096)
	c.ReadAt(got, 0)
	if !bytes.Equal(got, b) {
		t.Fatal("unsynced write not visible before the crash")
	}
	lost := c.Crash(CrashLoseAll, 1)
	lost.ReadAt(got, 0)
	if !bytes.Equal(got, a) {
		t.Fatal("crash kept an unsynced write")
	}
	lost.ReadAt(got, 8192)
	if !bytes.Equal(got, make([]byte, 4096)) {
		t.Fatal("crash kept an unsynced write")
	}
	// Random crashes keep some subsets; over many seeds, every combination.
	seen := map[[2]byte]bool{}
	for seed := uint64(0); seed < 64; seed++ {
		r := c.Crash(CrashRandom, seed)
		x, y := make([]byte, 1), make([]byte, 1)
		r.ReadAt(x, 0)
		r.ReadAt(y, 8192)
		seen[[2]byte{x[0], y[0]}] = true
	}
	if len(seen) != 4 {
		t.Fatalf("random crashes produced %v", seen)
	}
	// Torn writes cut at sector boundaries.
	torn := false
	for seed := uint64(0); seed < 64 && !torn; seed++ {
		r := c.Crash(CrashTorn, seed)
		r.ReadAt(got, 0)
		if got[0] == 2 && got[4095] == 1 {
			torn = true
			i := bytes.IndexByte(got, 1)
			if i%512 != 0 {
				t.Fatalf("torn at %d, not a sector boundary", i)
			}
		}
	}
	if !torn {
		t.Fatal("no torn write in 64 crashes")
	}
	// A dropped write is acknowledged and lost for good.
	c.SetDropFilter(func(off int64, n int) bool { return off == 0 })
	if n, err := c.WriteAt(a, 0); n != 4096 || err != nil {
		t.Fatal(n, err)
	}
	c.Sync()
	c.ReadAt(got, 0)
	if !bytes.Equal(got, b) {
		t.Fatal("dropped write stored")
	}
	if _, _, dropped, pending := c.Stats(); dropped != 1 || pending != 0 {
		t.Fatalf("dropped %d pending %d", dropped, pending)
	}
}

func TestFaultInjectors(t *testing.T) {
	f := NewFaultDevice(NewMemDevice(1<<20), OnNth(OpWrite, 2, FaultEIO))
	buf := make([]byte, 4096)
	if _, err := f.WriteAt(buf, 0); err != nil {
		t.Fatal(err)
	}
	if _, err := f.ReadAt(buf, 0); err != nil {
		t.Fatal(err) // reads do not count
	}
	if _, err := f.WriteAt(buf, 0); !errors.Is(err, syscall.EIO) {
		t.Fatalf("2nd write: %v", err)
	}
	if _, err := f.WriteAt(buf, 0); err != nil {
		t.Fatalf("3rd write: %v", err)
	}
	f.SetInjector(FromNth(OpSync, 2, FaultEIO))
	if f.Sync() != nil || f.Sync() == nil || f.Sync() == nil {
		t.Fatal("FromNth")
	}
	f.SetInjector(InRange(OpWrite, 8192, 12288, FaultNoSpace))
	if _, err := f.WriteAt(buf, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := f.WriteAt(buf, 6000); !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("write into the full range: %v", err)
	}
	mem := NewMemDevice(1 << 20)
	f = NewFaultDevice(mem, Any(OnNth(OpWrite, 1, FaultShort), OnNth(OpRead, 1, FaultDrop)))
	data := bytes.Repeat([]byte{7}, 4096)
	if n, err := f.WriteAt(data, 0); !errors.Is(err, io.ErrShortWrite) || n != 2048 {
		t.Fatalf("short write: %d, %v", n, err)
	}
	if mem.Bytes()[2047] != 7 || mem.Bytes()[2048] != 0 {
		t.Fatal("short write stored the wrong part")
	}
	f.SetInjector(OnNth(OpWrite, 1, FaultDrop))
	if n, err := f.WriteAt(bytes.Repeat([]byte{9}, 10), 100000); n != 10 || err != nil || mem.Bytes()[100000] != 0 {
		t.Fatal("dropped write")
	}
	f.SetInjector(WithProbability(OpRead, 1, 1, FaultCorrupt))
	if _, err := f.ReadAt(buf, 0); err != nil || bytes.Equal(buf, mem.Bytes()[:4096]) {
		t.Fatal("corrupt read returned the right bytes")
	}
	if f.Injected() != 3 { // since the second NewFaultDevice
		t.Fatalf("injected %d", f.Injected())
	}
}

// directImage opens a new 64 MiB image file as a device (closed at the
// end of the test), skipping the test where the file system refuses
// O_DIRECT.
func directImage(t *testing.T) (string, Device) {
	t.Helper()
	dir := t.TempDir()
	if probe, err := os.OpenFile(filepath.Join(dir, "probe"), os.O_CREATE|os.O_RDWR|syscall.O_DIRECT, 0o600); err != nil {
		t.Skipf("%s refuses O_DIRECT: %v", dir, err)
	} else {
		probe.Close()
	}
	path := filepath.Join(dir, "disk")
	if err := CreateFile(path, 64<<20); err != nil {
		t.Fatal(err)
	}
	dev, err := OpenDevice(path, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return path, dev
}

// An image file on a file system that allows O_DIRECT reads large aligned
// requests directly; they see every write made through the page cache,
// synced or not, and the store works on it (prefetching with direct reads).
func TestImageFileDirectReads(t *testing.T) {
	_, dev := directImage(t)
	fd := dev.(*fileDevice)
	if fd.direct || fd.dr == nil || fd.pageCached() {
		t.Fatalf("direct %v, direct reader %v, pageCached %v", fd.direct, fd.dr != nil, fd.pageCached())
	}
	for round := range 3 {
		want := pattern(uint32(round), 0, 1<<20)
		if _, err := dev.WriteAt(want, 4<<20); err != nil { // through the page cache, not synced
			t.Fatal(err)
		}
		got := AlignedBuffer(1 << 20)
		if _, err := dev.ReadAt(got, 4<<20); err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("round %d: a direct read does not see the buffered write before it", round)
		}
	}
	e := newEnv(t, envOpts{dev: dev})
	if !e.s.prefetch {
		t.Fatal("no prefetching on an image file with direct reads")
	}
	seg := e.newFile(1)
	data := pattern(2, 0, 12<<20)
	e.must(func(tx *pram.Tx) error { return e.s.Write(tx, seg, 0, data) })
	ra := e.s.NewReadahead()
	defer ra.Close()
	for off := 0; off < len(data); off += 128 << 10 {
		p := make([]byte, 128<<10)
		if _, err := e.s.ReadAt(seg, p, int64(off), ra); err != nil || !bytes.Equal(p, data[off:off+len(p)]) {
			t.Fatalf("read at %d: %v", off, err)
		}
	}
	if st := ra.Stats(); st.Prefetches == 0 || st.Hits == 0 {
		t.Fatalf("no readahead: %+v", st)
	}
}

// TestImagePreallocated: blocks the store allocates to a file are allocated
// in a sparse image at once (fallocate), the whole extent and not only what
// was written, so that writes into them do not allocate; freed blocks stay
// allocated in the image. On tmpfs nothing is preallocated.
func TestImagePreallocated(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	if err := CreateFile(path, 64<<20); err != nil {
		t.Fatal(err)
	}
	var fs syscall.Statfs_t
	if err := syscall.Statfs(path, &fs); err != nil {
		t.Fatal(err)
	}
	dev, err := OpenDevice(path, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	allocated := func() int64 {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512
	}
	before := allocated()
	e := newEnv(t, envOpts{blockSize: 16 << 10, dev: dev})
	seg := e.newFile(1)
	if err := e.write(seg, 0, pattern(1, 0, 32<<10)); err != nil {
		t.Fatal(err)
	}
	got := allocated() - before
	if fs.Type == 0x01021994 { // tmpfs
		if got > 64<<10 {
			t.Fatalf("tmpfs image: %d bytes allocated for a 32 KiB write", got)
		}
		t.Skip("image on tmpfs: not preallocated, as intended")
	}
	if got < 1<<20 {
		t.Fatalf("%d bytes of the image allocated after a 32 KiB write into a new file (its first extent is 1 MiB)", got)
	}
	if b, err := e.read(seg, 0, 32<<10); err != nil || !bytes.Equal(b, pattern(1, 0, 32<<10)) {
		t.Fatalf("read back: %v", err)
	}
	e.check(map[pram.Off]int64{seg: 32 << 10})
}

// newImageDevice creates a sparse image file of size bytes at path and
// opens it; the device is closed when the test ends.
func newImageDevice(t *testing.T, path string, size int64) *fileDevice {
	t.Helper()
	if err := CreateFile(path, size); err != nil {
		t.Fatal(err)
	}
	dev, err := OpenDevice(path, DeviceOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { dev.Close() })
	return dev.(*fileDevice)
}

// TestPreallocateOnce: preallocate allocates the range and then the whole 1 MiB
// chunks, never past the image's end, and calls fallocate only for chunks
// it has not allocated before (random rewrites allocate a block at a time).
func TestPreallocateOnce(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	const size = 8<<20 + 16<<10 // the last chunk is partial
	d := newImageDevice(t, path, size)
	if !d.prealloc.Load() {
		t.Skip("image on tmpfs: not preallocated, as intended")
	}
	stat := func() (blocks, size int64) {
		var st syscall.Stat_t
		if err := syscall.Stat(path, &st); err != nil {
			t.Fatal(err)
		}
		return st.Blocks * 512, st.Size
	}
	calls := func(want int64, what string) {
		t.Helper()
		if got := d.fallocs.Load(); got != want {
			t.Fatalf("%s: %d fallocate calls, want %d", what, got, want)
		}
	}
	b0, _ := stat()
	must := func(off, n int64) {
		t.Helper()
		if err := d.preallocate(off, n); err != nil {
			t.Fatal(err)
		}
	}
	must(5<<20+16<<10, 16<<10)
	calls(2, "first block (the block, then its chunk)")
	if b, _ := stat(); b-b0 < 1<<20 {
		t.Fatalf("%d bytes allocated, want the whole 1 MiB chunk", b-b0)
	}
	must(5<<20+512<<10, 64<<10)
	calls(2, "a block of the same chunk")
	must(5<<20+1000<<10, 100<<10) // chunk 5 (done) and chunk 6
	calls(4, "a range into the next chunk")
	if b, _ := stat(); b-b0 < 2<<20 || b-b0 > 2<<20+64<<10 {
		t.Fatalf("%d bytes allocated after chunks 5 and 6, want 2 MiB", b-b0)
	}
	must(size-16<<10, 16<<10) // the partial last chunk, all of it
	calls(5, "the last block")
	if _, sz := stat(); sz != size {
		t.Fatalf("the image grew to %d bytes, want %d", sz, size)
	}
	must(size-16<<10, 16<<10)
	calls(5, "the last block again")
}

// TestPreallocateFullHost: on a host file system without room for a whole
// chunk, preallocate still allocates the range the store asked for (and
// remembers no chunk, and allocates only ranges from then on), and a range
// that does not fit either is ENOSPC.
func TestPreallocateFullHost(t *testing.T) {
	mkfs, err := exec.LookPath("mkfs.ext4")
	if err != nil || os.Geteuid() != 0 {
		t.Skip("needs root and mkfs.ext4 (a small ext4 on a loop device)")
	}
	dir := t.TempDir()
	img, mnt := filepath.Join(dir, "host.img"), filepath.Join(dir, "host")
	if err := CreateFile(img, 16<<20); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(mkfs, "-q", "-F", "-m", "0", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v %s", err, out)
	}
	if err := os.Mkdir(mnt, 0o700); err != nil {
		t.Fatal(err)
	}
	reaper.Mount(mnt)
	if out, err := exec.Command("mount", "-o", "loop", img, mnt).CombinedOutput(); err != nil {
		t.Skipf("cannot loop-mount ext4 here: %v %s", err, out)
	}
	t.Cleanup(func() {
		if out, err := exec.Command("umount", mnt).CombinedOutput(); err != nil {
			t.Errorf("umount %s: %v %s", mnt, err, out)
		}
	})
	d := newImageDevice(t, filepath.Join(mnt, "disk"), 32<<20)
	if !d.prealloc.Load() {
		t.Fatal("an image on ext4 is not preallocated")
	}
	// Fill the host but for about 512 KiB.
	var fs syscall.Statfs_t
	if err := syscall.Statfs(mnt, &fs); err != nil {
		t.Fatal(err)
	}
	filler, err := os.Create(filepath.Join(mnt, "filler"))
	if err != nil {
		t.Fatal(err)
	}
	defer filler.Close()
	if err := syscall.Fallocate(int(filler.Fd()), 0, 0, int64(fs.Bfree)*fs.Bsize-512<<10); err != nil {
		t.Fatal(err)
	}
	// Near the end of its chunk: a failed fallocate of the chunk would keep
	// what it allocated from the chunk's start, so on a host this full
	// only the range is allocated.
	if err := d.preallocate(4<<20+900<<10, 64<<10); err != nil {
		t.Fatalf("64 KiB with about 512 KiB free: %v", err)
	}
	if d.fallocs.Load() != 1 || d.chunkAllocated(4) {
		t.Fatalf("%d fallocate calls, chunk 4 remembered %v: want the range alone",
			d.fallocs.Load(), d.chunkAllocated(4))
	}
	if err := d.preallocate(6<<20+16<<10, 16<<10); err != nil || d.fallocs.Load() != 2 {
		t.Fatalf("16 KiB more: %v, %d calls; want the range alone", err, d.fallocs.Load())
	}
	// A chunk that fails all the same (as if another writer took the room
	// after the check) leaves the range allocated and turns widening off.
	defer func(m int64) { widenMargin = m }(widenMargin)
	widenMargin = -2 << 20
	if err := d.preallocate(7<<20+512<<10, 16<<10); err != nil || d.fallocs.Load() != 4 || !d.noWiden.Load() || d.chunkAllocated(7) {
		t.Fatalf("a chunk that does not fit: %v, %d calls, widening off %v, chunk 7 remembered %v; want the range, then the chunk tried and given up",
			err, d.fallocs.Load(), d.noWiden.Load(), d.chunkAllocated(7))
	}
	_ = d.preallocate(3<<20+16<<10, 16<<10) // the failed chunk may have taken the rest
	if d.fallocs.Load() != 5 {
		t.Fatalf("%d calls after widening was turned off, want 5 (the range alone)", d.fallocs.Load())
	}
	err = d.preallocate(8<<20, 1<<20)
	if !errors.Is(err, syscall.ENOSPC) {
		t.Fatalf("1 MiB with less than 512 KiB free: %v, want ENOSPC", err)
	}
}
