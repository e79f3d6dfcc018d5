package posixtest

import (
	"bytes"
	"errors"
	"testing"

	"golang.org/x/sys/unix"
)

// truncate, ftruncate and fallocate.
var truncateTests = map[string]Test{
	"TruncateDownUp":     testTruncateDownUp,
	"FtruncateDownUp":    testFtruncateDownUp,
	"TruncateErrors":     testTruncateErrors,
	"TruncateTimes":      testTruncateTimes,
	"TruncateLargeCross": testTruncateLargeCross,
	"Fallocate":          testFallocate,
	"FallocateKeepSize":  testFallocateKeepSize,
	"FallocatePunchHole": testFallocatePunchHole,
}

func testTruncateDownUp(t *testing.T, dir string) {
	p := join(dir, "f")
	data := pattern(20, 10000)
	writeFile(t, p, data, 0644)
	ok(t, unix.Truncate(p, 3000), "truncate down")
	wantContent(t, p, data[:3000])
	ok(t, unix.Truncate(p, 9000), "truncate up")
	want := append(append([]byte{}, data[:3000]...), make([]byte, 6000)...)
	// Data past the old size is gone: growing again reads zeros, not the
	// old bytes.
	wantContent(t, p, want)
	ok(t, unix.Truncate(p, 0), "truncate to zero")
	if st := lstat(t, p); st.Size != 0 {
		t.Fatalf("size %d", st.Size)
	}
	ok(t, unix.Truncate(p, 5), "truncate up from zero")
	wantContent(t, p, make([]byte, 5))
}

func testFtruncateDownUp(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	data := pattern(21, 20000)
	pwrite(t, fd, data, 0)
	// Cut inside a page, then grow across several pages.
	ok(t, unix.Ftruncate(fd, 4097), "ftruncate down")
	if st := fstat(t, fd); st.Size != 4097 {
		t.Fatalf("size %d", st.Size)
	}
	ok(t, unix.Ftruncate(fd, 16384), "ftruncate up")
	got := pread(t, fd, 16384, 0)
	if !bytes.Equal(got[:4097], data[:4097]) || !isZero(got[4097:]) {
		t.Fatalf("after down+up: kept %s; tail zero %v", describeDiff(got[:4097], data[:4097]), isZero(got[4097:]))
	}
	// Writing after a shrink past the new end leaves zeros between.
	ok(t, unix.Ftruncate(fd, 10), "ftruncate to 10")
	pwrite(t, fd, []byte("Z"), 100)
	got = pread(t, fd, 200, 0)
	if len(got) != 101 || !bytes.Equal(got[:10], data[:10]) || !isZero(got[10:100]) || got[100] != 'Z' {
		t.Fatalf("write after shrink: %d bytes", len(got))
	}
	// The same size is a no-op for data.
	ok(t, unix.Ftruncate(fd, 101), "ftruncate same size")
	if st := fstat(t, fd); st.Size != 101 {
		t.Fatalf("size %d", st.Size)
	}
}

func testTruncateErrors(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, []byte("x"), 0644)
	wantErr(t, unix.Truncate(p, -1), unix.EINVAL, "truncate to negative size")
	mkdir(t, join(dir, "d"), 0755)
	wantErr(t, unix.Truncate(join(dir, "d"), 0), unix.EISDIR, "truncate a directory")
	wantErr(t, unix.Truncate(join(dir, "missing"), 0), unix.ENOENT, "truncate missing")
	fd := open(t, join(dir, "d"), unix.O_RDONLY|unix.O_DIRECTORY, 0)
	wantErr(t, unix.Ftruncate(fd, 0), unix.EINVAL, "ftruncate a directory fd")
	wantContent(t, p, []byte("x"))
}

func testTruncateTimes(t *testing.T, dir string) {
	p := join(dir, "f")
	writeFile(t, p, []byte("abcdef"), 0644)
	old := unix.Timespec{Sec: 1000000000}
	ok(t, unix.UtimesNanoAt(unix.AT_FDCWD, p, []unix.Timespec{old, old}, 0), "utimens")
	ok(t, unix.Truncate(p, 2), "truncate")
	st := lstat(t, p)
	if !tsAfter(st.Mtim, old) || !tsAfter(st.Ctim, old) {
		t.Fatalf("truncate did not update mtime/ctime")
	}
	if !tsEqual(st.Atim, old) {
		t.Fatalf("truncate changed atime")
	}
}

func testTruncateLargeCross(t *testing.T, dir string) {
	// Sizes that cross 1 MiB in both directions keep data exact.
	p := join(dir, "f")
	data := pattern(22, 900<<10)
	writeFile(t, p, data, 0644)
	ok(t, unix.Truncate(p, 3<<20), "grow past 1 MiB")
	fd := open(t, p, unix.O_RDWR, 0)
	pwrite(t, fd, []byte("mark"), 2<<20)
	ok(t, unix.Ftruncate(fd, 500<<10), "shrink below 1 MiB")
	ok(t, unix.Ftruncate(fd, 2<<20+10), "grow again")
	got := pread(t, fd, 3<<20, 0)
	if len(got) != 2<<20+10 || !bytes.Equal(got[:500<<10], data[:500<<10]) || !isZero(got[500<<10:]) {
		t.Fatalf("after shrink and grow: length %d, kept prefix %v, rest zero %v",
			len(got), bytes.Equal(got[:min(len(got), 500<<10)], data[:500<<10]), isZero(got[min(len(got), 500<<10):]))
	}
}

