package conquest

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"math/rand"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"conquest/diskstore"
	"conquest/internal/racetest"
	"conquest/pram"
)

// writeFile writes data at 0 through handle h in FUSE-sized pieces.
func writeFile(t *testing.T, fs *FS, ino Ino, h Handle, off int64, data []byte) {
	t.Helper()
	const piece = 128 << 10
	for done := 0; done < len(data); {
		n := min(piece, len(data)-done)
		w, err := fs.Write(ino, h, off+int64(done), data[done:done+n], false)
		if err != nil || w != n {
			t.Fatalf("write at %d: %d, %v", off+int64(done), w, err)
		}
		done += n
	}
}

// readFile reads the whole file through handle h in FUSE-sized pieces.
func readFile(t *testing.T, fs *FS, ino Ino, h Handle) []byte {
	t.Helper()
	at, err := fs.GetAttr(ino)
	must(t, err)
	out := make([]byte, at.Size)
	const piece = 128 << 10
	for off := 0; off < len(out); {
		n, err := fs.Read(ino, h, int64(off), out[off:min(len(out), off+piece)])
		if err != nil || n == 0 {
			t.Fatalf("read at %d of %d: %d, %v", off, len(out), n, err)
		}
		off += n
	}
	return out
}

// makeFile creates name with data, written through a handle and closed.
func makeFile(t *testing.T, fs *FS, name string, data []byte) Ino {
	t.Helper()
	at, h, err := fs.Create(RootIno, name, 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	writeFile(t, fs, at.Ino, h, 0, data)
	fs.Release(at.Ino, h)
	return at.Ino
}

func isLarge(t *testing.T, fs *FS, ino Ino) bool {
	t.Helper()
	var disk bool
	must(t, fs.read(func() error {
		in, err := fs.inode(ino)
		disk = err == nil && in.onDisk()
		return err
	}))
	return disk
}

// TestDiskThresholdSizes: files just below, at and above the default
// 1 MiB threshold (and 1.01 MB) are written, read back, survive a reopen,
// and live in the arena (up to 1 MiB) or on disk (above).
func TestDiskThresholdSizes(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true, threshold: 1 << 20, diskBlock: 64 << 10, diskSize: 32 << 20, size: 64 << 20})
	sizes := []int{1<<20 - 1, 1 << 20, 1<<20 + 1, 1_010_000, 1_059_062} // 1.01 MB, 1.01 MiB
	inos := make([]Ino, len(sizes))
	for i, n := range sizes {
		inos[i] = makeFile(t, fs, sprintf("f%d", i), pattern(n, byte(i+1)))
	}
	verify := func(fs *FS) {
		t.Helper()
		for i, n := range sizes {
			got := readAll(t, fs, inos[i])
			if !bytes.Equal(got, pattern(n, byte(i+1))) {
				t.Fatalf("file of %d bytes reads back wrong", n)
			}
			if large := isLarge(t, fs, inos[i]); large != (n > 1<<20) {
				t.Errorf("file of %d bytes: on disk = %v", n, large)
			}
		}
		u := fs.Usage()
		if u.SmallFiles != 3 || u.LargeFiles != 2 || u.LargeFileBytes != uint64(sizes[2]+sizes[4]) ||
			u.SmallFileBytes != uint64(sizes[0]+sizes[1]+sizes[3]) || u.FileAllocated < u.SmallFileBytes ||
			u.DiskUsed < uint64(sizes[2]+sizes[4]) || u.DiskUsed > 4<<20 || u.LargeFileThreshold != 1<<20 {
			t.Errorf("usage %+v", u)
		}
		at, _ := fs.GetAttr(inos[4])
		if at.Blocks*512 < uint64(sizes[4]) || at.Blocks*512 > 2<<20 {
			t.Errorf("st_blocks %d for %d bytes", at.Blocks, sizes[4])
		}
	}
	verify(fs)
	fs = env.reopen(fs)
	verify(fs)
	st := fs.StatFS()
	u := fs.Usage()
	if st.Blocks*BlockSize != u.HeapBytes/BlockSize*BlockSize+u.DiskBytes {
		t.Errorf("statfs blocks %d, heap %d + disk %d bytes", st.Blocks, u.HeapBytes, u.DiskBytes)
	}
}

