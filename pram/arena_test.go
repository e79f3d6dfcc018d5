package pram

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func newTestArena(t *testing.T, size uint64) (*Arena, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "arena")
	a, err := Format(path, Options{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	return a, path
}

// mustPanic runs f and returns the error it panicked with.
func mustPanic(t *testing.T, f func()) (err error) {
	t.Helper()
	defer func() {
		r := recover()
		if r == nil {
			t.Fatal("did not panic")
		}
		err, _ = r.(error)
	}()
	f()
	return nil
}

func TestFormatOpenClose(t *testing.T) {
	path := filepath.Join(t.TempDir(), "arena")
	uuid := [16]byte{1, 2, 3}
	params := [NumParams]uint64{7, 8, 9}
	a, err := Format(path, Options{Size: 4<<20 + 100, JournalLen: 300 << 10, Features: FeatureDisk, Params: params, UUID: &uuid})
	if err != nil {
		t.Fatal(err)
	}
	g := a.Geometry()
	if g.Size != 4<<20 || g.JournalOff != PageSize || g.JournalLen != 300<<10 ||
		g.HeapOff != Off(PageSize+300<<10) || g.UUID != uuid || g.Params != params || g.Features != FeatureDisk ||
		g.CreatedNs == 0 || g.HeapEnd() != Off(4<<20) {
		t.Fatalf("geometry %+v", g)
	}
	if a.Kind() != KindFile || a.Kind().String() != "file" || a.Path() != path || a.Size() != 4<<20 {
		t.Fatalf("kind %v path %s size %d", a.Kind(), a.Path(), a.Size())
	}
	if a.WasDirty() || a.Recovered() != 0 || a.Mounts() != 1 || a.U64(offState) != StateDirty {
		t.Fatalf("fresh arena: dirty %v recovered %d mounts %d state %d", a.WasDirty(), a.Recovered(), a.Mounts(), a.U64(offState))
	}
	// The image file is sparse: formatting reserves blocks for the
	// superblock and the journal and a little ahead (Reserve), no more.
	var st syscall.Stat_t
	if err := syscall.Stat(path, &st); err != nil {
		t.Fatal(err)
	}
	if want := uint64(g.HeapOff) + reserveAhead(4<<20) + PageSize; st.Size != 4<<20 || uint64(st.Blocks*512) > want {
		t.Errorf("image: %d bytes, %d allocated, want at most %d", st.Size, st.Blocks*512, want)
	}
	tx := a.Begin()
	tx.Set64(RootOff(5), 0xfeed)
	tx.SetBytes(g.HeapOff+100, []byte("persist me"))
	tx.Commit()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
	for mount := uint64(2); mount <= 3; mount++ {
		b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if b.Geometry() != g {
			t.Fatalf("reopened geometry %+v, want %+v", b.Geometry(), g)
		}
		if b.WasDirty() || b.Recovered() != 0 || b.Mounts() != mount || b.Root(5) != 0xfeed ||
			string(b.Bytes(g.HeapOff+100, 10)) != "persist me" {
			t.Fatalf("reopen %d: dirty %v recovered %d mounts %d root %#x", mount, b.WasDirty(), b.Recovered(), b.Mounts(), b.Root(5))
		}
		if err := b.Close(); err != nil {
			t.Fatal(err)
		}
	}
}

func TestFormatErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Format(filepath.Join(dir, "nosize"), Options{}); err == nil {
		t.Error("Format of a new file without a size succeeded")
	}
	if _, err := Format(filepath.Join(dir, "small"), Options{Size: MinSize - 1}); !errors.Is(err, ErrTooSmall) {
		t.Errorf("Format below MinSize = %v, want ErrTooSmall", err)
	}
	if _, err := Format(filepath.Join(dir, "big-journal"), Options{Size: MinSize, JournalLen: MinSize}); !errors.Is(err, ErrCorrupt) {
		t.Errorf("Format with a journal filling the arena = %v, want ErrCorrupt", err)
	}
	if _, err := Format(dir, Options{Size: MinSize}); err == nil {
		t.Error("Format of a directory succeeded")
	}
	if _, err := Format(filepath.Join(dir, "missing", "x"), Options{Size: MinSize}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Format in a missing directory = %v", err)
	}
	if _, err := os.Stat("/dev/null"); err == nil {
		if _, err := Format("/dev/null", Options{Size: MinSize}); err == nil {
			t.Error("Format of /dev/null (a character device, not device-DAX) succeeded")
		}
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("Open of a missing file = %v", err)
	}
	for name, content := range map[string][]byte{
		"empty": nil, "short": []byte("CONQPRAM"), "zeros": make([]byte, 2<<20),
		"random": bytes.Repeat([]byte{0x5a, 0xc3, 0x11}, 1<<20),
	} {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, content, 0o600); err != nil {
			t.Fatal(err)
		}
		if _, err := Open(p); !errors.Is(err, ErrNotConquest) {
			t.Errorf("Open(%s) = %v, want ErrNotConquest", name, err)
		}
	}
	// A FIFO is refused without waiting for a writer, by every kind of
	// open (a read-only open of one waited for ever).
	fifo := filepath.Join(dir, "fifo")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		if _, err := Open(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("Open of a FIFO = %v", err)
		}
		if _, err := LeftOpen(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("LeftOpen of a FIFO = %v", err)
		}
		if _, err := ReadGeometry(fifo); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ReadGeometry of a FIFO = %v", err)
		}
		if _, err := Format(fifo, Options{Size: MinSize}); err == nil {
			t.Error("Format of a FIFO succeeded")
		}
		if _, err := ShadowPath(fifo, dir); err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Errorf("ShadowPath of a FIFO = %v", err)
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		// Let the waiting open go, so that the test can end.
		if w, err := os.OpenFile(fifo, os.O_WRONLY|syscall.O_NONBLOCK, 0); err == nil {
			w.Close()
		}
		t.Fatal("opening a FIFO as an arena waited for a writer")
	}
	// An image whose file was resized after Format.
	a, path := newTestArena(t, 2<<20)
	a.Close()
	if err := os.Truncate(path, 3<<20); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(path); !errors.Is(err, ErrSizeMismatch) {
		t.Errorf("Open of a grown image = %v, want ErrSizeMismatch", err)
	}
	// A damaged superblock is refused and left as it was.
	if err := os.Truncate(path, 2<<20); err != nil {
		t.Fatal(err)
	}
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	f.WriteAt([]byte{0xff}, offSize+3)
	f.Close()
	before, _ := os.ReadFile(path)
	if _, err := Open(path); !errors.Is(err, ErrChecksum) {
		t.Errorf("Open of a damaged superblock = %v, want ErrChecksum", err)
	}
	if after, _ := os.ReadFile(path); !bytes.Equal(before, after) {
		t.Error("refused Open changed the image")
	}
}

