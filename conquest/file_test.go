package conquest

import (
	"bytes"
	"errors"
	"fmt"
	"math/rand"
	"testing"
)

func pattern(n int, seed byte) []byte {
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(i*7) + seed
	}
	return b
}

func openRW(t *testing.T, fs *FS, ino Ino, flags uint32) Handle {
	t.Helper()
	h, err := fs.Open(ino, flags)
	must(t, err)
	return h
}

func write(t *testing.T, fs *FS, ino Ino, off int64, data []byte) {
	t.Helper()
	h := openRW(t, fs, ino, O_RDWR)
	defer fs.Release(ino, h)
	n, err := fs.Write(ino, h, off, data, false)
	if err != nil || n != len(data) {
		t.Fatalf("Write(%d, %d bytes) = %d, %v", off, len(data), n, err)
	}
}

func setSize(t *testing.T, fs *FS, ino Ino, size uint64) Attr {
	t.Helper()
	at, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: size}, user)
	must(t, err)
	if at.Size != size {
		t.Fatalf("SetAttr size %d returned size %d", size, at.Size)
	}
	return at
}

// TestFileWriteReadModel writes, truncates and punches at random offsets
// around the small-file, block and index-growth boundaries and compares
// every byte with a []byte model, and SEEK_DATA/SEEK_HOLE with it
// (checkSeek); also with a disk and a 64 KiB threshold, which the file
// crosses both ways.
func TestFileWriteReadModel(t *testing.T) {
	t.Run("arena", func(t *testing.T) { testFileWriteReadModel(t, fsOpt{}) })
	t.Run("disk", func(t *testing.T) { testFileWriteReadModel(t, fsOpt{disk: true}) })
}

func testFileWriteReadModel(t *testing.T, o fsOpt) {
	seed := int64(rand.Uint32())
	t.Logf("seed %d", seed)
	r := rand.New(rand.NewSource(seed))
	fs, env := newTestFSOpt(t, o)
	f := create(t, fs, RootIno, "f", nil)
	var model []byte
	offs := []int{0, 1, 100, 2047, 2048, 2049, 4095, 4096, 4097, 8191, 65536, 16*4096 - 3, 200000, 1 << 20}
	pick := func() int { return offs[r.Intn(len(offs))] + r.Intn(3) - 1 }
	for i := 0; i < 300; i++ {
		switch r.Intn(10) {
		case 0, 1, 2, 3, 4:
			off := max(pick(), 0)
			n := []int{1, 10, 1000, 2048, 4096, 5000, 20000}[r.Intn(7)]
			data := pattern(n, byte(i))
			write(t, fs, f.Ino, int64(off), data)
			if off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
			copy(model[off:], data)
		case 5, 6:
			size := max(pick(), 0)
			if r.Intn(3) == 0 {
				size = 0
			}
			setSize(t, fs, f.Ino, uint64(size))
			if size > len(model) {
				model = append(model, make([]byte, size-len(model))...)
			}
			model = model[:size]
		case 7:
			off, n := max(pick(), 0), r.Intn(30000)+1
			must(t, fs.Fallocate(f.Ino, int64(off), int64(n), FallocPunchHole|FallocKeepSize))
			for j := off; j < min(off+n, len(model)); j++ {
				model[j] = 0
			}
		case 8:
			off, n := max(pick(), 0), r.Intn(30000)+1
			mode := []uint32{0, FallocKeepSize, FallocZeroRange, FallocZeroRange | FallocKeepSize}[r.Intn(4)]
			must(t, fs.Fallocate(f.Ino, int64(off), int64(n), mode))
			if mode&FallocZeroRange != 0 {
				for j := off; j < min(off+n, len(model)); j++ {
					model[j] = 0
				}
			}
			if mode&FallocKeepSize == 0 && off+n > len(model) {
				model = append(model, make([]byte, off+n-len(model))...)
			}
		case 9:
			if r.Intn(5) == 0 {
				fs = env.reopen(fs)
			}
		}
		got := readAll(t, fs, f.Ino)
		if !bytes.Equal(got, model) {
			for j := range min(len(got), len(model)) {
				if got[j] != model[j] {
					t.Fatalf("step %d: size %d/%d, first difference at %d: %d vs %d", i, len(got), len(model), j, got[j], model[j])
				}
			}
			t.Fatalf("step %d: size %d, want %d", i, len(got), len(model))
		}
		checkSeek(t, fs, f.Ino, model)
		if i%50 == 0 {
			if errs := fs.Check(); len(errs) > 0 {
				t.Fatalf("step %d: Check: %v", i, errs)
			}
		}
	}
}

