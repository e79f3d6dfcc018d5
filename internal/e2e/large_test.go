package e2e

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/internal/mounttest"
	"conquest/internal/racetest"
)

// Large files through the mount: the disk path of the core (files above the
// large-file threshold, 1 MiB by default, keep their data on the disk image;
// a file cut to half the threshold or less moves back into the arena).

const (
	largeThreshold = 1 << 20   // diskstore.DefaultThreshold
	mib101         = 1_059_062 // 1.01 MiB, the bench's "1.01m" preset
	mb101          = 1_010_000 // 1.01 MB (decimal): below 1 MiB, stays in the arena
)

// largeWriteSizes are the write(2) sizes the tests cycle through: odd and
// aligned, below and above the FUSE request size.
var largeWriteSizes = []int{1, 4095, 4096, 8191, 65536, 128<<10 + 1, 1 << 20, 3<<20 + 5}

// bigWriteSizes is the cycle for files of 100 MiB and more (a 1-byte
// write every few hundred MiB would add nothing but time).
var bigWriteSizes = []int{1 << 20, 128<<10 + 3, 512<<10 - 7, 4 << 20, 4096}

// largeImages formats an arena of 256 MiB and a sparse disk image of
// diskSize bytes in a fresh temporary directory.
func largeImages(t *testing.T, diskSize uint64) mounttest.Option {
	t.Helper()
	dir := t.TempDir()
	pram, disk := filepath.Join(dir, "pram.img"), filepath.Join(dir, "disk.img")
	if err := conquest.Mkfs(pram, disk, conquest.MkfsOptions{PramSize: mounttest.DefaultPramSize, DiskSize: diskSize}); err != nil {
		t.Fatalf("mkfs: %v", err)
	}
	return mounttest.WithImages(pram, disk)
}

// pattern is the content of a test file: the byte at offset o is
// base[o % len(base)], except that every 4 KiB block starts with an 8-byte
// stamp of the file's seed and the block number. Lost, shifted, mixed-up
// (between files) or stale blocks all read differently.
type pattern struct {
	seed uint64
	size int64
}

var patternBase = func() []byte {
	b := make([]byte, 1<<20)
	rand.New(rand.NewSource(5)).Read(b)
	return b
}()

// fill writes the pattern's bytes [off, off+len(dst)) into dst.
func (p pattern) fill(dst []byte, off int64) {
	var blk [4096]byte
	for len(dst) > 0 {
		bstart := off &^ 4095
		copy(blk[:], patternBase[bstart%int64(len(patternBase)):])
		binary.LittleEndian.PutUint64(blk[:], p.seed<<40^uint64(bstart>>12))
		n := copy(dst, blk[off-bstart:])
		dst, off = dst[n:], off+int64(n)
	}
}

// writePattern writes p's bytes [off, end) to fd at its current offset, in
// writes whose sizes cycle through sizes (starting at index phase), and
// returns the bytes written (all of them, or fewer with an error).
func writePattern(fd int, p pattern, off, end int64, sizes []int, phase int) (int64, error) {
	buf := make([]byte, 4<<20+64)
	start := off
	for i := phase; off < end; i++ {
		n := min(int64(sizes[i%len(sizes)]), end-off, int64(len(buf)))
		p.fill(buf[:n], off)
		if err := writeAll(fd, buf[:n]); err != nil {
			return off - start, err
		}
		off += n
	}
	return off - start, nil
}

// createPattern creates path with p.size bytes of p, written in varied sizes.
func createPattern(t *testing.T, path string, p pattern, sizes []int, phase int) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	_, err = writePattern(fd, p, 0, p.size, sizes, phase)
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	if err != nil {
		t.Fatalf("writing %s: %v", path, err)
	}
}

