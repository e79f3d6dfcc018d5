package diskstore

import (
	"bytes"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"conquest/alloc"
	"conquest/pram"
)

// TestGiveBackFreeSpace: a clean Open with PunchFree punches the free
// extents out of an image file, so that the host gets back the space of
// deleted files; the files left read back and verify, the free space takes
// new files again, and a second Open finds nothing more to give. Open
// without PunchFree (fsck), or after a crash with blocks written since the
// last sync, gives nothing back.
func TestGiveBackFreeSpace(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	dev := newImageDevice(t, path, 96<<20)
	var e *env
	host := func() int64 {
		n, ok := e.dev.(*fileDevice).hostBytes()
		if !ok {
			t.Fatal("no st_blocks for an image file")
		}
		return n
	}
	e = newEnv(t, envOpts{blockSize: 16 << 10, dev: dev})
	// Six files of 6 MiB written a MiB at a time in turn, so that their
	// extents interleave, then every other one deleted: free space in
	// pieces between live data.
	const n, size, piece = 6, 6 << 20, 1 << 20
	segs := make([]pram.Off, n)
	for i := range segs {
		segs[i] = e.newFile(uint64(i + 1))
	}
	for off := 0; off < size; off += piece {
		for i, seg := range segs {
			if err := e.write(seg, int64(off), pattern(uint32(i), int64(off), piece)); err != nil {
				t.Fatal(err)
			}
		}
	}
	for i := 0; i < n; i += 2 {
		e.must(func(tx *pram.Tx) error { return e.s.Destroy(tx, segs[i]) })
	}
	live := map[pram.Off]int64{}
	for i := 1; i < n; i += 2 {
		live[segs[i]] = size
	}
	readBack := func(when string) {
		t.Helper()
		for i := 1; i < n; i += 2 {
			b, err := e.read(segs[i], 0, size)
			if err != nil || !bytes.Equal(b, pattern(uint32(i), 0, size)) {
				t.Fatalf("%s: file %d reads back wrong (%v)", when, i, err)
			}
		}
		e.check(live)
	}

	// Not asked (fsck, df, stat): nothing changes.
	used := host()
	e.restart()
	if got := host(); got != used {
		t.Fatalf("without PunchFree the image went from %d to %d bytes on the host", used, got)
	}

	e.o.PunchFree = true
	e.restart()
	given := used - host()
	if given < 3*size-2<<20 {
		t.Fatalf("the image gave back %d bytes of the %d that 3 deleted files freed", given, 3*size)
	}
	if !e.logged("gave") {
		t.Errorf("no message about the space given back: %q", e.logs)
	}
	readBack("after punching")

	// Again: nothing left to give, nothing said.
	e.logs = nil
	before := host()
	e.restart()
	if got := host(); got != before || e.logged("gave") {
		t.Fatalf("a second open changed the image from %d to %d bytes (%q)", before, got, e.logs)
	}

	// The punched space takes new files (allocated again in the image).
	seg := e.newFile(99)
	data := pattern(99, 0, 2*size)
	if err := e.write(seg, 0, data); err != nil {
		t.Fatal(err)
	}
	live[seg] = int64(len(data))
	if host() < before+int64(len(data))-2<<20 {
		t.Errorf("a new %d-byte file took %d bytes of the host", len(data), host()-before)
	}
	if b, err := e.read(seg, 0, len(data)); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("new file reads back wrong (%v)", err)
	}
	readBack("after a new file")

	// A crash with a write not yet synced: recovery has work, and the space
	// of a file deleted meanwhile stays in the image until a clean open.
	if err := e.write(segs[1], 0, pattern(7, 0, piece)); err != nil {
		t.Fatal(err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Destroy(tx, seg) })
	delete(live, seg)
	e.must(func(tx *pram.Tx) error { return e.s.FlushAll(tx) }) // frees the quarantine: the blocks are free
	if err := e.write(segs[3], 0, pattern(8, 0, piece)); err != nil {
		t.Fatal(err)
	}
	e.logs = nil
	before = host()
	e.crash(e.dev)
	if got := host(); got < before || e.logged("gave") {
		t.Fatalf("open after a crash with unsynced writes gave space back: %d to %d bytes (%q)", before, got, e.logs)
	}
	if e.s.Recovery().Checked == 0 {
		t.Fatalf("no recovery after the crash: %+v", e.s.Recovery())
	}
	e.restart()
	if got := host(); before-got < int64(len(data))-2<<20 {
		t.Fatalf("the clean open after it gave back %d bytes of the %d-byte file deleted before the crash", before-got, len(data))
	}
	for i, p := range map[int][]byte{1: pattern(7, 0, piece), 3: pattern(8, 0, piece)} {
		if b, err := e.read(segs[i], 0, piece); err != nil || !bytes.Equal(b, p) {
			t.Fatalf("file %d: its last write reads back wrong after the crash (%v)", i, err)
		}
	}
	e.check(live)
	if strings.Contains(strings.Join(e.logs, "\n"), "checksum") {
		t.Errorf("checksum trouble logged: %q", e.logs)
	}
}

// TestGiveBackRefusesBadFreeMap: a free map whose extents do not add up to
// its count of free blocks is damage, and GiveBack punches nothing: here
// the damage lists a live file's first blocks as free (a second review lost
// them so).
func TestGiveBackRefusesBadFreeMap(t *testing.T) {
	path := filepath.Join(t.TempDir(), "disk")
	dev := newImageDevice(t, path, 64<<20)
	e := newEnv(t, envOpts{blockSize: 16 << 10, dev: dev, o: Options{PunchFree: true}})
	live := e.newFile(1) // the first file of a fresh disk: from block 1 on
	data := pattern(1, 0, 3<<20)
	if err := e.write(live, 0, data); err != nil {
		t.Fatal(err)
	}
	gone := e.newFile(2)
	if err := e.write(gone, 0, pattern(2, 0, 3<<20)); err != nil {
		t.Fatal(err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Destroy(tx, gone) })
	e.must(func(tx *pram.Tx) error {
		count := e.s.freeBlocks()
		if err := e.s.freeExtent(tx, extent{1, 5}); err != nil {
			return err
		}
		tx.Set64(e.s.fm+fmOffFree, count) // the count as it was: the extents hold 4 more
		return nil
	})
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(e.s.Close())
	must(e.a.Close())
	host := func(d Device) int64 {
		n, _ := d.(*fileDevice).hostBytes()
		return n
	}
	dev2 := reopenDev(t, e.dev)
	before := host(dev2)
	a, err := pram.Open(e.path)
	must(err)
	e.a = a
	h, err := alloc.Open(a)
	must(err)
	s, err := Open(h, dev2, e.o)
	must(err)
	e.h, e.s, e.dev = h, s, dev2
	if err := s.GiveBack(); !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), "its extents hold") {
		t.Fatalf("GiveBack with a free map that does not add up: %v, want ErrCorrupt naming the counts", err)
	}
	if got := host(dev2); got != before {
		t.Fatalf("GiveBack changed the image from %d to %d bytes", before, got)
	}
	if b, err := e.read(live, 0, len(data)); err != nil || !bytes.Equal(b, data) {
		t.Fatalf("the live file reads back wrong (%v)", err)
	}
}