func TestReadShortOnlyAtEOF(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", pattern(10000, 1))
	buf := make([]byte, 4000)
	for _, c := range []struct {
		off  int64
		want int
	}{{0, 4000}, {6000, 4000}, {6001, 3999}, {9999, 1}, {10000, 0}, {20000, 0}} {
		n, err := fs.Read(f.Ino, 0, c.off, buf)
		must(t, err)
		if n != c.want {
			t.Errorf("Read at %d: %d bytes, want %d", c.off, n, c.want)
		}
	}
	_, err := fs.Read(f.Ino, 0, -1, buf)
	mustErr(t, err, ErrInvalid)
	_, err = fs.Read(RootIno, 0, 0, buf)
	mustErr(t, err, ErrIsDir)
}

func TestHolesReadZero(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	write(t, fs, f.Ino, 10*4096+5, []byte("tail"))
	at, _ := fs.GetAttr(f.Ino)
	if at.Size != 10*4096+9 || at.Blocks != 8 {
		t.Fatalf("sparse file: size %d blocks %d, want %d and 8", at.Size, at.Blocks, 10*4096+9)
	}
	got := readAll(t, fs, f.Ino)
	if !bytes.Equal(got[:10*4096+5], make([]byte, 10*4096+5)) || string(got[10*4096+5:]) != "tail" {
		t.Fatalf("hole does not read as zeros")
	}
	// Truncate up leaves a hole; stale bytes past a shrink never come back.
	g := create(t, fs, RootIno, "g", bytes.Repeat([]byte{0xff}, 6000))
	setSize(t, fs, g.Ino, 10)
	setSize(t, fs, g.Ino, 6000)
	got = readAll(t, fs, g.Ino)
	if !bytes.Equal(got[10:], make([]byte, 5990)) {
		t.Fatalf("bytes past a truncate came back")
	}
	h := create(t, fs, RootIno, "h", bytes.Repeat([]byte{0xff}, 1000))
	setSize(t, fs, h.Ino, 3)
	write(t, fs, h.Ino, 500, []byte("x"))
	got = readAll(t, fs, h.Ino)
	if !bytes.Equal(got[3:500], make([]byte, 497)) {
		t.Fatalf("small file: bytes past a truncate came back on write")
	}
}

func TestAppendHandle(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", []byte("abc"))
	h := openRW(t, fs, f.Ino, O_WRONLY|O_APPEND)
	for _, s := range []string{"de", "fgh"} {
		if _, err := fs.Write(f.Ino, h, 0, []byte(s), false); err != nil {
			t.Fatal(err)
		}
	}
	fs.Release(f.Ino, h)
	if got := readAll(t, fs, f.Ino); string(got) != "abcdefgh" {
		t.Fatalf("append: %q", got)
	}
}

func TestOpenTruncAndCreateExisting(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", pattern(100000, 3))
	h := openRW(t, fs, f.Ino, O_WRONLY|O_TRUNC)
	fs.Release(f.Ino, h)
	at, _ := fs.GetAttr(f.Ino)
	if at.Size != 0 || at.Blocks != 0 {
		t.Fatalf("after O_TRUNC: size %d blocks %d", at.Size, at.Blocks)
	}
	// O_TRUNC with O_RDONLY does nothing.
	write(t, fs, f.Ino, 0, []byte("keep"))
	h = openRW(t, fs, f.Ino, O_TRUNC)
	fs.Release(f.Ino, h)
	if got := readAll(t, fs, f.Ino); string(got) != "keep" {
		t.Fatalf("O_RDONLY|O_TRUNC changed the file: %q", got)
	}
	// Create of an existing name opens it, truncates with O_TRUNC, fails with O_EXCL.
	_, _, err := fs.Create(RootIno, "f", 0o644, O_RDWR|O_CREAT|O_EXCL, user)
	mustErr(t, err, ErrExists)
	at2, h, err := fs.Create(RootIno, "f", 0o600, O_RDWR|O_CREAT, user)
	must(t, err)
	fs.Release(at2.Ino, h)
	if at2.Ino != f.Ino || at2.Size != 4 || at2.Mode != S_IFREG|0o644 {
		t.Fatalf("create existing: %+v", at2)
	}
	at2, h, err = fs.Create(RootIno, "f", 0o600, O_RDWR|O_CREAT|O_TRUNC, user)
	must(t, err)
	fs.Release(at2.Ino, h)
	if at2.Size != 0 {
		t.Fatalf("create existing with O_TRUNC: size %d", at2.Size)
	}
	mkdir(t, fs, RootIno, "d")
	_, _, err = fs.Create(RootIno, "d", 0o644, O_RDWR|O_CREAT, user)
	mustErr(t, err, ErrIsDir)
	fs.Forget(at2.Ino, 2)
}