// readSum reads fd from its current offset to EOF in reads of varied sizes
// and returns the bytes read and their SHA-256; if want is not nil, every
// chunk is compared with it and the first difference is returned as an
// error.
func readSum(fd int, want *pattern) (int64, [sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	h := sha256.New()
	sizes := []int{1 << 20, 4096, 128 << 10, 7, 300001}
	buf := make([]byte, 1<<20)
	exp := make([]byte, 1<<20)
	var off int64
	for i := 0; ; i++ {
		n, err := unix.Read(fd, buf[:sizes[i%len(sizes)]])
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return off, sum, err
		}
		if n == 0 {
			break
		}
		if want != nil {
			want.fill(exp[:n], off)
			if !bytes.Equal(buf[:n], exp[:n]) {
				for j := range n {
					if buf[j] != exp[j] {
						return off, sum, fmt.Errorf("byte %d is %#x, want %#x", off+int64(j), buf[j], exp[j])
					}
				}
			}
		}
		h.Write(buf[:n])
		off += int64(n)
	}
	copy(sum[:], h.Sum(nil))
	return off, sum, nil
}

// fileSum reads path and returns its size and SHA-256; with want, it also
// checks that the content is exactly want's (including its size).
func fileSum(t *testing.T, path string, want *pattern) (int64, [sha256.Size]byte) {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	n, sum, err := readSum(fd, want)
	if err != nil {
		t.Fatalf("reading %s: %v", path, err)
	}
	if want != nil && n != want.size {
		t.Fatalf("%s: read %d bytes, want %d", path, n, want.size)
	}
	return n, sum
}

// freeBytes is the mount's free space as statfs(2) reports it (arena heap
// plus disk blocks).
func freeBytes(t *testing.T, dir string) int64 {
	t.Helper()
	var st unix.Statfs_t
	if err := unix.Statfs(dir, &st); err != nil {
		t.Fatal(err)
	}
	return int64(st.Bfree) * st.Bsize
}

