package fusefs

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"unsafe"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/conquest"
)

// probe opens path and returns a function that reports how many of the
// first n bytes' pages of it the kernel's page cache holds (mincore on a
// shared read-only mapping, which reports the page cache of a file its
// caller may write).
func probe(t *testing.T, path string, n int) func() int {
	t.Helper()
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(fd) })
	return probeFD(t, fd, n)
}

// probeFD is probe on a descriptor the caller opened.
func probeFD(t *testing.T, fd, n int) func() int {
	return func() int {
		m, err := unix.Mmap(fd, 0, n, unix.PROT_READ, unix.MAP_SHARED)
		if err != nil {
			t.Fatal(err)
		}
		defer unix.Munmap(m)
		vec := make([]byte, (n+os.Getpagesize()-1)/os.Getpagesize())
		if _, _, e := unix.Syscall(unix.SYS_MINCORE, uintptr(unsafe.Pointer(&m[0])), uintptr(n), uintptr(unsafe.Pointer(&vec[0]))); e != 0 {
			t.Fatal(e)
		}
		k := 0
		for _, v := range vec {
			k += int(v & 1)
		}
		return k
	}
}

func writeFile(t *testing.T, path string, flags int, data []byte) {
	t.Helper()
	fd, err := unix.Open(path, flags|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(fd)
	if n, err := unix.Pwrite(fd, data, 0); err != nil || n != len(data) {
		t.Fatalf("pwrite: %d, %v", n, err)
	}
}

// A handle opened O_WRONLY writes past the kernel's page cache (direct I/O)
// in write-through mode; one opened O_RDWR, and any handle with the
// writeback cache or CachedWrites, goes through it.
func TestWriteOnlyBypassesPageCache(t *testing.T) {
	const size = 256 << 10
	data := bytes.Repeat([]byte("0123456789abcdef"), size/16)
	pages := size / os.Getpagesize()
	for _, o := range []Options{{}, {WritebackCache: true}, {CachedWrites: true}} {
		cached := o.WritebackCache || o.CachedWrites
		_, mnt := mountHere(t, o)
		wo, rw := filepath.Join(mnt, "wo"), filepath.Join(mnt, "rw")
		// The probes open the files before the writes: an open after
		// them would drop the pages, for the atime of a first read
		// (atimeCache).
		writeFile(t, wo, unix.O_WRONLY, nil)
		writeFile(t, rw, unix.O_RDWR, nil)
		probeWO, probeRW := probe(t, wo, size), probe(t, rw, size)
		writeFile(t, wo, unix.O_WRONLY, data)
		writeFile(t, rw, unix.O_RDWR, data)
		if cached {
			if k := probeWO(); k != pages {
				t.Errorf("%+v: %d of %d pages written through O_WRONLY are cached, want all", o, k, pages)
			}
			continue
		}
		if k := probeWO(); k != 0 {
			t.Errorf("%d of %d pages written through O_WRONLY are in the page cache", k, pages)
		}
		if k := probeRW(); k != pages {
			t.Errorf("%d of %d pages written through O_RDWR are in the page cache (the probe sees none?)", k, pages)
		}
		for _, p := range []string{wo, rw} {
			got, err := os.ReadFile(p)
			if err != nil || !bytes.Equal(got, data) {
				t.Errorf("%s reads back wrong (%v)", p, err)
			}
		}
	}
}

// The kernel drops its cached pages of a direct write's range before it
// sends the WRITE. A read through another handle in between fetches the
// old bytes and caches them; no read after write(2) returned may see them.
// Here the read is made from the hook that runs before the WRITE is
// served, which makes that window certain. Kernels since the 2025 fix
// "fuse: invalidate the page cache after direct write" (this machine's
// 6.18 among them) drop the range again after the WRITE themselves; for
// older ones the daemon does (dropRaced, which TestDropRacedFollowsReads
// tests on its own).
func TestDirectWriteDropsRacedPages(t *testing.T) {
	srv, mnt := mountHere(t, Options{})
	const size = 64 << 10
	p, old, rd := readOnce(t, mnt, size)
	buf := make([]byte, size)
	wr, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wr)

	raced := readBeforeWrite(t, rd, old)
	fresh := bytes.Repeat([]byte{'n'}, size)
	if n, err := unix.Pwrite(wr, fresh, 0); err != nil || n != size {
		t.Fatalf("pwrite: %d, %v", n, err)
	}
	raced()
	wantRead(t, rd, buf, fresh, "direct write")
	if d := srv.Stats()["DIRECT-DROPS"]; d == 0 {
		t.Error("the daemon dropped no range after the direct write of a file read before")
	}
}