// TestDiskLargeFile100MB writes and reads a 100 MB file on a file-backed
// disk through handles (sequential, with readahead), compares hashes after
// a reopen, and reports throughput.
func TestDiskLargeFile100MB(t *testing.T) {
	if testing.Short() {
		t.Skip("short")
	}
	size := 100 << 20
	if racetest.Reduced(t) {
		size = 24 << 20
	}
	fs, env := newTestFSOpt(t, fsOpt{disk: true, threshold: 1 << 20, diskBlock: 64 << 10, diskSize: 128 << 20, size: 64 << 20})
	data := pattern(size, 3)
	want := sha256.Sum256(data)
	at, h, err := fs.Create(RootIno, "big", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	start := time.Now()
	writeFile(t, fs, at.Ino, h, 0, data)
	must(t, fs.Fsync(at.Ino, false))
	wdur := time.Since(start)
	fs.Release(at.Ino, h)
	h, err = fs.Open(at.Ino, 0)
	must(t, err)
	start = time.Now()
	got := readFile(t, fs, at.Ino, h)
	rdur := time.Since(start)
	fs.Release(at.Ino, h)
	if sha256.Sum256(got) != want {
		t.Fatal("100 MB file reads back wrong")
	}
	t.Logf("%d MB: sequential write+fsync %.0f MB/s, read %.0f MB/s (in-process, file-backed disk, 128 KiB requests)",
		size>>20, float64(size)/wdur.Seconds()/1e6, float64(size)/rdur.Seconds()/1e6)
	fs = env.reopen(fs)
	if sha256.Sum256(readAll(t, fs, at.Ino)) != want {
		t.Fatal("100 MB file differs after reopen")
	}
	if u := fs.Usage(); u.DiskUsed < uint64(size) || u.DiskUsed > uint64(size)+(1<<20) {
		t.Errorf("disk used %d for a %d-byte file (trimmed at close)", u.DiskUsed, size)
	}
	must(t, fs.Unlink(RootIno, "big"))
	fs.Forget(at.Ino, 1)
	if u := fs.Usage(); u.DiskUsed != 0 {
		t.Errorf("disk used %d after unlink", u.DiskUsed)
	}
}

// TestDiskGrowAndShrink grows a file across the threshold by appends,
// truncates it a little (it stays on disk), then well below (it moves back
// into the arena), then grows it by truncate (sparse, on disk).
func TestDiskGrowAndShrink(t *testing.T) {
	const th = 64 << 10
	fs, env := newTestFSOpt(t, fsOpt{disk: true})
	at, h, err := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR|O_APPEND, user)
	must(t, err)
	var model []byte
	for i := 0; len(model) < 3*th; i++ {
		chunk := pattern(10000, byte(i))
		n, err := fs.Write(at.Ino, h, 0, chunk, false)
		if err != nil || n != len(chunk) {
			t.Fatalf("append %d: %d, %v", i, n, err)
		}
		model = append(model, chunk...)
		if large := isLarge(t, fs, at.Ino); large != (len(model) > th) {
			t.Fatalf("size %d: on disk = %v", len(model), large)
		}
	}
	if !bytes.Equal(readAll(t, fs, at.Ino), model) {
		t.Fatal("appended file reads back wrong")
	}
	fs.Release(at.Ino, h)
	truncate := func(size int) {
		t.Helper()
		_, err := fs.SetAttr(at.Ino, SetAttr{Valid: SetSize, Size: uint64(size)}, user)
		must(t, err)
		if size <= len(model) {
			model = model[:size]
		} else {
			model = append(model, make([]byte, size-len(model))...)
		}
		if got := readAll(t, fs, at.Ino); !bytes.Equal(got, model) {
			t.Fatalf("after truncate to %d: contents differ", size)
		}
	}
	truncate(th - 1000) // below the threshold, above half: stays on disk
	if !isLarge(t, fs, at.Ino) {
		t.Fatal("file truncated just below the threshold moved back")
	}
	truncate(th/2 - 7) // well below: back into the arena
	if isLarge(t, fs, at.Ino) {
		t.Fatal("file truncated to half the threshold stayed on disk")
	}
	if u := fs.Usage(); u.DiskUsed != 0 || u.LargeFiles != 0 {
		t.Fatalf("after moving back: %+v", u)
	}
	truncate(5 * th) // sparse growth past the threshold: to disk
	if !isLarge(t, fs, at.Ino) {
		t.Fatal("file grown by truncate stayed in the arena")
	}
	fs = env.reopen(fs)
	if got := readAll(t, fs, at.Ino); !bytes.Equal(got, model) {
		t.Fatal("contents differ after reopen")
	}
	truncate(0)
	if isLarge(t, fs, at.Ino) {
		t.Fatal("empty file stayed on disk")
	}
}