// TestReformatClearsOldImage: Format over an existing image starts empty.
func TestReformatClearsOldImage(t *testing.T) {
	a, path := newTestArena(t, 2<<20)
	heap := a.Geometry().HeapOff
	copy(a.Bytes(heap, 5), "stale")
	tx := a.Begin()
	tx.Set64(RootOff(0), 42)
	tx.Commit()
	a.Close()
	b, err := Format(path, Options{Size: 2 << 20})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if b.Root(0) != 0 || !bytes.Equal(b.Bytes(heap, 5), make([]byte, 5)) {
		t.Error("reformatted image kept old contents")
	}
	if b.Geometry().UUID == a.Geometry().UUID {
		t.Error("reformat kept the UUID (random UUIDs should differ)")
	}
}

// TestLock: a second Open or Format of an arena that is open fails with
// ErrLocked, also in the same process (flock is per open file description);
// Close and Abandon release the lock.
func TestLock(t *testing.T) {
	a, path := newTestArena(t, 2<<20)
	if _, err := Open(path); !errors.Is(err, ErrLocked) {
		t.Fatalf("second Open = %v, want ErrLocked", err)
	}
	if _, err := Format(path, Options{Size: 2 << 20}); !errors.Is(err, ErrLocked) {
		t.Fatalf("Format of an open arena = %v, want ErrLocked", err)
	}
	if a.U64(offState) != StateDirty || a.Root(0) != 0 {
		t.Fatal("refused Format touched the open arena")
	}
	a.Close()
	b, err := Open(path)
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	b.Abandon()
	c, err := Open(path)
	if err != nil {
		t.Fatalf("Open after Abandon: %v", err)
	}
	c.Close()
}