// readOnce makes file f of size bytes of 'o' under mnt and reads it
// through the descriptor it returns (closed at the end of the test), so
// that its pages are cached and a READ of it has been served.
func readOnce(t *testing.T, mnt string, size int) (p string, old []byte, rd int) {
	t.Helper()
	p = filepath.Join(mnt, "f")
	old = bytes.Repeat([]byte{'o'}, size)
	writeFile(t, p, unix.O_RDWR, old)
	rd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Close(rd) })
	if _, err := unix.Pread(rd, make([]byte, size), 0); err != nil {
		t.Fatal(err)
	}
	return p, old, rd
}

// readBeforeWrite has the first WRITE served from now on wait for a read
// of len(old) bytes through rd, which must return old: it is served by
// another reader (this one holds no lock) and caches the old bytes, as a
// read racing the write would. The returned function ends that and fails
// the test unless it happened so.
func readBeforeWrite(t *testing.T, rd int, old []byte) func() {
	t.Helper()
	var raced atomic.Int32
	var hookErr atomic.Value
	h := func(req fuse.Request) {
		if w, ok := req.(*fuse.WriteRequest); !ok || w.Flags&fuse.WriteCache != 0 || !raced.CompareAndSwap(0, 1) {
			return
		}
		b := make([]byte, len(old))
		if _, err := unix.Pread(rd, b, 0); err != nil {
			hookErr.Store(err)
		} else if !bytes.Equal(b, old) {
			hookErr.Store(errors.New("the read before the WRITE was served did not return the old bytes"))
		}
	}
	testHookServe.Store(&h)
	t.Cleanup(func() { testHookServe.Store(nil) })
	return func() {
		t.Helper()
		testHookServe.Store(nil)
		if raced.Load() == 0 {
			t.Fatal("the hook saw no WRITE")
		}
		if err, _ := hookErr.Load().(error); err != nil {
			t.Fatal(err)
		}
	}
}

// A shared mapping of a file sees what a direct write stored, at once.
func TestMappingSeesDirectWrite(t *testing.T) {
	_, mnt := mountHere(t, Options{})
	const size = 32 << 10
	p := filepath.Join(mnt, "f")
	writeFile(t, p, unix.O_RDWR, make([]byte, size))
	rd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rd)
	m, err := unix.Mmap(rd, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	wr, err := unix.Open(p, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wr)
	// The pages are faulted in by madvise, a system call: a fault in Go
	// code waits for a READ this process serves while its thread keeps
	// its P, and a collection stopping the world then never ends.
	populate := func() {
		for unix.Madvise(m, unix.MADV_POPULATE_READ) == unix.EINTR {
		}
	}
	for i := uint32(1); i <= 50; i++ {
		populate()
		var b [4]byte
		binary.LittleEndian.PutUint32(b[:], i)
		off := int64(i*4096) % size
		if _, err := unix.Pwrite(wr, b[:], off); err != nil {
			t.Fatal(err)
		}
		populate()
		if got := binary.LittleEndian.Uint32(m[off:]); got != i {
			t.Fatalf("round %d: the mapping reads %d after the write returned", i, got)
		}
	}
}

