package fusefs_test

import (
	"fmt"
	"os"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
)

// dataSegments walks fd's data with SEEK_DATA and SEEK_HOLE up to size.
func dataSegments(t *testing.T, fd int, size int64) [][2]int64 {
	t.Helper()
	var segs [][2]int64
	for off := int64(0); off < size; {
		d, err := unix.Seek(fd, off, unix.SEEK_DATA)
		if err == syscall.ENXIO {
			break
		}
		if err != nil {
			t.Fatalf("SEEK_DATA %d: %v", off, err)
		}
		h, err := unix.Seek(fd, d, unix.SEEK_HOLE)
		if err != nil {
			t.Fatalf("SEEK_HOLE %d: %v", d, err)
		}
		if d < off || h <= d || h > size {
			t.Fatalf("SEEK_DATA %d = %d, SEEK_HOLE = %d, size %d", off, d, h, size)
		}
		segs = append(segs, [2]int64{d, h})
		off = h
	}
	return segs
}

// covers reports whether segs cover every offset in at.
func covers(segs [][2]int64, at ...int64) bool {
	for _, x := range at {
		in := false
		for _, s := range segs {
			in = in || s[0] <= x && x < s[1]
		}
		if !in {
			return false
		}
	}
	return true
}

// TestLseekDataHole: SEEK_DATA and SEEK_HOLE through the mount (FUSE_LSEEK,
// which bazil does not parse). In write-through mode a sparse large file
// and a sparse arena file show their holes, fallocated space shows as a
// hole, and offsets at or past the end are ENXIO. A writer that opened
// the file O_WRONLY leaves the answers exact; one that opened it O_RDWR
// makes them the fallback. While the file is mapped for writing, a store into a hole that the daemon has not seen yet is
// never hidden in a hole (the answer is the whole file); once unmapped and
// closed, the answer is exact again. With the writeback cache the kernel's
// own fallback answers (the whole file is data), which covers data it has
// not written back.
func TestLseekDataHole(t *testing.T) {
	// The daemon runs in its own process: this one maps files of the
	// mount, and a page fault or munmap that waits for a request its own
	// process serves can deadlock with the Go runtime.
	for _, args := range [][]string{nil, {"--writeback-cache"}} {
		t.Run(fmt.Sprint(args), func(t *testing.T) {
			testLseek(t, mounttest.MountProcess(t, mounttest.WithArgs(args...)), args == nil)
		})
	}
}