// TestDiskNamesAndOpenUnlink: a large file renamed, hard-linked, and
// unlinked while open keeps its data; its disk space is freed when the last
// handle goes.
func TestDiskNamesAndOpenUnlink(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true})
	data := pattern(300<<10, 9)
	ino := makeFile(t, fs, "a", data)
	must(t, fs.Rename(RootIno, "a", RootIno, "b", 0))
	_, err := fs.Link(ino, RootIno, "c")
	must(t, err)
	fs.Forget(ino, 1)
	must(t, fs.Unlink(RootIno, "b"))
	if !bytes.Equal(readAll(t, fs, ino), data) {
		t.Fatal("linked large file reads wrong")
	}
	h, err := fs.Open(ino, O_RDWR)
	must(t, err)
	must(t, fs.Unlink(RootIno, "c"))
	writeFile(t, fs, ino, h, int64(len(data)), pattern(100<<10, 1))
	if got := readFile(t, fs, ino, h); !bytes.Equal(got[:len(data)], data) || len(got) != len(data)+100<<10 {
		t.Fatal("unlinked open file reads wrong")
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check with an open unlinked large file: %v", errs)
	}
	fs.Release(ino, h)
	fs.Forget(ino, 1) // the kernel reference of makeFile's Create
	if u := fs.Usage(); u.DiskUsed != 0 || u.Orphans != 0 {
		t.Fatalf("after last close of unlinked file: %+v", u)
	}
	// Unlinked while open, then unmounted: Open... Close frees it.
	ino = makeFile(t, fs, "d", data)
	h, err = fs.Open(ino, 0)
	must(t, err)
	must(t, fs.Unlink(RootIno, "d"))
	fs = env.reopen(fs)
	if u := fs.Usage(); u.DiskUsed != 0 || u.Orphans != 0 {
		t.Fatalf("after reopen: %+v", u)
	}
	_ = h
}

// TestDiskSparseHuge: one byte at 5 GiB on a disk of a few MiB.
func TestDiskSparseHuge(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true, diskSize: 4 << 20})
	at, h, err := fs.Create(RootIno, "sparse", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	const off = 5 << 30
	n, err := fs.Write(at.Ino, h, off, []byte{42}, false)
	if err != nil || n != 1 {
		t.Fatalf("write at 5 GiB: %d, %v", n, err)
	}
	fs.Release(at.Ino, h)
	check := func(fs *FS) {
		t.Helper()
		a, err := fs.GetAttr(at.Ino)
		must(t, err)
		if a.Size != off+1 || a.Blocks*512 > 64<<10 {
			t.Fatalf("attr %+v", a)
		}
		buf := make([]byte, 8192)
		n, err := fs.Read(at.Ino, 0, off-8191, buf)
		if err != nil || n != 8192 || buf[8191] != 42 || !bytes.Equal(buf[:8191], make([]byte, 8191)) {
			t.Fatalf("read at the end: %d, %v", n, err)
		}
		n, err = fs.Read(at.Ino, 0, 1<<30, buf)
		if err != nil || n != 8192 || !bytes.Equal(buf, make([]byte, 8192)) {
			t.Fatalf("read in the hole: %d, %v", n, err)
		}
	}
	check(fs)
	fs = env.reopen(fs)
	check(fs)
	_, err = fs.Write(at.Ino, 0, diskstore.MaxFileSize, []byte{1}, false)
	mustErr(t, err, ErrFileTooBig)
	_, err = fs.SetAttr(at.Ino, SetAttr{Valid: SetSize, Size: 3 << 30}, user)
	must(t, err)
	must(t, fs.Unlink(RootIno, "sparse"))
}

// TestDiskPairing: Open refuses a disk of another file system, a missing
// disk, and a disk for a diskless arena, naming both paths.
func TestDiskPairing(t *testing.T) {
	dir := t.TempDir()
	a1, d1 := filepath.Join(dir, "a1"), filepath.Join(dir, "d1")
	a2, d2 := filepath.Join(dir, "a2"), filepath.Join(dir, "d2")
	a3 := filepath.Join(dir, "a3")
	for _, p := range [][2]string{{a1, d1}, {a2, d2}} {
		must(t, Mkfs(p[0], p[1], MkfsOptions{PramSize: 4 << 20, DiskSize: 4 << 20}))
	}
	must(t, Mkfs(a3, "", MkfsOptions{PramSize: 4 << 20}))
	_, err := Open(a1, d2, Options{})
	if !errors.Is(err, diskstore.ErrUUIDMismatch) || !strings.Contains(err.Error(), a1) || !strings.Contains(err.Error(), d2) {
		t.Fatalf("Open(a1, d2) = %v", err)
	}
	if _, err := Open(a1, "", Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open without the disk = %v", err)
	}
	if _, err := Open(a3, d1, Options{}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Open of a diskless arena with a disk = %v", err)
	}
	if err := Mkfs(filepath.Join(dir, "a4"), filepath.Join(dir, "d4"), MkfsOptions{PramSize: 4 << 20}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Mkfs of a new disk image without a size = %v", err)
	}
	if err := Mkfs(filepath.Join(dir, "a5"), d1, MkfsOptions{PramSize: 4 << 20, LargeFileThreshold: 1}); !errors.Is(err, ErrInvalid) {
		t.Fatalf("Mkfs with a 1-byte threshold = %v", err)
	}
	fs, err := Open(a1, d1, Options{}) // the right pair (and nothing above broke it)
	must(t, err)
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	must(t, fs.Close())
}