func TestWriteErrors(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	_, err := fs.Write(f.Ino, 0, -1, []byte("x"), false)
	mustErr(t, err, ErrInvalid)
	_, err = fs.Write(RootIno, 0, 0, []byte("x"), false)
	mustErr(t, err, ErrIsDir)
	_, err = fs.Write(f.Ino, 0, maxFileSize, []byte("x"), false)
	mustErr(t, err, ErrFileTooBig)
	// A write crossing the limit is short, with the reason.
	n, err := fs.Write(f.Ino, 0, maxFileSize-3, []byte("abcdef"), false)
	if !errors.Is(err, ErrFileTooBig) || n != 3 {
		t.Fatalf("write across the limit: %d, %v (want 3, ErrFileTooBig)", n, err)
	}
	_, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetSize, Size: maxFileSize + 1}, user)
	mustErr(t, err, ErrFileTooBig)
	_, err = fs.SetAttr(RootIno, SetAttr{Valid: SetSize, Size: 0}, user)
	mustErr(t, err, ErrIsDir)
	// Zero-byte writes change nothing, not even mtime.
	before, _ := fs.GetAttr(f.Ino)
	n, err = fs.Write(f.Ino, 0, 5, nil, false)
	after, _ := fs.GetAttr(f.Ino)
	if n != 0 || err != nil || after != before {
		t.Fatalf("zero-byte write: %d %v, attr %+v -> %+v", n, err, before, after)
	}
	setSize(t, fs, f.Ino, 0)
}

func TestLargeWriteChunks(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	data := pattern(3*writeChunk+12345, 9)
	write(t, fs, f.Ino, 777, data)
	got := readAll(t, fs, f.Ino)
	if !bytes.Equal(got[777:], data) || !bytes.Equal(got[:777], make([]byte, 777)) {
		t.Fatalf("large write mismatch")
	}
	at, _ := fs.GetAttr(f.Ino)
	if want := uint64((777+len(data)+4095)/4096) * 8; at.Blocks != want {
		t.Fatalf("blocks %d, want %d", at.Blocks, want)
	}
}

func TestFallocate(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	must(t, fs.Fallocate(f.Ino, 0, 100000, 0))
	at, _ := fs.GetAttr(f.Ino)
	if at.Size != 100000 || at.Blocks != 25*8 {
		t.Fatalf("fallocate: size %d blocks %d", at.Size, at.Blocks)
	}
	must(t, fs.Fallocate(f.Ino, 100000, 50000, FallocKeepSize))
	at, _ = fs.GetAttr(f.Ino)
	if at.Size != 100000 || at.Blocks != 37*8 {
		t.Fatalf("fallocate keep size: size %d blocks %d", at.Size, at.Blocks)
	}
	must(t, fs.Fallocate(f.Ino, 4096, 3*4096, FallocPunchHole|FallocKeepSize))
	at, _ = fs.GetAttr(f.Ino)
	if at.Blocks != 34*8 {
		t.Fatalf("punch: blocks %d", at.Blocks)
	}
	mustErr(t, fs.Fallocate(f.Ino, 0, 10, FallocPunchHole), ErrNotSupported)
	mustErr(t, fs.Fallocate(f.Ino, 0, 10, 0x8), ErrNotSupported) // COLLAPSE_RANGE
	mustErr(t, fs.Fallocate(f.Ino, -1, 10, 0), ErrInvalid)
	mustErr(t, fs.Fallocate(f.Ino, 0, 0, 0), ErrInvalid)
	mustErr(t, fs.Fallocate(f.Ino, maxFileSize, 1, 0), ErrFileTooBig)
	mustErr(t, fs.Fallocate(RootIno, 0, 1, 0), ErrIsDir)
	// A large fallocate spans several transactions.
	g := create(t, fs, RootIno, "g", nil)
	must(t, fs.Fallocate(g.Ino, 0, 20<<20, 0))
	at, _ = fs.GetAttr(g.Ino)
	if at.Size != 20<<20 || at.Blocks != (20<<20)/512 {
		t.Fatalf("large fallocate: size %d blocks %d", at.Size, at.Blocks)
	}
	if got := readAll(t, fs, g.Ino); !bytes.Equal(got, make([]byte, 20<<20)) {
		t.Fatalf("fallocated range is not zero")
	}
}