func TestAccessors(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	size := a.Size()
	heap := a.Geometry().HeapOff
	for _, tc := range []struct {
		off  Off
		n    uint64
		want bool
	}{{0, 0, true}, {0, size, true}, {Off(size), 0, true}, {Off(size), 1, false}, {Off(size - 8), 8, true},
		{Off(size - 8), 9, false}, {1, ^uint64(0), false}, {^Off(0), 2, false}, {Off(size + 1), 0, false}} {
		if got := a.InRange(tc.off, tc.n); got != tc.want {
			t.Errorf("InRange(%d, %d) = %v", tc.off, tc.n, got)
		}
	}
	if a.InHeap(heap-1, 1) || !a.InHeap(heap, 8) || a.InHeap(Off(size), 1) {
		t.Error("InHeap")
	}
	for name, f := range map[string]func(){
		"Bytes past end":  func() { a.Bytes(Off(size-4), 8) },
		"Bytes overflow":  func() { a.Bytes(8, ^uint64(0)) },
		"U64 unaligned":   func() { a.U64(heap + 4) },
		"PutU64 past end": func() { a.PutU64(Off(size), 1) },
		"U32 past end":    func() { a.U32(Off(size - 2)) },
		"root -1":         func() { RootOff(-1) },
		"root 32":         func() { a.Root(NumRoots) },
	} {
		if err := mustPanic(t, f); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("%s: panicked with %v, want ErrOutOfRange", name, err)
		}
	}
	a.PutU64(heap, 0x0102030405060708)
	if a.U64(heap) != 0x0102030405060708 || a.U32(heap) != 0x05060708 || a.U16(heap) != 0x0708 || a.U8(heap) != 8 ||
		!bytes.Equal(a.Bytes(heap, 2), []byte{8, 7}) {
		t.Error("word accessors are not little-endian views of the same bytes")
	}
	if b := a.Bytes(heap, 4); cap(b) != 4 {
		t.Errorf("Bytes capacity %d lets callers append past the range", cap(b))
	}
	if RootOff(0) != offRoots || RootOff(31) != offRoots+8*31 {
		t.Error("RootOff")
	}
	if err := a.Persist(heap, 1); err != nil {
		t.Error(err)
	}
	if err := a.Persist(0, 0); err != nil {
		t.Error(err)
	}
	if err := a.Sync(); err != nil {
		t.Error(err)
	}
	var o Off
	if !o.IsNil() || o.Add(16) != 16 || Off(16).IsNil() {
		t.Error("Off helpers")
	}
}

func TestDefaultJournalLen(t *testing.T) {
	for _, tc := range []struct{ size, want uint64 }{
		{1 << 20, 256 << 10}, {32 << 20, 256 << 10}, {1 << 30, 8 << 20}, {1 << 40, 64 << 20}, {100<<20 + 12345, 800 << 10},
	} {
		if got := DefaultJournalLen(tc.size); got != tc.want || got%PageSize != 0 {
			t.Errorf("DefaultJournalLen(%d) = %d, want %d", tc.size, got, tc.want)
		}
	}
	for _, k := range []Kind{KindFile, KindDAX, KindBlock} {
		if k.String() == "" {
			t.Errorf("Kind %d has no name", k)
		}
	}
}