// A write by root through a write-only handle removes the file's
// capability attribute and keeps set-user-ID, as ext4 does (the kernel
// removes the capability itself only for writes into its page cache).
func TestDirectWriteRemovesCapability(t *testing.T) {
	if os.Geteuid() != 0 {
		t.Skip("needs root")
	}
	_, mnt := mountHere(t, Options{})
	// vfs_cap_data, revision 2, effective, permitted CAP_NET_RAW.
	capv := make([]byte, 20)
	binary.LittleEndian.PutUint32(capv[0:], 0x02000001)
	binary.LittleEndian.PutUint32(capv[4:], 1<<13)
	for _, flags := range []int{unix.O_WRONLY, unix.O_RDWR, unix.O_WRONLY | unix.O_APPEND} {
		p := filepath.Join(mnt, "f")
		writeFile(t, p, unix.O_RDWR, []byte("data"))
		if err := unix.Chmod(p, 0o4755); err != nil {
			t.Fatal(err)
		}
		if err := unix.Setxattr(p, "security.capability", capv, 0); err != nil {
			t.Fatal(err)
		}
		fd, err := unix.Open(p, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			t.Fatal(err)
		}
		_, err = unix.Write(fd, []byte("more"))
		unix.Close(fd)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := unix.Getxattr(p, "security.capability", make([]byte, 64)); !errors.Is(err, unix.ENODATA) {
			t.Errorf("flags %#x: security.capability after a write by root: %v, want ENODATA", flags, err)
		}
		var st unix.Stat_t
		if err := unix.Stat(p, &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_ISUID == 0 {
			t.Errorf("flags %#x: a write by root cleared set-user-ID (mode %o)", flags, st.Mode)
		}
		if err := os.Remove(p); err != nil {
			t.Fatal(err)
		}
	}
}

// Data reaches a write-only handle by sendfile and splice (the kernel
// hands the WRITE pages that are not the caller's), and from a mapping of
// the same file.
func TestDirectWriteFromKernelPagesAndMappings(t *testing.T) {
	_, mnt := mountHere(t, Options{})
	const size = 200 << 10
	src := make([]byte, size)
	for i := range src {
		src[i] = byte(i*7 + i/4096)
	}
	sp := filepath.Join(mnt, "src")
	writeFile(t, sp, unix.O_RDWR, src)
	in, err := unix.Open(sp, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(in)

	// sendfile
	dp := filepath.Join(mnt, "sendfile")
	out, err := unix.Open(dp, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var off int64
	for off < size {
		n, err := unix.Sendfile(out, in, &off, size-int(off))
		if err != nil || n == 0 {
			t.Fatalf("sendfile at %d: %d, %v", off, n, err)
		}
	}
	unix.Close(out)
	if got, err := os.ReadFile(dp); err != nil || !bytes.Equal(got, src) {
		t.Errorf("sendfile into a write-only handle: %d bytes read back, equal %v (%v)", len(got), bytes.Equal(got, src), err)
	}

	// splice from a pipe
	dp = filepath.Join(mnt, "splice")
	out, err = unix.Open(dp, unix.O_WRONLY|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	var pfd [2]int
	if err := unix.Pipe2(pfd[:], unix.O_CLOEXEC); err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		defer unix.Close(pfd[1])
		for o := 0; o < size; {
			n, err := unix.Write(pfd[1], src[o:min(o+32<<10, size)])
			if err != nil {
				t.Error(err)
				return
			}
			o += n
		}
	}()
	var woff int64
	for {
		n, err := unix.Splice(pfd[0], nil, out, &woff, 64<<10, 0)
		if err != nil {
			t.Fatalf("splice at %d: %v", woff, err)
		}
		if n == 0 {
			break
		}
	}
	wg.Wait()
	unix.Close(pfd[0])
	unix.Close(out)
	if got, err := os.ReadFile(dp); err != nil || !bytes.Equal(got, src) {
		t.Errorf("splice into a write-only handle: %d bytes read back, equal %v (%v)", len(got), bytes.Equal(got, src), err)
	}

	// write(2) from a mapping of the file written to (another range of it)
	m, err := unix.Mmap(in, 0, size, unix.PROT_READ, unix.MAP_SHARED)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Munmap(m)
	wr, err := unix.Open(sp, unix.O_WRONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	if n, err := unix.Pwrite(wr, m[:100<<10], size); err != nil || n != 100<<10 {
		t.Fatalf("pwrite from a mapping of the same file: %d, %v", n, err)
	}
	unix.Close(wr)
	want := append(append([]byte{}, src...), src[:100<<10]...)
	if got, err := os.ReadFile(sp); err != nil || !bytes.Equal(got, want) {
		t.Errorf("write from a mapping of the same file: %d bytes read back, equal %v (%v)", len(got), bytes.Equal(got, want), err)
	}
}

// Appends through write-only handles, several at once, each land whole at
// the end (the kernel places them, under the inode's lock).
func TestDirectAppends(t *testing.T) {
	_, mnt := mountHere(t, Options{})
	p := filepath.Join(mnt, "log")
	const writers, records, recSize = 4, 200, 1000
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fd, err := unix.Open(p, unix.O_WRONLY|unix.O_APPEND|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
			if err != nil {
				t.Error(err)
				return
			}
			defer unix.Close(fd)
			rec := bytes.Repeat([]byte{byte('a' + w)}, recSize)
			for range records {
				if n, err := unix.Write(fd, rec); err != nil || n != recSize {
					t.Errorf("append: %d, %v", n, err)
					return
				}
			}
		}()
	}
	wg.Wait()
	got, err := os.ReadFile(p)
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != writers*records*recSize {
		t.Fatalf("log has %d bytes, want %d", len(got), writers*records*recSize)
	}
	count := make(map[byte]int)
	for i := 0; i < len(got); i += recSize {
		r := got[i : i+recSize]
		if !bytes.Equal(r, bytes.Repeat(r[:1], recSize)) {
			t.Fatalf("record at %d is torn", i)
		}
		count[r[0]]++
	}
	for w := range writers {
		if count[byte('a'+w)] != records {
			t.Errorf("writer %d: %d records, want %d", w, count[byte('a'+w)], records)
		}
	}
}

// dropRaced drops the kernel's pages of a range only of a file that a READ
// was served for while the kernel held its inode, and a FORGET of the
// inode's last reference ends that (conquest's TestReadSinceLookup checks
// the mark itself, partial forgets included).
func TestDropRacedFollowsReads(t *testing.T) {
	srv, mnt := mountHere(t, Options{})
	const size = 64 << 10
	pages := size / os.Getpagesize()
	data := bytes.Repeat([]byte{'d'}, size)
	p := filepath.Join(mnt, "f")
	var st unix.Stat_t

	// Written through O_RDWR: cached by the write, no READ served.
	writeFile(t, p, unix.O_RDWR, nil)
	pr := probe(t, p, size)
	writeFile(t, p, unix.O_RDWR, data)
	if err := unix.Stat(p, &st); err != nil {
		t.Fatal(err)
	}
	node := conquest.Ino(st.Ino)
	srv.dropRaced(node, 0, size)
	if k := pr(); k != pages {
		t.Fatalf("%d of %d pages cached after dropRaced of a file never read, want all", k, pages)
	}

	// Rewritten through O_WRONLY (nothing cached), then read: marked.
	q := filepath.Join(mnt, "g")
	writeFile(t, q, unix.O_WRONLY, nil)
	fdq, err := unix.Open(q, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	prq := probeFD(t, fdq, size)
	writeFile(t, q, unix.O_WRONLY, data)
	if err := unix.Stat(q, &st); err != nil {
		t.Fatal(err)
	}
	nodeQ := conquest.Ino(st.Ino)
	if got, err := os.ReadFile(q); err != nil || !bytes.Equal(got, data) {
		t.Fatalf("read back: %v", err)
	}
	if k := prq(); k != pages {
		t.Fatalf("%d of %d pages cached after a read", k, pages)
	}
	srv.dropRaced(nodeQ, 0, size)
	if k := prq(); k != 0 {
		t.Fatalf("%d of %d pages still cached after dropRaced of a file read", k, pages)
	}

	// Unlinked and closed, the kernel forgets the inode: the mark goes.
	unix.Close(fdq)
	if err := os.Remove(q); err != nil {
		t.Fatal(err)
	}
	for i := 0; ; i++ {
		if !srv.fs.ReadSinceLookup(nodeQ) {
			break
		}
		if i == 500 {
			t.Fatal("the mark of a file read, unlinked and closed outlived its FORGET")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// An O_SYNC or O_DSYNC write through a write-only handle (and one with
// RWF_DSYNC) is synced before it returns, as a cached write is by the FSYNC
// the kernel sends after it; a direct write has no such FSYNC, so the
// daemon syncs (found by a review: before, such writes returned unsynced).
func TestDirectSyncWrites(t *testing.T) {
	srv, mnt := mountHere(t, Options{})
	p := filepath.Join(mnt, "f")
	for _, c := range []struct {
		name       string
		flags, rwf int
		syncs      uint64 // the daemon's own syncs expected for 10 writes
		fsyncs     uint64 // FSYNC requests expected from the kernel
	}{
		{"O_WRONLY", unix.O_WRONLY, 0, 0, 0},
		{"O_WRONLY|O_DSYNC", unix.O_WRONLY | unix.O_DSYNC, 0, 10, 0},
		{"O_WRONLY|O_SYNC", unix.O_WRONLY | unix.O_SYNC, 0, 10, 0},
		{"O_WRONLY, RWF_DSYNC", unix.O_WRONLY, unix.RWF_DSYNC, 10, 0},
		{"O_WRONLY|O_APPEND|O_DSYNC", unix.O_WRONLY | unix.O_APPEND | unix.O_DSYNC, 0, 10, 0},
		{"O_RDWR|O_DSYNC", unix.O_RDWR | unix.O_DSYNC, 0, 0, 10},
	} {
		fd, err := unix.Open(p, c.flags|unix.O_CREAT|unix.O_CLOEXEC, 0o644)
		if err != nil {
			t.Fatal(err)
		}
		before := srv.Stats()
		for i := range 10 {
			b := []byte("0123456789")
			if c.rwf != 0 {
				_, err = unix.Pwritev2(fd, [][]byte{b}, int64(i*10), c.rwf)
			} else {
				_, err = unix.Pwrite(fd, b, int64(i*10))
			}
			if err != nil {
				t.Fatalf("%s: %v", c.name, err)
			}
		}
		unix.Close(fd)
		after := srv.Stats()
		if got := after["SYNC-WRITES"] - before["SYNC-WRITES"]; got != c.syncs {
			t.Errorf("%s: the daemon synced %d of 10 writes, want %d", c.name, got, c.syncs)
		}
		if got := after["FSYNC"] - before["FSYNC"]; got != c.fsyncs {
			t.Errorf("%s: %d FSYNC requests for 10 writes, want %d", c.name, got, c.fsyncs)
		}
	}
}

func TestReleaseAtLeast(t *testing.T) {
	for _, c := range []struct {
		rel  string
		want bool
	}{
		{"6.18.44-fc-v1272", true}, {"6.7.0", true}, {"6.6.30", false}, {"5.15.0-91-generic", false},
		{"7.0", true}, {"6", false}, {"", false},
	} {
		if got := releaseAtLeast(c.rel, 6, 7); got != c.want {
			t.Errorf("releaseAtLeast(%q, 6, 7) = %v, want %v", c.rel, got, c.want)
		}
	}
}

// An O_DIRECT write through a handle of the page cache (opened O_RDWR),
// submitted asynchronously (io_submit), is followed by the same drop as a
// direct write (oDirect): the kernel queues it and skips its own drop
// after it, so a buffered read served before the WRITE (here, from the
// hook) kept the old bytes after the write had completed. In both cache
// modes; a synchronous pwrite is checked too.
func TestODirectWriteDropsRacedPages(t *testing.T) {
	for _, wb := range []bool{false, true} {
		for _, async := range []bool{true, false} {
			t.Run(fmt.Sprintf("writeback=%v,async=%v", wb, async), func(t *testing.T) {
				srv, mnt := mountHere(t, Options{WritebackCache: wb})
				const size = 64 << 10
				p, old, rd := readOnce(t, mnt, size)
				buf := make([]byte, size)
				wr, err := unix.Open(p, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
				if err != nil {
					t.Fatal(err)
				}
				defer unix.Close(wr)
				fresh := alignedBuf(t, size)
				copy(fresh, bytes.Repeat([]byte{'n'}, size))

				raced := readBeforeWrite(t, rd, old)
				drops := srv.Stats()["DIRECT-DROPS"]
				var n int
				if async {
					a := newAIO(t, 1)
					a.submit(t, wr, fresh, 0)
					res, got := a.wait(t, 1, 10*time.Second)
					if got != 1 {
						srv.Abort()
						a.wait(t, 1, 10*time.Second)
						t.Fatal("the write did not complete in 10 s")
					}
					n = res[0]
				} else if n, err = unix.Pwrite(wr, fresh, 0); err != nil {
					t.Fatal(err)
				}
				if n != size {
					t.Fatalf("write: %d, want %d", n, size)
				}
				raced()
				wantRead(t, rd, buf, fresh, "O_DIRECT write")
				if d := srv.Stats()["DIRECT-DROPS"]; d == drops {
					t.Error("the daemon dropped no range after the O_DIRECT write of a file read before")
				}
			})
		}
	}
}

// Drops never hang the mount: 64 asynchronous O_DIRECT writes, all of the
// connection's background slots, held in service until a buffered read of
// the same file has locked its pages and waits for a slot, then let go.
// Each WRITE's drop waits for those pages; before dropWait the replies
// waited for the drops, the READ was never sent, and the mount hung (a code
// review, session 50). Now every write completes, and the file reads back.
//
// Also with the connection's background slots lowered to 16 through
// fusectl: 16 writes then hold them all (a third review: with the
// threshold of waiting replies fixed at 32 they all waited without a
// bound, and hung).
func TestDropsNeverHang(t *testing.T) {
	for _, slots := range []int{maxBackground, 16} {
		t.Run(fmt.Sprintf("slots=%d", slots), func(t *testing.T) { dropsNeverHang(t, slots) })
	}
}

func dropsNeverHang(t *testing.T, writes int) {
	srv, mnt := mountHere(t, Options{})
	if srv.connNumber() == "" {
		t.Skip("the connection's number is unknown: a hang could not be ended")
	}
	if writes != maxBackground {
		if err := os.WriteFile(fusectlDir+"/"+srv.connNumber()+"/max_background", []byte(strconv.Itoa(writes)), 0); err != nil {
			t.Skipf("lowering the connection's background slots: %v", err)
		}
	}
	const chunk = 16 << 10
	size := writes * chunk
	p := filepath.Join(mnt, "f")
	writeFile(t, p, unix.O_RDWR, bytes.Repeat([]byte{'o'}, size))
	rd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(rd)
	if _, err := unix.Pread(rd, make([]byte, size), 0); err != nil { // marks the file read
		t.Fatal(err)
	}
	// Out of the cache again, so the read below must fetch and lock pages.
	if err := unix.Fadvise(rd, 0, int64(size), unix.FADV_DONTNEED); err != nil {
		t.Fatal(err)
	}
	wr, err := unix.Open(p, unix.O_RDWR|unix.O_DIRECT|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer unix.Close(wr)
	fresh := alignedBuf(t, size)
	copy(fresh, bytes.Repeat([]byte{'n'}, size))
	// Before the hook's cleanup, so that it runs after it: io_destroy
	// waits for the writes the hook holds.
	a := newAIO(t, writes)

	var inService atomic.Int32
	all := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	letGo := func() { once.Do(func() { close(release) }) }
	h := func(req fuse.Request) {
		if _, ok := req.(*fuse.WriteRequest); !ok {
			return
		}
		if int(inService.Add(1)) == writes {
			close(all)
		}
		<-release
	}
	testHookServe.Store(&h)
	t.Cleanup(func() {
		testHookServe.Store(nil)
		letGo()
	})
	for i := range writes {
		a.submit(t, wr, fresh[i*chunk:(i+1)*chunk], int64(i*chunk))
	}
	select {
	case <-all:
	case <-time.After(10 * time.Second):
		t.Logf("only %d of %d WRITEs in service at once; going on", inService.Load(), writes)
	}
	readDone := make(chan error, 1)
	go func() {
		b := make([]byte, size)
		_, err := unix.Pread(rd, b, 0)
		readDone <- err
	}()
	// The READ has locked its pages once the connection counts it waiting.
	if !waitRequests(srv, int(inService.Load())+1, 10*time.Second) {
		t.Log("the READ was not seen waiting; going on")
	}
	testHookServe.Store(nil)
	letGo()

	res, got := a.wait(t, writes, 20*time.Second)
	if got < writes {
		// The hang: end it (an exiting process waits for its AIO), so
		// that the test ends.
		if err := srv.Abort(); err != nil {
			t.Error(err)
		}
		a.wait(t, writes-got, 10*time.Second)
		select {
		case <-readDone:
		case <-time.After(10 * time.Second):
		}
		t.Fatalf("%d of %d writes completed in 20 s (late drops %d)", got, writes, srv.Stats()["LATE-DROPS"])
	}
	for i, n := range res {
		if n != chunk {
			t.Errorf("write %d: %d", i, n)
		}
	}
	select {
	case err := <-readDone:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(20 * time.Second):
		t.Fatal("the read did not return")
	}
	if srv.Stats()["LATE-DROPS"] == 0 {
		t.Error("no reply went out before its drop ended: the congestion was not reached")
	}
	back := make([]byte, size)
	if _, err := unix.Pread(rd, back, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(back, fresh) {
		t.Error("the file does not read back as written")
	}
}

// waitRequests waits, up to limit, until the kernel counts at least n
// requests of srv's connection waiting (queued or in service: fusectl's
// "waiting"), and reports whether it did.
func waitRequests(srv *Server, n int, limit time.Duration) bool {
	deadline := time.Now().Add(limit)
	for time.Now().Before(deadline) {
		b, err := os.ReadFile(fusectlDir + "/" + srv.connNumber() + "/waiting")
		if err != nil {
			return false
		}
		if k, err := strconv.Atoi(strings.TrimSpace(string(b))); err == nil && k >= n {
			return true
		}
		time.Sleep(5 * time.Millisecond)
	}
	return false
}

// alignedBuf is size bytes of an anonymous mapping (page-aligned, as
// O_DIRECT wants), unmapped at the end of the test.
func alignedBuf(t *testing.T, size int) []byte {
	t.Helper()
	b, err := unix.Mmap(-1, 0, size, unix.PROT_READ|unix.PROT_WRITE, unix.MAP_PRIVATE|unix.MAP_ANONYMOUS)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { unix.Munmap(b) })
	return b
}

// aio is a Linux AIO context (io_setup), for asynchronous O_DIRECT writes,
// which the kernel's FUSE module queues instead of waiting for each.
type aio struct {
	ctx uintptr
	cbs []*iocb
}

// iocb is the kernel's struct iocb (64 bytes, little-endian layout).
type iocb struct {
	data     uint64
	key      uint32
	rwFlags  int32
	opcode   uint16
	reqprio  int16
	fildes   uint32
	buf      uint64
	nbytes   uint64
	offset   int64
	reserved uint64
	flags    uint32
	resfd    uint32
}

// ioEvent is the kernel's struct io_event.
type ioEvent struct {
	data, obj uint64
	res, res2 int64
}

func newAIO(t *testing.T, depth int) *aio {
	t.Helper()
	a := &aio{}
	if _, _, e := unix.Syscall(unix.SYS_IO_SETUP, uintptr(depth), uintptr(unsafe.Pointer(&a.ctx)), 0); e != 0 {
		t.Skipf("io_setup: %v", e)
	}
	t.Cleanup(func() { unix.Syscall(unix.SYS_IO_DESTROY, a.ctx, 0, 0) })
	return a
}

// submit queues a write of buf (which must stay mapped until it is
// waited for) at off; its result comes back from wait in submission order.
func (a *aio) submit(t *testing.T, fd int, buf []byte, off int64) {
	t.Helper()
	cb := &iocb{data: uint64(len(a.cbs)), opcode: 1, // IOCB_CMD_PWRITE
		fildes: uint32(fd), buf: uint64(uintptr(unsafe.Pointer(&buf[0]))), nbytes: uint64(len(buf)), offset: off}
	a.cbs = append(a.cbs, cb)
	list := [1]*iocb{cb}
	if n, _, e := unix.Syscall(unix.SYS_IO_SUBMIT, a.ctx, 1, uintptr(unsafe.Pointer(&list[0]))); e != 0 || n != 1 {
		t.Fatalf("io_submit: %d, %v", n, e)
	}
}

// wait collects up to n completions within limit and returns the results
// by submission order (bytes written, or a negative errno) and how many
// came.
func (a *aio) wait(t *testing.T, n int, limit time.Duration) ([]int, int) {
	res := make([]int, len(a.cbs))
	evs := make([]ioEvent, n)
	deadline := time.Now().Add(limit)
	got := 0
	for got < n {
		left := time.Until(deadline)
		if left <= 0 {
			break
		}
		ts := unix.NsecToTimespec(left.Nanoseconds())
		k, _, e := unix.Syscall6(unix.SYS_IO_GETEVENTS, a.ctx, 1, uintptr(n-got),
			uintptr(unsafe.Pointer(&evs[got])), uintptr(unsafe.Pointer(&ts)), 0)
		if e == unix.EINTR {
			continue
		}
		if e != 0 {
			t.Errorf("io_getevents: %v", e)
			break
		}
		for _, ev := range evs[got : got+int(k)] {
			res[ev.data] = int(ev.res)
		}
		got += int(k)
	}
	return res, got
}

// wantRead reads rd from its start into buf and fails unless it holds want,
// which the write named by what stored.
func wantRead(t *testing.T, rd int, buf, want []byte, what string) {
	t.Helper()
	if _, err := unix.Pread(rd, buf, 0); err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(buf, want) {
		t.Fatalf("a read after the %s returned: %q..., want %q...", what, buf[:8], want[:8])
	}
}