func TestKillPriv(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	for _, c := range []struct{ mode, want uint32 }{
		{0o6755, 0o0755}, // setuid + setgid with group exec: both cleared
		{0o6745, 0o2745}, // setgid without group exec (mandatory locking): kept
		{0o4700, 0o0700},
	} {
		_, err := fs.SetAttr(f.Ino, SetAttr{Valid: SetMode, Mode: c.mode}, root)
		must(t, err)
		h := openRW(t, fs, f.Ino, O_RDWR)
		_, err = fs.Write(f.Ino, h, 0, []byte("x"), true)
		must(t, err)
		fs.Release(f.Ino, h)
		at, _ := fs.GetAttr(f.Ino)
		if at.Mode&0o7777 != c.want {
			t.Errorf("mode %#o after killpriv write: %#o, want %#o", c.mode, at.Mode&0o7777, c.want)
		}
	}
	// Without killPriv the bits stay.
	_, err := fs.SetAttr(f.Ino, SetAttr{Valid: SetMode, Mode: 0o6755}, root)
	must(t, err)
	write(t, fs, f.Ino, 0, []byte("y"))
	if at, _ := fs.GetAttr(f.Ino); at.Mode&0o7777 != 0o6755 {
		t.Errorf("write without killPriv changed mode to %#o", at.Mode)
	}
}

// TestSmallFilesSpace checks the small-file path: 10,000 files of 1 KB take
// about 10 MB of heap for their data (one 1-KiB slab slot each), not 40 MB.
func TestSmallFilesSpace(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{size: 128 << 20})
	d := mkdir(t, fs, RootIno, "d")
	before := fs.h.Stats()
	data := pattern(1000, 5)
	for i := 0; i < 10000; i++ {
		at, h, err := fs.Create(d.Ino, sprintf("f%05d", i), 0o644, O_RDWR|O_CREAT, user)
		must(t, err)
		if n, err := fs.Write(at.Ino, h, 0, data, false); err != nil || n != 1000 {
			t.Fatal(n, err)
		}
		fs.Release(at.Ino, h)
		fs.Forget(at.Ino, 1)
	}
	after := fs.h.Stats()
	used := after.UsedBytes - before.UsedBytes
	// 1024 B data + 256 B inode + directory entry (~70 B) per file.
	perFile := used / 10000
	t.Logf("heap used for 10,000 x 1 KB files: %d bytes (%d per file), %d objects", used, perFile, after.Objects-before.Objects)
	if perFile > 1024+256+200 {
		t.Fatalf("%d heap bytes per 1 KB file", perFile)
	}
	at := lookup(t, fs, d.Ino, "f01234")
	if at.Blocks != 2 {
		t.Fatalf("1 KB file reports %d blocks, want 2 (one 1 KiB block)", at.Blocks)
	}
	if got := readAll(t, fs, at.Ino); !bytes.Equal(got, data) {
		t.Fatal("content")
	}
}

// TestSmallJournal: with a 64 KiB journal, big writes, fallocates,
// truncates and unlinks are split into transactions that fit.
func TestSmallJournal(t *testing.T) {
	fs, env := newTestFSOpt(t, fsOpt{size: 32 << 20, journalLen: 64 << 10})
	if jl := fs.a.Geometry().JournalLen; jl != 64<<10 {
		t.Fatalf("journal %d", jl)
	}
	f := create(t, fs, RootIno, "f", nil)
	data := pattern(5<<20, 4)
	write(t, fs, f.Ino, 0, data)
	must(t, fs.Fallocate(f.Ino, 5<<20, 10<<20, 0))
	at, _ := fs.GetAttr(f.Ino)
	if at.Size != 15<<20 || at.Blocks != (15<<20)/512 {
		t.Fatalf("size %d blocks %d", at.Size, at.Blocks)
	}
	must(t, fs.Fallocate(f.Ino, 4096, 12<<20, FallocPunchHole|FallocKeepSize))
	setSize(t, fs, f.Ino, 3000)
	write(t, fs, f.Ino, 0, data)
	fs = env.reopen(fs)
	if got := readAll(t, fs, f.Ino); !bytes.Equal(got, data) {
		t.Fatal("contents")
	}
	must(t, fs.Unlink(RootIno, "f"))
	fs.Forget(f.Ino, 1)
	for _, l := range env.logs {
		t.Errorf("unexpected log: %s", l)
	}
}