// TestDiskChecksumEIO: data damaged on the disk fails the read with EIO,
// logged with the inode, offset and disk block, and Check reports it.
func TestDiskChecksumEIO(t *testing.T) {
	mem := diskstore.NewMemDevice(16 << 20)
	fs, env := newTestFSOpt(t, fsOpt{dev: mem, noCheck: true})
	data := pattern(200<<10, 5)
	ino := makeFile(t, fs, "f", data)
	other := makeFile(t, fs, "g", pattern(100<<10, 6))
	must(t, fs.Fsync(ino, false))
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check before damage: %v", errs)
	}
	// Flip one byte in every written disk block of the first file: its
	// blocks come first on a fresh disk (block 0 is the superblock).
	disk := env.dev.(*diskstore.MemDevice).Bytes()
	for off := 4096; off < 4096+len(data); off += 4096 {
		disk[off+100] ^= 0xff
	}
	buf := make([]byte, 4096)
	_, err := fs.Read(ino, 0, 8192, buf)
	mustErr(t, err, ErrIO)
	if !env.logged(sprintf("inode %d, offset 8192, disk block 3", ino)) {
		t.Errorf("no log naming inode, offset and block: %q", env.logs)
	}
	if got := readAll(t, fs, other); !bytes.Equal(got, pattern(100<<10, 6)) {
		t.Fatal("undamaged file reads wrong")
	}
	errs := fs.Check()
	if len(errs) < len(data)/4096 {
		t.Fatalf("Check found %d problems, want one per damaged block: %v", len(errs), errs)
	}
	if len(fs.CheckWith(CheckOptions{})) != 0 {
		t.Fatal("metadata-only check read the data")
	}
	if u := fs.Usage(); u.DiskChecksumErrors == 0 {
		t.Fatal("checksum errors not counted")
	}
	// The file can still be removed; the file system stays consistent.
	must(t, fs.Unlink(RootIno, "f"))
	fs.Forget(ino, 1)
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after removing the damaged file: %v", errs)
	}
}

// TestDiskDroppedWrites: a disk that acknowledges writes it never stores is
// caught by the checksums: EIO on read, fsck reports every such block.
func TestDiskDroppedWrites(t *testing.T) {
	cd := diskstore.NewCrashDevice(16 << 20)
	fs, env := newTestFSOpt(t, fsOpt{dev: cd, noCheck: true})
	env.dev.(*diskstore.CrashDevice).SetDropFilter(func(off int64, n int) bool { return off >= 4096 })
	ino := makeFile(t, fs, "f", pattern(150<<10, 7))
	must(t, fs.Fsync(ino, false))
	_, err := fs.Read(ino, 0, 0, make([]byte, 4096))
	mustErr(t, err, ErrIO)
	var progress [2]uint64
	errs := fs.CheckWith(CheckOptions{VerifyData: true, Progress: func(done, total uint64) { progress = [2]uint64{done, total} }})
	if len(errs) == 0 {
		t.Fatal("Check does not see the dropped writes")
	}
	if progress[0] == 0 || progress[0] != progress[1] {
		t.Errorf("progress %v", progress)
	}
	env.dev.(*diskstore.CrashDevice).SetDropFilter(nil)
	must(t, fs.Unlink(RootIno, "f"))
	fs.Forget(ino, 1)
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after removing the file: %v", errs)
	}
}

// TestDiskFaults: device errors reach the caller as EIO or ENOSPC, the file
// system stays usable and consistent, and nothing leaks.
func TestDiskFaults(t *testing.T) {
	for _, mode := range []diskstore.Durability{diskstore.DurableOnProcessCrash, diskstore.GatherInMemory} {
		t.Run(mode.String(), func(t *testing.T) { testDiskFaults(t, mode) })
	}
}