func testLseek(t *testing.T, m *mounttest.Mounted, exact bool) {
	{
		p := m.Path
		mk := func(name string, size int64, writes map[int64]string) int {
			t.Helper()
			fd, err := unix.Open(p(name), unix.O_CREAT|unix.O_RDWR|unix.O_CLOEXEC, 0o644)
			must(t, err)
			must(t, unix.Ftruncate(fd, size))
			for off, s := range writes {
				if _, err := unix.Pwrite(fd, []byte(s), off); err != nil {
					t.Fatal(err)
				}
			}
			return fd
		}
		const mib = 1 << 20
		big := mk("big", 12*mib, map[int64]string{0: "head", 5 * mib: "middle", 9 * mib: "z"})
		small := mk("small", 900000, map[int64]string{0: "head", 300000: "middle"})
		falloc := mk("falloc", 0, nil)
		must(t, unix.Fallocate(falloc, 0, 0, 3*mib))
		if _, err := unix.Pwrite(falloc, []byte("q"), 2*mib); err != nil {
			t.Fatal(err)
		}
		for _, fd := range []int{big, small, falloc} {
			must(t, unix.Close(fd))
		}
		open := func(name string) int {
			t.Helper()
			fd, err := unix.Open(p(name), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			must(t, err)
			t.Cleanup(func() { unix.Close(fd) })
			return fd
		}
		// The RELEASE of a close is answered after close(2) returns; until
		// then the file counts as open for writing, and the answers are
		// the fallback's. Wait until the exact ones come.
		settle := func(fd int, size int64, want func([][2]int64) bool) [][2]int64 {
			t.Helper()
			deadline := time.Now().Add(5 * time.Second)
			for {
				segs := dataSegments(t, fd, size)
				if want(segs) || time.Now().After(deadline) {
					return segs
				}
				time.Sleep(5 * time.Millisecond)
			}
		}

		fd := open("big")
		segs := settle(fd, 12*mib, func(s [][2]int64) bool { return !exact || len(s) == 3 })
		if !covers(segs, 0, 3, 5*mib, 5*mib+5, 9*mib) {
			t.Fatalf("big: data %v hides written bytes", segs)
		}
		if exact {
			// Disk blocks of at most 1 MiB: the holes between the writes
			// show.
			if len(segs) != 3 || segs[0][0] != 0 || segs[1][0] != 5*mib || segs[2][0] != 9*mib || segs[2][1] > 10*mib {
				t.Fatalf("big: data %v, want three runs at 0, 5 MiB and 9 MiB", segs)
			}
		} else if len(segs) != 1 || segs[0] != [2]int64{0, 12 * mib} {
			t.Fatalf("big (writeback): data %v, want the whole file", segs)
		}
		for _, off := range []int64{12 * mib, 13 * mib, -1} {
			_, err := unix.Seek(fd, off, unix.SEEK_DATA)
			wantErrno(t, "SEEK_DATA past the end", err, syscall.ENXIO)
			_, err = unix.Seek(fd, off, unix.SEEK_HOLE)
			wantErrno(t, "SEEK_HOLE past the end", err, syscall.ENXIO)
		}
		if exact {
			_, err := unix.Seek(fd, 10*mib, unix.SEEK_DATA)
			wantErrno(t, "SEEK_DATA after the last data", err, syscall.ENXIO)
		}

		fd = open("small")
		segs = settle(fd, 900000, func(s [][2]int64) bool { return !exact || len(s) == 2 })
		if !covers(segs, 0, 3, 300000, 300005) {
			t.Fatalf("small: data %v hides written bytes", segs)
		}
		if exact && (len(segs) != 2 || segs[0] != [2]int64{0, 4096} || segs[1] != [2]int64{299008, 303104}) {
			t.Fatalf("small: data %v, want its two 4 KiB blocks", segs)
		}

		fd = open("falloc")
		segs = settle(fd, 3*mib, func(s [][2]int64) bool { return !exact || len(s) == 1 && s[0][0] > 0 })
		if !covers(segs, 2*mib) {
			t.Fatalf("falloc: data %v hides the written byte", segs)
		}
		if exact && (len(segs) != 1 || segs[0][0] > 2*mib || segs[0][1] > 2*mib+mib || segs[0][0] < mib) {
			t.Fatalf("falloc: data %v, want only the written block (fallocated space is a hole)", segs)
		}

		// A writer that opened the file O_WRONLY cannot map it: the answer
		// stays exact while it is open (until session 46 every writer made
		// it the fallback). A handle open O_RDWR, which could map it,
		// makes it the fallback.
		wo, err := unix.Open(p("wo"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
		must(t, err)
		woOpen := true
		t.Cleanup(func() { // after a failure, so that the mount can go
			if woOpen {
				unix.Close(wo)
			}
		})
		must(t, unix.Ftruncate(wo, 12*mib))
		for _, off := range []int64{0, 9 * mib} {
			if _, err := unix.Pwrite(wo, []byte("w"), off); err != nil {
				t.Fatal(err)
			}
		}
		fd = open("wo")
		segs = dataSegments(t, fd, 12*mib)
		if !covers(segs, 0, 9*mib) {
			t.Fatalf("wo: data %v hides written bytes", segs)
		}
		if exact && (len(segs) != 2 || segs[0][0] != 0 || segs[1][0] != 9*mib) {
			t.Fatalf("wo, beside an O_WRONLY writer: data %v, want two runs at 0 and 9 MiB", segs)
		}
		rw, err := unix.Open(p("wo"), unix.O_RDWR|unix.O_CLOEXEC, 0)
		must(t, err)
		segs = dataSegments(t, fd, 12*mib)
		must(t, unix.Close(rw))
		if len(segs) != 1 || segs[0] != [2]int64{0, 12 * mib} {
			t.Fatalf("wo, open O_RDWR: data %v, want the whole file (the fallback)", segs)
		}
		woOpen = false
		must(t, unix.Close(wo))

		// A store through a shared mapping into a hole, not yet written
		// back: never in a hole.
		for _, size := range []int64{8 * mib, 500000} {
			mfd := mk("mapped", size, nil)
			mem, err := unix.Mmap(mfd, 0, int(size), unix.PROT_READ|unix.PROT_WRITE, unix.MAP_SHARED)
			must(t, err)
			copy(mem[300000:], "hello")
			rfd, err := unix.Open(p("mapped"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
			must(t, err)
			done := false
			t.Cleanup(func() { // after a failure, so that the mount can go
				if !done {
					unix.Munmap(mem)
					unix.Close(mfd)
					unix.Close(rfd)
				}
			})
			segs = dataSegments(t, rfd, size)
			if !covers(segs, 300000, 300004) {
				t.Fatalf("mapped %d: data %v hides the store at 300000", size, segs)
			}
			must(t, unix.Munmap(mem))
			must(t, unix.Close(mfd))
			segs = settle(rfd, size, func(s [][2]int64) bool { return !exact || len(s) == 1 && s[0][0] > 0 })
			if !covers(segs, 300000, 300004) {
				t.Fatalf("mapped %d, unmapped: data %v hides the store", size, segs)
			}
			if exact && (len(segs) != 1 || segs[0][0] < 300000-mib || segs[0][1] > 300005+mib) {
				t.Fatalf("mapped %d, unmapped: data %v, want one block around 300000", size, segs)
			}
			must(t, unix.Close(rfd))
			done = true
			must(t, os.Remove(p("mapped")))
		}
	}
}