// TestKillPrivCapability: a killpriv write (FUSE_WRITE_KILL_SUIDGID under
// HANDLE_KILLPRIV_V2) also removes security.capability, keeping the other
// attributes; a plain write keeps it.
func TestKillPrivCapability(t *testing.T) {
	fs, _ := newTestFS(t)
	f := create(t, fs, RootIno, "f", nil)
	must(t, fs.SetXattr(f.Ino, "security.capability", []byte{1, 2, 3}, 0))
	must(t, fs.SetXattr(f.Ino, "user.keep", []byte("v"), 0))
	write(t, fs, f.Ino, 0, []byte("plain"))
	if _, err := fs.GetXattr(f.Ino, "security.capability"); err != nil {
		t.Fatalf("plain write removed the capability: %v", err)
	}
	_, err := fs.Write(f.Ino, 0, 0, []byte("x"), true)
	must(t, err)
	_, err = fs.GetXattr(f.Ino, "security.capability")
	mustErr(t, err, ErrNoData)
	if v, err := fs.GetXattr(f.Ino, "user.keep"); err != nil || string(v) != "v" {
		t.Fatalf("other attribute: %q, %v", v, err)
	}
	must(t, fs.SetXattr(f.Ino, "security.capability", []byte{1}, 0))
	_, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetKillSUIDGID | SetSize, Size: 0}, user)
	must(t, err)
	_, err = fs.GetXattr(f.Ino, "security.capability")
	mustErr(t, err, ErrNoData)
}

// TestKeepCache: KeepCache is false exactly when a read would update atime
// (relatime), true after that read, false again after a change or a day,
// and always true with NoAtime.
func TestKeepCache(t *testing.T) {
	fs, env := newTestFS(t)
	f := create(t, fs, RootIno, "f", []byte("data"))
	if fs.KeepCache(f.Ino) {
		t.Fatal("KeepCache true with atime due (atime == mtime)")
	}
	buf := make([]byte, 4)
	_, err := fs.Read(f.Ino, 0, 0, buf)
	must(t, err)
	if !fs.KeepCache(f.Ino) {
		t.Fatal("KeepCache false right after the atime update")
	}
	write(t, fs, f.Ino, 0, []byte("x"))
	if fs.KeepCache(f.Ino) {
		t.Fatal("KeepCache true after a write (atime <= mtime)")
	}
	_, err = fs.Read(f.Ino, 0, 0, buf)
	must(t, err)
	_, err = fs.SetAttr(f.Ino, SetAttr{Valid: SetMode, Mode: 0o600}, user)
	must(t, err)
	if fs.KeepCache(f.Ino) {
		t.Fatal("KeepCache true after a chmod (atime <= ctime)")
	}
	_, err = fs.Read(f.Ino, 0, 0, buf)
	must(t, err)
	env.clock.Advance(25 * 3600)
	if fs.KeepCache(f.Ino) {
		t.Fatal("KeepCache true with atime a day old")
	}
	if fs.KeepCache(999999) {
		t.Fatal("KeepCache true for a bad inode")
	}
	must(t, fs.Close())
	fs2, err := Open(env.path, "", Options{Now: env.clock.Now, NoAtime: true})
	must(t, err)
	env.current = fs2
	if !fs2.KeepCache(f.Ino) {
		t.Fatal("KeepCache false with NoAtime")
	}
}

// TestReadNoAtime: a read through a handle opened with O_NOATIME leaves a
// due atime alone; the same read through another handle updates it.
func TestReadNoAtime(t *testing.T) {
	fs, env := newTestFS(t)
	f := create(t, fs, RootIno, "f", []byte("data"))
	env.clock.Advance(10)
	before := attrOf(t, fs, f.Ino).Atime
	buf := make([]byte, 4)
	h, err := fs.Open(f.Ino, O_NOATIME)
	must(t, err)
	_, err = fs.Read(f.Ino, h, 0, buf)
	must(t, err)
	fs.Release(f.Ino, h)
	if a := attrOf(t, fs, f.Ino).Atime; a != before {
		t.Fatalf("O_NOATIME read changed atime from %v to %v", before, a)
	}
	h, err = fs.Open(f.Ino, 0)
	must(t, err)
	_, err = fs.Read(f.Ino, h, 0, buf)
	must(t, err)
	fs.Release(f.Ino, h)
	if a := attrOf(t, fs, f.Ino).Atime; a == before {
		t.Fatalf("a read without O_NOATIME left a due atime at %v", a)
	}
}