func testDiskFaults(t *testing.T, mode diskstore.Durability) {
	gather := mode == diskstore.GatherInMemory
	mem := diskstore.NewMemDevice(8 << 20)
	fs, env := newTestFSOpt(t, fsOpt{dev: mem, diskSize: 8 << 20, diskOpts: diskstore.Options{Durability: mode}})
	var fd *diskstore.FaultDevice
	env.wrap = func(d diskstore.Device) diskstore.Device { fd = diskstore.NewFaultDevice(d, nil); return fd }
	fs = env.reopen(fs)
	good := pattern(200<<10, 1)
	ino := makeFile(t, fs, "good", good)

	// EIO on every write: moving a file to disk, fsync and close fail.
	at, h, err := fs.Create(RootIno, "bad", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	first := pattern(100<<10, 2)
	writeFile(t, fs, at.Ino, h, 0, first[:50<<10])
	fd.SetInjector(diskstore.FromNth(diskstore.OpWrite, 1, diskstore.FaultEIO))
	_, err = fs.Write(at.Ino, h, 50<<10, first[50<<10:], false)
	mustErr(t, err, ErrIO) // crossing the threshold writes the arena copy through
	if a, _ := fs.GetAttr(at.Ino); a.Size != 50<<10 || isLarge(t, fs, at.Ino) {
		t.Fatalf("failed write changed the file: %+v", a)
	}
	fd.SetInjector(nil)
	writeFile(t, fs, at.Ino, h, 50<<10, first[50<<10:])
	if !isLarge(t, fs, at.Ino) {
		t.Fatal("file did not move to disk")
	}
	tail := pattern(20<<10, 3)
	fd.SetInjector(diskstore.FromNth(diskstore.OpWrite|diskstore.OpSync, 1, diskstore.FaultEIO))
	if gather {
		writeFile(t, fs, at.Ino, h, 100<<10, tail) // gathered: no I/O yet
		mustErr(t, fs.Fsync(at.Ino, false), ErrIO)
		fd.SetInjector(diskstore.FromNth(diskstore.OpWrite, 1, diskstore.FaultShort))
		mustErr(t, fs.Fsync(at.Ino, false), ErrIO)
	} else {
		_, err = fs.Write(at.Ino, h, 100<<10, tail, false)
		mustErr(t, err, ErrIO) // written through at once
		fd.SetInjector(diskstore.FromNth(diskstore.OpWrite, 1, diskstore.FaultShort))
		_, err = fs.Write(at.Ino, h, 100<<10, tail, false)
		mustErr(t, err, ErrIO)
		if a, _ := fs.GetAttr(at.Ino); a.Size != 100<<10 {
			t.Fatalf("failed writes changed the size to %d", a.Size)
		}
		fd.SetInjector(nil)
		writeFile(t, fs, at.Ino, h, 100<<10, tail)
	}
	fd.SetInjector(nil)
	must(t, fs.Fsync(at.Ino, false)) // gathered data stayed gathered: the retry works
	want := append(pattern(100<<10, 2), tail...)
	if got := readFile(t, fs, at.Ino, h); !bytes.Equal(got, want) {
		t.Fatal("file differs after failed and retried fsync")
	}
	fs.Release(at.Ino, h)

	// EIO on reads.
	fd.SetInjector(diskstore.FromNth(diskstore.OpRead, 1, diskstore.FaultEIO))
	_, err = fs.Read(ino, 0, 0, make([]byte, 4096))
	mustErr(t, err, ErrIO)
	fd.SetInjector(nil)
	if !bytes.Equal(readAll(t, fs, ino), good) {
		t.Fatal("file reads wrong after a failed read")
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check after I/O errors: %v", errs)
	}

	// The disk fills up: ENOSPC, nothing leaks, space comes back.
	u0 := fs.Usage()
	at, h, err = fs.Create(RootIno, "huge", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	total := 0
	for err == nil {
		var n int
		n, err = fs.Write(at.Ino, h, int64(total), pattern(128<<10, 4), false)
		total += n
		if total > 16<<20 {
			t.Fatal("wrote more than the disk holds")
		}
	}
	mustErr(t, err, ErrNoSpace)
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatalf("Check on a full disk: %v", errs)
	}
	hg := openRW(t, fs, ino, O_RDWR)
	err = fs.Fallocate(ino, 0, 64<<20, 0)
	mustErr(t, err, ErrNoSpace)
	// The size is as before (TestFallocateNoSpaceKeepsSize), and so are
	// the file's bytes; what it reserved past the end (with gathered
	// writes the disk still had room) is given back at the last close.
	if a, _ := fs.GetAttr(ino); a.Size != uint64(len(good)) || !bytes.Equal(readAll(t, fs, ino), good) {
		t.Fatalf("a failed fallocate changed the file: size %d, want %d", a.Size, len(good))
	}
	fs.Release(ino, hg)
	fs.Release(at.Ino, h)
	must(t, fs.Unlink(RootIno, "huge"))
	fs.Forget(at.Ino, 1)
	if u := fs.Usage(); u.DiskUsed != u0.DiskUsed {
		t.Fatalf("disk used %d after removing the big file, was %d", u.DiskUsed, u0.DiskUsed)
	}
	if u := fs.Usage(); u.DiskIOErrors == 0 {
		t.Fatal("I/O errors not counted")
	}
}

// TestDiskCrashNoForeignData runs a workload of large-file writes,
// truncates, fsyncs, unlinks and re-creations, crashes it at random
// journaled stores (and at the same instant the disk loses, keeps in part,
// reorders or tears its unsynced writes), and checks after reopen: Check is
// clean, every byte of every file is its own (each incarnation of a file
// writes only its own byte value) or zero, and every file fsync'd and not
// modified since is exactly as it was at the fsync.
func TestDiskCrashNoForeignData(t *testing.T) {
	for _, mode := range []diskstore.Durability{diskstore.DurableOnProcessCrash, diskstore.GatherInMemory} {
		t.Run(mode.String(), func(t *testing.T) { testDiskCrashNoForeignData(t, mode) })
	}
}

func testDiskCrashNoForeignData(t *testing.T, mode diskstore.Durability) {
	seed := int64(time.Now().UnixNano() & 0xffffffff)
	if s := os.Getenv("CRASH_SEED"); s != "" {
		seed, _ = strconv.ParseInt(s, 10, 64)
	}
	t.Logf("seed %d", seed)
	const slots = 6
	type wop struct{ kind, slot, off, n int }
	r := rand.New(rand.NewSource(seed))
	var ops []wop
	for i := 0; i < 50; i++ {
		ops = append(ops, wop{r.Intn(6), r.Intn(slots), r.Intn(200 << 10), 1 + r.Intn(150<<10)})
	}
	dir := t.TempDir()
	P, R := filepath.Join(dir, "p"), filepath.Join(dir, "r")
	pdev := diskstore.NewCrashDevice(16 << 20)
	must(t, Mkfs(P, "", MkfsOptions{PramSize: 8 << 20, Device: pdev, LargeFileThreshold: 16 << 10, DiskBlockSize: 4096}))
	opts := Options{Logf: func(string, ...any) {},
		Disk: diskstore.Options{Durability: mode, FileBuffer: 64 << 10, MaxExtent: 128 << 10, SyncBytes: 512 << 10,
			// The writer syncs itself: where a background sync lands changes
			// which stores the next operation makes, and the crash points count them.
			ForegroundSync: true}}
	img := readImage(t, P)

	type fileModel struct {
		id      byte
		ids     map[byte]bool // every incarnation's id so far
		data    []byte
		synced  []byte // contents at the last fsync, nil if modified since
		syncIdx int
	}
	// run applies ops[:] to a fresh copy of P; done counts completed ops.
	run := func(fs *FS, done *int, models []*fileModel) {
		nextID := byte(slots + 1)
		for i := range models {
			models[i] = &fileModel{id: byte(i + 1), ids: map[byte]bool{byte(i + 1): true}}
			at, h, err := fs.Create(RootIno, sprintf("f%d", i), 0o644, O_CREAT|O_RDWR, user)
			must(t, err)
			fs.Release(at.Ino, h)
			fs.Forget(at.Ino, 1)
		}
		*done = 0
		for _, o := range ops {
			m := models[o.slot]
			name := sprintf("f%d", o.slot)
			ino, err := resolve(fs, name)
			must(t, err)
			switch o.kind {
			case 0, 1: // write
				off := min(o.off, len(m.data))
				b := bytes.Repeat([]byte{m.id}, o.n)
				if _, err := fs.Write(ino, 0, int64(off), b, false); err != nil {
					t.Fatalf("write: %v", err)
				}
				if off+o.n > len(m.data) {
					m.data = append(m.data, make([]byte, off+o.n-len(m.data))...)
				}
				copy(m.data[off:], b)
				m.synced = nil
			case 2: // truncate
				size := o.off + o.n/2
				_, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: uint64(size)}, user)
				must(t, err)
				if size > len(m.data) {
					m.data = append(m.data, make([]byte, size-len(m.data))...)
				}
				m.data = m.data[:size]
				m.synced = nil
			case 3, 4: // fsync
				must(t, fs.Fsync(ino, false))
				m.synced = append([]byte{}, m.data...)
			case 5: // unlink, create again with a new id
				must(t, fs.Unlink(RootIno, name))
				at, h, err := fs.Create(RootIno, name, 0o644, O_CREAT|O_RDWR, user)
				must(t, err)
				fs.Release(at.Ino, h)
				fs.Forget(at.Ino, 1)
				m.id, nextID = nextID, nextID+1
				m.ids[m.id] = true
				m.data, m.synced = nil, nil
			}
			*done++
		}
	}
	// The clean run: count the stores.
	restoreImage(t, R, img)
	fs, err := Open(R, "", withDevice(opts, pdev.Reopen()))
	must(t, err)
	var done int
	models := make([]*fileModel, slots)
	k := countStores(fs, func() { run(fs, &done, models) })
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	must(t, fs.Close())

	trials := 12
	if racetest.Reduced(t) {
		trials = 5
	}
	for trial := 0; trial < trials; trial++ {
		n := 1 + r.Intn(k)
		restoreImage(t, R, img)
		dev := pdev.Reopen()
		fs, err := Open(R, "", withDevice(opts, dev))
		must(t, err)
		if !crashDuring(fs, n, func() { run(fs, &done, models) }) {
			t.Fatalf("no crash at store %d of %d", n, k)
		}
		mode := diskstore.CrashMode(r.Intn(3))
		fs, err = Open(R, "", withDevice(opts, dev.Crash(mode, uint64(r.Int63()))))
		must(t, err)
		if errs := fs.Check(); len(errs) > 0 {
			t.Fatalf("crash at store %d/%d (after %d ops, mode %d): Check: %v", n, k, done, mode, errs)
		}
		for i, m := range models {
			ino, err := resolve(fs, sprintf("f%d", i))
			if err != nil {
				continue // between unlink and create
			}
			got := readAll(t, fs, ino)
			for off, c := range got {
				if c != 0 && !m.ids[c] {
					t.Fatalf("crash at store %d/%d: f%d byte %d is %d, not its own (%v) nor zero", n, k, i, off, c, m.ids)
				}
			}
			inFlight := done < len(ops) && ops[done].slot == i
			if m.synced != nil && !inFlight && !bytes.Equal(got, m.synced) {
				t.Fatalf("crash at store %d/%d (mode %d): fsync'd f%d (%d bytes) reads %d bytes, differs", n, k, mode, i, len(m.synced), len(got))
			}
		}
		must(t, fs.a.Abandon())
	}
}