// fallocate helper: skips the test if the file system does not implement
// fallocate at all.
func fallocate(t *testing.T, fd int, mode uint32, off, n int64) error {
	t.Helper()
	err := unix.Fallocate(fd, mode, off, n)
	if errors.Is(err, unix.EOPNOTSUPP) && mode == 0 {
		t.Skip("fallocate not supported")
	}
	return err
}

func testFallocate(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	pwrite(t, fd, []byte("0123456789"), 0)
	ok(t, fallocate(t, fd, 0, 0, 100000), "fallocate mode 0")
	st := fstat(t, fd)
	if st.Size != 100000 {
		t.Fatalf("size after fallocate %d, want 100000", st.Size)
	}
	if st.Blocks*512 < 100000-4096 {
		t.Fatalf("fallocate reserved only %d blocks", st.Blocks)
	}
	got := pread(t, fd, 100000, 0)
	if string(got[:10]) != "0123456789" || !isZero(got[10:]) {
		t.Fatalf("fallocate changed data or did not zero")
	}
	// A range inside the file changes nothing.
	ok(t, fallocate(t, fd, 0, 5, 3), "fallocate inside")
	if st := fstat(t, fd); st.Size != 100000 {
		t.Fatalf("size %d", st.Size)
	}
	wantErr(t, unix.Fallocate(fd, 0, 0, 0), unix.EINVAL, "fallocate zero length")
	wantErr(t, unix.Fallocate(fd, 0, -1, 10), unix.EINVAL, "fallocate negative offset")
	ro := open(t, p, unix.O_RDONLY, 0)
	wantErr(t, unix.Fallocate(ro, 0, 0, 10), unix.EBADF, "fallocate on read-only fd")
}

func testFallocateKeepSize(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	pwrite(t, fd, []byte("abc"), 0)
	if err := fallocate(t, fd, unix.FALLOC_FL_KEEP_SIZE, 0, 1<<20); errors.Is(err, unix.EOPNOTSUPP) {
		t.Skip("FALLOC_FL_KEEP_SIZE not supported")
	} else {
		ok(t, err, "fallocate KEEP_SIZE")
	}
	st := fstat(t, fd)
	if st.Size != 3 {
		t.Fatalf("KEEP_SIZE changed size to %d", st.Size)
	}
	wantContent(t, p, []byte("abc"))
	// Growing later reads zeros in the preallocated range.
	ok(t, unix.Ftruncate(fd, 8192), "ftruncate")
	if got := pread(t, fd, 8192, 0); string(got[:3]) != "abc" || !isZero(got[3:]) {
		t.Fatalf("preallocated range not zero")
	}
}

func testFallocatePunchHole(t *testing.T, dir string) {
	p := join(dir, "f")
	fd := open(t, p, unix.O_CREAT|unix.O_RDWR, 0644)
	data := pattern(23, 64<<10)
	pwrite(t, fd, data, 0)
	ok(t, unix.Fsync(fd), "fsync")
	before := fstat(t, fd).Blocks
	// PUNCH_HOLE requires KEEP_SIZE.
	wantErr(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE, 0, 4096), unix.EOPNOTSUPP, "PUNCH_HOLE without KEEP_SIZE")
	err := unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 8192, 32<<10)
	if errors.Is(err, unix.EOPNOTSUPP) {
		t.Skip("PUNCH_HOLE not supported")
	}
	ok(t, err, "punch hole")
	// An unaligned punch zeroes partial pages too.
	ok(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 100, 50), "unaligned punch")
	want := append([]byte{}, data...)
	clear(want[8192 : 8192+32<<10])
	clear(want[100:150])
	st := fstat(t, fd)
	if st.Size != int64(len(data)) {
		t.Fatalf("punch changed size to %d", st.Size)
	}
	if got := pread(t, fd, len(data), 0); !bytes.Equal(got, want) {
		t.Fatalf("after punch: %s", describeDiff(got, want))
	}
	if st.Blocks >= before {
		t.Fatalf("punching 32 KiB freed no blocks (%d -> %d)", before, st.Blocks)
	}
	// Punching past EOF does not extend.
	ok(t, unix.Fallocate(fd, unix.FALLOC_FL_PUNCH_HOLE|unix.FALLOC_FL_KEEP_SIZE, 60<<10, 100<<10), "punch past EOF")
	if st := fstat(t, fd); st.Size != int64(len(data)) {
		t.Fatalf("punch past EOF changed size to %d", st.Size)
	}
}