func attrOf(t *testing.T, fs *FS, ino Ino) Attr {
	t.Helper()
	a, err := fs.GetAttr(ino)
	must(t, err)
	return a
}

// WriteKeepTimes writes without changing mtime and ctime, in the arena and
// on disk, except that ctime marks a mode bit killPriv cleared.
func TestWriteKeepTimes(t *testing.T) {
	fs, _ := newTestFS(t)
	for _, size := range []int{100, 2 << 20} {
		f := create(t, fs, RootIno, fmt.Sprint("f", size), nil)
		write(t, fs, f.Ino, 0, make([]byte, size))
		h := openRW(t, fs, f.Ino, O_RDWR)
		before, _ := fs.GetAttr(f.Ino)
		if n, err := fs.WriteKeepTimes(f.Ino, h, int64(size), []byte("tail"), false); err != nil || n != 4 {
			t.Fatalf("size %d: WriteKeepTimes: %d, %v", size, n, err)
		}
		after, _ := fs.GetAttr(f.Ino)
		if after.Mtime != before.Mtime || after.Ctime != before.Ctime || after.Size != uint64(size)+4 {
			t.Errorf("size %d: times %v %v size %d after WriteKeepTimes, want %v %v %d",
				size, after.Mtime, after.Ctime, after.Size, before.Mtime, before.Ctime, size+4)
		}
		_, err := fs.SetAttr(f.Ino, SetAttr{Valid: SetMode, Mode: 0o4755}, root)
		must(t, err)
		before, _ = fs.GetAttr(f.Ino)
		_, err = fs.WriteKeepTimes(f.Ino, h, 0, []byte("x"), true)
		must(t, err)
		after, _ = fs.GetAttr(f.Ino)
		if after.Mode&0o7777 != 0o755 || after.Mtime != before.Mtime || after.Ctime == before.Ctime {
			t.Errorf("size %d: killPriv WriteKeepTimes: mode %#o mtime %v->%v ctime %v->%v, want 0755, mtime kept, ctime changed",
				size, after.Mode&0o7777, before.Mtime, after.Mtime, before.Ctime, after.Ctime)
		}
		fs.Release(f.Ino, h)
		if got := readAll(t, fs, f.Ino); len(got) != size+4 || got[0] != 'x' || string(got[size:]) != "tail" {
			t.Errorf("size %d: contents after WriteKeepTimes: %d bytes", size, len(got))
		}
	}
}

// FallocateKeepTimes changes what Fallocate does, in the arena and on the
// disk, in every mode, but not mtime or ctime.
func TestFallocateKeepTimes(t *testing.T) {
	fs, _ := newTestFS(t)
	modes := []uint32{0, FallocKeepSize, FallocPunchHole | FallocKeepSize, FallocZeroRange}
	for _, size := range []int{10000, 2 << 20} {
		for _, mode := range modes {
			f := create(t, fs, RootIno, fmt.Sprint("f", size, "-", mode), nil)
			write(t, fs, f.Ino, 0, bytes.Repeat([]byte{1}, size))
			before, _ := fs.GetAttr(f.Ino)
			must(t, fs.FallocateKeepTimes(f.Ino, 4096, int64(size), mode))
			after, _ := fs.GetAttr(f.Ino)
			wantSize := uint64(size)
			if mode&FallocKeepSize == 0 {
				wantSize = uint64(size) + 4096
			}
			if after.Mtime != before.Mtime || after.Ctime != before.Ctime || after.Size != wantSize {
				t.Errorf("size %d mode %#x: times %v %v size %d after FallocateKeepTimes, want %v %v %d",
					size, mode, after.Mtime, after.Ctime, after.Size, before.Mtime, before.Ctime, wantSize)
			}
			if got := readAll(t, fs, f.Ino); mode&(FallocPunchHole|FallocZeroRange) != 0 && got[4096] != 0 {
				t.Errorf("size %d mode %#x: byte 4096 is %d after a hole or zeroed range", size, mode, got[4096])
			}
		}
	}
}