func withDevice(o Options, d diskstore.Device) Options {
	o.Device = d
	return o
}

// TestDiskMoveInSteps: with a 2 MiB threshold the arena copy of a file
// moving to disk is more than one transaction frees; the move commits with
// the file on disk and the rest of the arena copy on the orphan list, freed
// next. A crash at any store of the move leaves the old file or the new
// one, intact, and Check clean.
func TestDiskMoveInSteps(t *testing.T) {
	for _, mode := range []diskstore.Durability{diskstore.DurableOnProcessCrash, diskstore.GatherInMemory} {
		t.Run(mode.String(), func(t *testing.T) { testDiskMoveInSteps(t, mode) })
	}
}

func testDiskMoveInSteps(t *testing.T, mode diskstore.Durability) {
	const th = 2 << 20
	dir := t.TempDir()
	P, R := filepath.Join(dir, "p"), filepath.Join(dir, "r")
	pdev := diskstore.NewCrashDevice(8 << 20)
	must(t, Mkfs(P, "", MkfsOptions{PramSize: 16 << 20, Device: pdev, LargeFileThreshold: th, DiskBlockSize: 64 << 10}))
	old := pattern(th, 1)
	opts := Options{Disk: diskstore.Options{Durability: mode}, Logf: func(string, ...any) {}}
	fs, err := Open(P, "", withDevice(opts, pdev.Reopen()))
	must(t, err)
	ino := makeFile(t, fs, "f", old)
	if isLarge(t, fs, ino) {
		t.Fatal("file at the threshold is on disk")
	}
	must(t, fs.Close())
	img := readImage(t, P)
	grow := func(fs *FS) { _, _ = fs.Write(ino, 0, th, []byte("tail"), false) }
	newData := append(append([]byte{}, old...), "tail"...)

	restoreImage(t, R, img)
	fs, err = Open(R, "", withDevice(opts, pdev.Reopen()))
	must(t, err)
	k := countStores(fs, func() { grow(fs) })
	if !isLarge(t, fs, ino) || !bytes.Equal(readAll(t, fs, ino), newData) {
		t.Fatal("file did not move to disk intact")
	}
	if errs := fs.Check(); len(errs) > 0 {
		t.Fatal(errs)
	}
	if u := fs.Usage(); u.FileAllocated != 0 || u.Orphans != 0 {
		t.Fatalf("arena copy not freed: %+v", u)
	}
	must(t, fs.Close())

	r := rand.New(rand.NewSource(int64(k)))
	points := 30
	if racetest.Reduced(t) {
		points = 8
	}
	for n := 1; n <= k; n += 1 + r.Intn(max(1, 2*k/points)) {
		restoreImage(t, R, img)
		dev := pdev.Reopen()
		fs, err := Open(R, "", withDevice(opts, dev))
		must(t, err)
		if !crashDuring(fs, n, func() { grow(fs) }) {
			t.Fatalf("no crash at store %d of %d", n, k)
		}
		fs, err = Open(R, "", withDevice(opts, dev.Crash(diskstore.CrashRandom, uint64(n))))
		must(t, err)
		if errs := fs.Check(); len(errs) > 0 {
			t.Fatalf("crash at store %d/%d: %v", n, k, errs)
		}
		got := readAll(t, fs, ino)
		// A power failure may lose the tail written (durable mode: on the
		// device, published, not synced yet): it then reads as zeros.
		lostTail := len(got) == len(newData) && bytes.Equal(got[:th], old) && bytes.Equal(got[th:], make([]byte, 4))
		if !bytes.Equal(got, old) && !bytes.Equal(got, newData) && !lostTail {
			t.Fatalf("crash at store %d/%d: file of %d bytes is neither old nor new", n, k, len(got))
		}
		if u := fs.Usage(); u.Orphans != 0 || u.LargeFiles == 1 && u.FileAllocated != 0 {
			t.Fatalf("crash at store %d/%d: %+v", n, k, u)
		}
		must(t, fs.a.Abandon())
	}
}