// waitFree waits (the kernel sends RELEASE and FORGET asynchronously) until
// the mount's free space is at least min bytes, and returns it.
func waitFree(t *testing.T, dir string, min int64) int64 {
	t.Helper()
	var free int64
	for deadline := time.Now().Add(10 * time.Second); ; {
		if free = freeBytes(t, dir); free >= min || time.Now().After(deadline) {
			return free
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// imageUsage opens the (unmounted) images and returns the core's usage.
func imageUsage(t *testing.T, m *mounttest.Mounted) conquest.Usage {
	t.Helper()
	fs, err := mounttest.Open(m.Pram, m.Disk, conquest.Options{})
	if err != nil {
		t.Fatal(err)
	}
	u := fs.Usage()
	if err := fs.Close(); err != nil {
		t.Fatal(err)
	}
	return u
}

// largeFile is what a test expects of one file.
type largeFile struct {
	size   int64
	onDisk bool  // data on disk (else in the arena)
	data   int64 // bytes not in holes, if less than size
	pat    *pattern
	sum    [sha256.Size]byte // read before the remount
}

// TestLargeFiles writes files around the large-file threshold and of
// 100 MiB through the mount, grows one across the threshold by appends,
// truncates, renames, hard-links and unlinks while open; then unmounts,
// checks the arena/disk usage in the images, remounts and compares every
// file.
func TestLargeFiles(t *testing.T) {
	t.Parallel() // see doc.go, "Time"
	m := mount(t, largeImages(t, 1<<30))
	files := map[string]*largeFile{}
	seed := uint64(1)
	newPat := func(size int64) *pattern { seed++; return &pattern{seed: seed, size: size} }

	// Sizes around the threshold, in varied write sizes.
	sizes := []int64{largeThreshold - 1, largeThreshold, largeThreshold + 1, mib101, mb101, 100 << 20}
	for i, size := range sizes {
		name := fmt.Sprintf("f%d", size)
		p := newPat(size)
		ws := largeWriteSizes
		if size > 8<<20 {
			ws = bigWriteSizes
		}
		start := time.Now()
		createPattern(t, m.Path(name), *p, ws, i)
		d := time.Since(start)
		fileSum(t, m.Path(name), p)
		if size >= 100<<20 {
			t.Logf("%s: wrote %d MiB in %v (%.0f MiB/s)", name, size>>20, d.Round(time.Millisecond), float64(size>>20)/d.Seconds())
		}
		files[name] = &largeFile{size: size, onDisk: size > largeThreshold, pat: p}
	}

	// Grown across the threshold by appends (O_APPEND), from 1 MiB - 10
	// to 1 MiB + 100,000 bytes.
	{
		p := newPat(largeThreshold + 100_000)
		createPattern(t, m.Path("grow"), pattern{seed: p.seed, size: largeThreshold - 10}, largeWriteSizes, 0)
		fd, err := unix.Open(m.Path("grow"), unix.O_WRONLY|unix.O_APPEND|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		// 3, 7, 1, ... bytes first, so that a write ends exactly on and
		// one byte past the threshold.
		off := int64(largeThreshold - 10)
		for _, n := range []int64{3, 7, 1, 4096, 50000} {
			if _, err := writePattern(fd, *p, off, off+n, []int{int(n)}, 0); err != nil {
				t.Fatal(err)
			}
			off += n
			if off == largeThreshold || off == largeThreshold+1 {
				var st unix.Stat_t
				if err := unix.Fstat(fd, &st); err != nil || st.Size != off {
					t.Fatalf("grow: size %d after appending to %d (%v)", st.Size, off, err)
				}
			}
		}
		if _, err := writePattern(fd, *p, off, p.size, []int{8191}, 0); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		fileSum(t, m.Path("grow"), p)
		files["grow"] = &largeFile{size: p.size, onDisk: true, pat: p}
	}

	// Truncated from 3 MiB to just below the threshold (stays on disk: a
	// file moves back only at half the threshold or less), to half the
	// threshold (moves back), and to one byte more than half (stays).
	for _, c := range []struct {
		name   string
		to     int64
		onDisk bool
	}{
		{"trunc-below", largeThreshold - 1, true},
		{"trunc-half", largeThreshold / 2, false},
		{"trunc-half+1", largeThreshold/2 + 1, true},
	} {
		p := newPat(3 << 20)
		createPattern(t, m.Path(c.name), *p, largeWriteSizes, 3)
		if err := unix.Truncate(m.Path(c.name), c.to); err != nil {
			t.Fatal(err)
		}
		q := &pattern{seed: p.seed, size: c.to}
		fileSum(t, m.Path(c.name), q)
		files[c.name] = &largeFile{size: c.to, onDisk: c.onDisk, pat: q}
	}
	// Truncated up again: the cut bytes must read as zeros, not as the old
	// data.
	{
		name := "trunc-regrow"
		p := newPat(2 << 20)
		createPattern(t, m.Path(name), *p, largeWriteSizes, 5)
		if err := unix.Truncate(m.Path(name), 100_000); err != nil {
			t.Fatal(err)
		}
		if err := unix.Truncate(m.Path(name), 2<<20); err != nil {
			t.Fatal(err)
		}
		want := make([]byte, 2<<20)
		p.fill(want[:100_000], 0)
		got, err := readAllRaw(m.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: after truncating to 100,000 and back to 2 MiB: content differs (len %d)", name, len(got))
		}
		files[name] = &largeFile{size: 2 << 20, onDisk: true, data: 100_000}
	}

	// Renamed into a directory (the 100 MiB file and one just above the
	// threshold).
	if err := unix.Mkdir(m.Path("d"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{fmt.Sprintf("f%d", 100<<20), fmt.Sprintf("f%d", largeThreshold+1)} {
		to := filepath.Join("d", name+".renamed")
		if err := unix.Rename(m.Path(name), m.Path(to)); err != nil {
			t.Fatal(err)
		}
		if err := unix.Access(m.Path(name), unix.F_OK); !errors.Is(err, unix.ENOENT) {
			t.Fatalf("%s after rename: access: %v, want ENOENT", name, err)
		}
		f := files[name]
		delete(files, name)
		files[to] = f
		fileSum(t, m.Path(to), f.pat)
	}

	// Hard-linked: both names read the same, nlink is 2, and a write
	// through one name shows through the other.
	{
		name := fmt.Sprintf("f%d", mib101)
		if err := unix.Link(m.Path(name), m.Path("d", "link")); err != nil {
			t.Fatal(err)
		}
		for _, n := range []string{m.Path(name), m.Path("d", "link")} {
			var st unix.Stat_t
			if err := unix.Stat(n, &st); err != nil {
				t.Fatal(err)
			}
			if st.Nlink != 2 || st.Size != mib101 {
				t.Fatalf("%s: nlink %d size %d, want 2 and %d", n, st.Nlink, st.Size, mib101)
			}
			fileSum(t, n, files[name].pat)
		}
		fd, err := unix.Open(m.Path("d", "link"), unix.O_WRONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Pwrite(fd, []byte("through the link"), 1<<20); err != nil {
			t.Fatal(err)
		}
		unix.Close(fd)
		got, err := readAllRaw(m.Path(name))
		if err != nil {
			t.Fatal(err)
		}
		want := make([]byte, mib101)
		files[name].pat.fill(want, 0)
		copy(want[1<<20:], "through the link")
		if !bytes.Equal(got, want) {
			t.Fatalf("%s: a write through its hard link does not show", name)
		}
		files[name].pat = nil // modified: compared by hash from here on
	}

	// Unlinked while open: still readable through the descriptor, and its
	// disk space is freed after the close.
	{
		const size = 64 << 20
		path := m.Path("doomed")
		free0 := freeBytes(t, m.Dir)
		p := newPat(size)
		createPattern(t, path, *p, bigWriteSizes, 0)
		free1 := freeBytes(t, m.Dir)
		if free0-free1 < size {
			t.Fatalf("writing %d bytes took only %d bytes of free space (%d -> %d)", size, free0-free1, free0, free1)
		}
		fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		if err := unix.Unlink(path); err != nil {
			t.Fatal(err)
		}
		if err := unix.Access(path, unix.F_OK); !errors.Is(err, unix.ENOENT) {
			t.Fatalf("after unlink: access: %v, want ENOENT", err)
		}
		n, _, err := readSum(fd, p)
		if err != nil || n != size {
			t.Fatalf("reading the unlinked file through its descriptor: %d bytes, %v", n, err)
		}
		// Its blocks stay allocated while it is open. (Not told by the
		// mount's free space: the disk commit may meanwhile give back the
		// old copies of blocks that earlier steps rewrote.)
		var st unix.Stat_t
		if err := unix.Fstat(fd, &st); err != nil || st.Blocks*512 < size || st.Nlink != 0 {
			unix.Close(fd)
			t.Fatalf("the unlinked file still open: %d blocks, nlink %d (%v), want %d bytes held", st.Blocks, st.Nlink, err, size)
		}
		unix.Close(fd)
		// Allow 1 MiB for the arena's own bookkeeping.
		if free := waitFree(t, m.Dir, free0-1<<20); free < free0-1<<20 {
			t.Fatalf("free space %d after closing the unlinked file, %d before it was written", free, free0)
		}
	}

	for name, f := range files {
		n, sum := fileSum(t, m.Path(name), f.pat)
		if n != f.size {
			t.Fatalf("%s: size %d, want %d", name, n, f.size)
		}
		f.sum = sum
	}
	// A file the mount helper may have made (.poll-prime, empty) counts
	// among the small files.
	extra := 0
	if st := (unix.Stat_t{}); unix.Lstat(m.Path(".poll-prime"), &st) == nil && st.Size == 0 {
		extra = 1
	}
	check(t, m, "before unmount")

	// Usage: the small files' data in the arena, the large files' on disk.
	m.Unmount()
	u := imageUsage(t, m)
	var small, large, smallBytes, largeBytes, largeRounded uint64
	for _, f := range files {
		if f.onDisk {
			large++
			largeBytes += uint64(f.size)
			data := uint64(f.size)
			if f.data != 0 {
				data = uint64(f.data)
			}
			largeRounded += (data + u.DiskBlockSize - 1) / u.DiskBlockSize * u.DiskBlockSize
			if tail := data % u.DiskBlockSize; f.pat != nil && f.data == 0 && tail != 0 {
				// A last block whose few bytes are all zeros is a hole
				// (f1048577's one byte past the threshold is 0): unwritten
				// blocks are given back at the last close.
				b := make([]byte, tail)
				f.pat.fill(b, int64(data-tail))
				if bytes.Count(b, []byte{0}) == len(b) {
					largeRounded -= u.DiskBlockSize
				}
			}
		} else {
			small++
			smallBytes += uint64(f.size)
		}
	}
	small += uint64(extra)
	t.Logf("usage: %d small files (%d B), %d large (%d B); arena heap used %d B; disk used %d B (blocks of %d B), quarantined %d B",
		u.SmallFiles, u.SmallFileBytes, u.LargeFiles, u.LargeFileBytes, u.HeapUsed, u.DiskUsed, u.DiskBlockSize, u.DiskQuarantined)
	if u.LargeFileThreshold != largeThreshold {
		t.Errorf("threshold %d, want %d", u.LargeFileThreshold, largeThreshold)
	}
	if u.SmallFiles != small || u.SmallFileBytes != smallBytes {
		t.Errorf("arena holds %d files of %d bytes, want %d of %d", u.SmallFiles, u.SmallFileBytes, small, smallBytes)
	}
	if u.LargeFiles != large || u.LargeFileBytes != largeBytes {
		t.Errorf("disk holds %d files of %d bytes, want %d of %d", u.LargeFiles, u.LargeFileBytes, large, largeBytes)
	}
	if u.DiskUsed < largeRounded {
		t.Errorf("disk used %d bytes, less than the large files' data, %d (rounded to blocks)", u.DiskUsed, largeRounded)
	}
	if u.DiskUsed > largeRounded+large*u.DiskBlockSize*16 {
		t.Errorf("disk used %d bytes, far more than the large files' data, %d (rounded to blocks)", u.DiskUsed, largeRounded)
	}
	// The arena holds the small files and metadata, none of the large
	// files' data (which alone is over 100 MiB).
	if u.HeapUsed < smallBytes || u.HeapUsed > smallBytes+8<<20 {
		t.Errorf("arena heap used %d bytes, want the small files' %d plus under 8 MiB", u.HeapUsed, smallBytes)
	}

	remount(t, m)
	for name, f := range files {
		n, sum := fileSum(t, m.Path(name), f.pat)
		if n != f.size || sum != f.sum {
			t.Errorf("%s after remount: size %d, want %d; sha256 %x, want %x", name, n, f.size, sum[:8], f.sum[:8])
		}
	}
	var st unix.Stat_t
	if err := unix.Stat(m.Path("d", "link"), &st); err != nil || st.Nlink != 2 {
		t.Errorf("hard link after remount: nlink %d (%v), want 2", st.Nlink, err)
	}
}

// readAllRaw reads a whole file without the netpoller (see fusefs poll priming).
func readAllRaw(path string) ([]byte, error) {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		return nil, err
	}
	defer unix.Close(fd)
	var out []byte
	buf := make([]byte, 256<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return out, err
		}
		if n == 0 {
			return out, nil
		}
		out = append(out, buf[:n]...)
	}
}

// TestLargeGiB writes a 1 GiB file through the mount, reads it back,
// remounts and reads it again, checks the usage in the images and that
// unlinking it frees its disk space. Under the race detector (the daemon
// is in-process, so FUSE runs at about 22 MiB/s: 1 GiB took 46 s to write
// and 20 s to read) the file is 256 MiB; `make test` writes the 1 GiB in
// its second step, without -race (internal/racetest).
func TestLargeGiB(t *testing.T) {
	t.Parallel() // see doc.go, "Time"
	if testing.Short() {
		t.Skip("writes 1 GiB (-short)")
	}
	size := int64(1 << 30)
	if racetest.Reduced(t) {
		size = 256 << 20
	}
	m := mount(t, largeImages(t, uint64(size)+256<<20))
	path := m.Path("gib")
	p := &pattern{seed: 77, size: size}
	free0 := freeBytes(t, m.Dir)
	start := time.Now()
	createPattern(t, path, *p, bigWriteSizes, 0)
	wd := time.Since(start)
	start = time.Now()
	_, sum := fileSum(t, path, p)
	rd := time.Since(start)
	t.Logf("%d MiB: write %v (%.0f MiB/s), read and compare %v (%.0f MiB/s)", size>>20,
		wd.Round(time.Millisecond), float64(size>>20)/wd.Seconds(), rd.Round(time.Millisecond), float64(size>>20)/rd.Seconds())
	if used := free0 - freeBytes(t, m.Dir); used < size {
		t.Fatalf("the %d-byte file took %d bytes of free space", size, used)
	}

	m.Unmount()
	u := imageUsage(t, m)
	if u.LargeFiles != 1 || u.LargeFileBytes != uint64(size) || u.DiskUsed < uint64(size) || u.HeapUsed > 8<<20 {
		t.Errorf("usage: %d large files of %d bytes, disk used %d, arena heap used %d; want 1 of %d, disk >= that, arena < 8 MiB",
			u.LargeFiles, u.LargeFileBytes, u.DiskUsed, u.HeapUsed, size)
	}
	remount(t, m)
	if _, again := fileSum(t, path, nil); again != sum {
		t.Fatalf("after remount: sha256 %x, want %x", again[:8], sum[:8])
	}
	if err := unix.Unlink(path); err != nil {
		t.Fatal(err)
	}
	if free := waitFree(t, m.Dir, free0-1<<20); free < free0-1<<20 {
		t.Fatalf("free space %d after unlinking the file, %d before it was written", free, free0)
	}
}

// TestLargeKill writes a 50 MiB file in 128 KiB writes without fsync and
// kills the daemon with SIGKILL, then kills it again in the middle of
// writing a second file, past 160 MiB, so that the disk's periodic syncs
// (every 64 MiB, in the background) have started and one may be in flight:
// after each remount every byte whose write had returned is there (the disk
// path writes through before it acknowledges) and fsck is clean.
func TestLargeKill(t *testing.T) {
	const size, chunk = 50 << 20, 128 << 10
	m := mounttest.MountProcess(t)
	a := &pattern{seed: 101, size: size}
	createPattern(t, m.Path("a"), *a, []int{chunk}, 0)
	m.Kill()
	fsck(t, m)
	m.Remount()
	fileSum(t, m.Path("a"), a)

	// Killed while writing b: everything acknowledged must be there; the
	// write in flight may be, wholly or in part.
	b := pattern{seed: 102, size: 4 * size}
	fd, err := unix.Open(m.Path("b"), unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var acked atomic.Int64
	done := make(chan error, 1)
	go func() {
		buf := make([]byte, chunk)
		for off := int64(0); off < b.size; off += chunk {
			b.fill(buf, off)
			if err := writeAll(fd, buf); err != nil {
				done <- err
				return
			}
			acked.Store(off + chunk)
		}
		done <- nil
	}()
	for acked.Load() < 160<<20 {
		time.Sleep(time.Millisecond)
	}
	m.Kill()
	werr := <-done
	unix.Close(fd)
	ack := acked.Load()
	t.Logf("killed after %d bytes of b were acknowledged (writer: %v)", ack, werr)
	fsck(t, m)
	m.Remount()
	fileSum(t, m.Path("a"), a)
	var st unix.Stat_t
	if err := unix.Stat(m.Path("b"), &st); err != nil {
		t.Fatal(err)
	}
	if st.Size < ack || st.Size > ack+chunk && werr != nil {
		t.Fatalf("b: size %d after the kill, %d bytes acknowledged", st.Size, ack)
	}
	b.size = st.Size
	fileSum(t, m.Path("b"), &b)
}