// TestDiskTruncateLarge: a 48 MB file in 4 KiB disk blocks (12,288
// blocks, 24 checksum pages) is truncated in place and then removed within
// the default journal.
func TestDiskTruncateLarge(t *testing.T) {
	size := 48 << 20
	if racetest.Reduced(t) {
		size = 16 << 20
	}
	fs, env := newTestFSOpt(t, fsOpt{disk: true, diskSize: 64 << 20})
	defer func() {
		if t.Failed() {
			t.Log(env.logs)
		}
	}()
	ino := makeFile(t, fs, "f", pattern(size, 2))
	_, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: 40 << 10}, user)
	must(t, err)
	if !isLarge(t, fs, ino) || !bytes.Equal(readAll(t, fs, ino), pattern(40<<10, 2)) {
		t.Fatal("truncated file wrong")
	}
	if u := fs.Usage(); u.DiskUsed > 64<<10 {
		t.Fatalf("disk used %d after truncate", u.DiskUsed)
	}
	ino2 := makeFile(t, fs, "g", pattern(size, 3))
	must(t, fs.Unlink(RootIno, "g"))
	fs.Forget(ino2, 1)
	fs.Forget(ino, 1)
	if u := fs.Usage(); u.DiskUsed > 64<<10 || u.Orphans != 0 {
		t.Fatalf("after unlink: %+v", u)
	}
}

// A file whose size damage set past what its storage can hold fails reads
// with EIO, logged, instead of reading as exabytes of zeros (found by
// random damage to images: `cat` of such a file never ended).
func TestReadImpossibleSize(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{disk: true, noCheck: true})
	small := makeFile(t, fs, "small", pattern(3000, 1))
	large := makeFile(t, fs, "large", pattern(300<<10, 2))
	if !isLarge(t, fs, large) {
		t.Fatal("not on disk")
	}
	for _, c := range []struct {
		ino  Ino
		size uint64
	}{{small, maxMemFileSize + 1}, {large, diskstore.MaxFileSize + 1}, {small, 0x6e00_0000_0000_0000}} {
		in, _ := fs.inode(c.ino)
		old := in.size()
		corrupt(fs, func(tx *pram.Tx) { in.set64(tx, iSize, c.size) })
		h := openRW(t, fs, c.ino, O_RDWR)
		buf := make([]byte, 100)
		if _, err := fs.Read(c.ino, h, 0, buf); !errors.Is(err, ErrIO) {
			t.Errorf("inode %d of size %d: read %v, want EIO", c.ino, c.size, err)
		}
		fs.Release(c.ino, h)
		corrupt(fs, func(tx *pram.Tx) { in.set64(tx, iSize, old) })
	}
	if !env.logged("is past the") {
		t.Error("not logged")
	}
	wantContent(t, fs, "/small", pattern(3000, 1))
	wantContent(t, fs, "/large", pattern(300<<10, 2))
}
