package conquest

import (
	"bytes"
	"errors"
	"testing"
)

// spillFS is a 16 MiB arena with a 64 MiB disk, 4 KiB disk blocks and the
// tests' 64 KiB threshold.
func spillFS(t *testing.T, diskSize uint64) (*FS, *testEnv) {
	return newTestFSOpt(t, fsOpt{size: 16 << 20, disk: true, diskSize: diskSize})
}

// heapAvail is the arena's available bytes.
func heapAvail(fs *FS) uint64 {
	var n uint64
	_ = fs.read(func() error { n = fs.h.Stats().AvailBytes; return nil })
	return n
}

// TestSpillSmallFilesToDisk writes files below the threshold until they
// hold more than twice the arena: every write succeeds (the arena keeps
// its reserve and the rest go to the disk), every file reads back, also
// after a reopen, the arena never drops below the reserve, and deleting
// everything gives the arena and the disk back.
func TestSpillSmallFilesToDisk(t *testing.T) {
	fs, env := spillFS(t, 64<<20)
	emptyDisk := fs.Space().DiskFree
	const size = 40 << 10
	var inos []Ino
	spilled := 0
	for i := 0; len(inos)*size < 36<<20; i++ {
		ino := makeFile(t, fs, sprintf("f%d", i), pattern(size, byte(i)))
		inos = append(inos, ino)
		if isLarge(t, fs, ino) {
			spilled++
		}
	}
	if spilled == 0 || spilled == len(inos) {
		t.Fatalf("%d of %d files on disk: want some in the arena and some spilled", spilled, len(inos))
	}
	var reserve uint64
	_ = fs.read(func() error { reserve = fs.spillReserve(fs.h.Stats()); return nil })
	if avail := heapAvail(fs); avail+2*BlockSize < reserve/2 {
		t.Fatalf("arena available %d, far below the reserve %d", avail, reserve)
	}
	check := func(fs *FS) {
		t.Helper()
		for i, ino := range inos {
			if got := readAll(t, fs, ino); !bytes.Equal(got, pattern(size, byte(i))) {
				t.Fatalf("file %d: contents differ", i)
			}
		}
	}
	check(fs)
	fs = env.reopen(fs)
	check(fs)
	// The reserve keeps room for metadata.
	mkdir(t, fs, RootIno, "d")
	for i := range inos {
		must(t, fs.Unlink(RootIno, sprintf("f%d", i)))
	}
	if sp := fs.Space(); sp.DiskFree != emptyDisk {
		t.Fatalf("disk free %d after deleting everything, want %d", sp.DiskFree, emptyDisk)
	}
	// With room again, new small files stay in RAM.
	ino := makeFile(t, fs, "again", pattern(size, 9))
	if isLarge(t, fs, ino) {
		t.Fatal("a small file went to disk with the arena empty")
	}
}

// TestSpillGrowingFile: with the arena at its reserve, a file growing in
// small appends past the threshold, and one written at once, both work
// (before spilling, a large file had to grow through the full arena and
// failed with ENOSPC).
func TestSpillGrowingFile(t *testing.T) {
	fs, _ := spillFS(t, 64<<20)
	fillToReserve(t, fs)
	at, h, err := fs.Create(RootIno, "log", 0o644, O_CREAT|O_RDWR|O_APPEND, user)
	must(t, err)
	var want []byte
	for i := 0; i < 50; i++ {
		p := pattern(3000, byte(i))
		if _, err := fs.Write(at.Ino, h, 0, p, false); err != nil {
			t.Fatalf("append %d: %v", i, err)
		}
		want = append(want, p...)
	}
	fs.Release(at.Ino, h)
	if got := readAll(t, fs, at.Ino); !bytes.Equal(got, want) {
		t.Fatal("appended file differs")
	}
	big := makeFile(t, fs, "big", pattern(300<<10, 7))
	if !bytes.Equal(readAll(t, fs, big), pattern(300<<10, 7)) {
		t.Fatal("large file differs")
	}
	// Overwriting an arena file in place needs no new storage: it stays.
	var inArena Ino
	for i := 0; inArena == 0; i++ {
		a, err := fs.Lookup(RootIno, sprintf("fill%d", i))
		must(t, err)
		fs.Forget(a.Ino, 1)
		if !isLarge(t, fs, a.Ino) {
			inArena = a.Ino
		}
	}
	if _, err := fs.Write(inArena, 0, 100, pattern(1000, 3), false); err != nil {
		t.Fatal(err)
	}
	if isLarge(t, fs, inArena) {
		t.Fatal("an overwrite in place moved an arena file to disk")
	}
}

// fillToReserve writes 32 KiB files fill0, fill1, ... until one of them
// spills to the disk.
func fillToReserve(t *testing.T, fs *FS) {
	t.Helper()
	for i := 0; ; i++ {
		if i > 10000 {
			t.Fatal("no file spilled")
		}
		ino := makeFile(t, fs, sprintf("fill%d", i), pattern(32<<10, byte(i)))
		large := isLarge(t, fs, ino)
		fs.Forget(ino, 1) // the lookup Create made
		if large {
			return
		}
	}
}

// TestSpillFallocate: a fallocate of an arena file that the arena cannot
// spare reserves the space on disk.
func TestSpillFallocate(t *testing.T) {
	fs, _ := spillFS(t, 64<<20)
	fillToReserve(t, fs)
	at, h, err := fs.Create(RootIno, "pre", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	defer fs.Release(at.Ino, h)
	must(t, fs.Fallocate(at.Ino, 0, 48<<10, 0))
	a, err := fs.GetAttr(at.Ino)
	must(t, err)
	if a.Size != 48<<10 || !isLarge(t, fs, at.Ino) {
		t.Fatalf("size %d, on disk %v: want 48 KiB on disk", a.Size, isLarge(t, fs, at.Ino))
	}
	if got := readAll(t, fs, at.Ino); !bytes.Equal(got, make([]byte, 48<<10)) {
		t.Fatal("fallocated range does not read as zeros")
	}
}

// TestSpillMoveBack: a spilled file truncated small stays on disk while
// the arena is low, and moves back into the arena once there is room.
func TestSpillMoveBack(t *testing.T) {
	fs, _ := spillFS(t, 64<<20)
	fillToReserve(t, fs)
	ino := makeFile(t, fs, "s", pattern(40<<10, 5))
	if !isLarge(t, fs, ino) {
		t.Fatal("file written at the reserve is not on disk")
	}
	_, err := fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: 10 << 10}, user)
	must(t, err)
	if !isLarge(t, fs, ino) {
		t.Fatal("moved back into an arena at its reserve")
	}
	for i := 0; ; i++ {
		if err := fs.Unlink(RootIno, sprintf("fill%d", i)); errors.Is(err, ErrNotFound) {
			break
		} else {
			must(t, err)
		}
	}
	_, err = fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: 8 << 10}, user)
	must(t, err)
	if isLarge(t, fs, ino) {
		t.Fatal("a small truncated file stayed on disk with the arena empty")
	}
	if got := readAll(t, fs, ino); !bytes.Equal(got, pattern(40<<10, 5)[:8<<10]) {
		t.Fatal("contents differ after the move back")
	}
}

// TestSpillDiskFull: with the disk full too, small files fall back to the
// arena, and the end is ENOSPC with nothing half-written: every file that
// was written in full reads back, and Check (at cleanup) is clean.
func TestSpillDiskFull(t *testing.T) {
	fs, env := spillFS(t, 4<<20)
	const size = 20 << 10
	n := createUntilFull(t, fs, "f", size)
	if n*size < 18<<20 {
		t.Fatalf("only %d files of %d bytes fit in a 16 MiB arena and a 4 MiB disk", n, size)
	}
	if sp := fs.Space(); sp.DiskAvail > 64<<10 {
		t.Fatalf("ENOSPC with %d bytes available on the disk", sp.DiskAvail)
	}
	fs = env.reopen(fs)
	for i := 0; i < n; i++ {
		a, err := fs.Lookup(RootIno, sprintf("f%d", i))
		must(t, err)
		if got := readAll(t, fs, a.Ino); !bytes.Equal(got, pattern(size, byte(i))) {
			t.Fatalf("file %d differs", i)
		}
		fs.Forget(a.Ino, 1)
	}
}

// TestSpillTinyFileStays: at the reserve, a file of a few hundred bytes
// stays in the arena: its one small block costs the arena less than the
// segment list and checksum lists a disk file keeps there (about 550
// bytes more than an arena file), so spilling it would take more of the
// reserve than it saves, and small files would hit ENOSPC sooner than
// without spilling. A file of a few KiB still spills.
func TestSpillTinyFileStays(t *testing.T) {
	fs, _ := spillFS(t, 64<<20)
	fillToReserve(t, fs)
	for i := 0; ; i++ {
		if i > 1000 {
			t.Fatal("no 3000-byte file spilled")
		}
		ino := makeFile(t, fs, sprintf("small%d", i), pattern(3000, byte(i)))
		fs.Forget(ino, 1)
		if isLarge(t, fs, ino) {
			break
		}
	}
	for i, size := range []int{1, 100, 400} {
		before := heapAvail(fs)
		ino := makeFile(t, fs, sprintf("tiny%d", i), pattern(size, byte(i)))
		if isLarge(t, fs, ino) {
			t.Fatalf("a %d-byte file written at the reserve went to the disk (arena cost %d bytes)", size, before-heapAvail(fs))
		}
		if got := readAll(t, fs, ino); !bytes.Equal(got, pattern(size, byte(i))) {
			t.Fatalf("%d-byte file differs", size)
		}
	}
}

// TestSpillLeavesRoomToMap: files spilled to the disk cost the arena about
// 1 KiB each, and enough of them fill it. New inodes then fail with
// ENOSPC while the arena still holds the part of the reserve that maps
// the free disk blocks (mapReserve), as an ext4 runs out of inodes: statfs
// counts no free inodes in it, and a large file can still grow by 8 MiB. Before,
// the arena ended with 0 bytes available and the append failed with
// ENOSPC with 61 MB of the disk free.
func TestSpillLeavesRoomToMap(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{size: 16 << 20, disk: true, diskSize: 64 << 20})
	big := makeFile(t, fs, "big", pattern(200<<10, 1))
	n := createUntilFull(t, fs, "s", 3000)
	// Free inodes: at most what free slots in slab pages could hold (they
	// count, as on a full arena without a disk), not the mapReserve.
	if st, slack := fs.StatFS(), fs.h.Stats().SlackBytes/inodeSize; st.Ffree > slack+1 {
		t.Errorf("create failed with ENOSPC, but statfs shows %d free inodes (%d in slab slack)", st.Ffree, slack)
	}
	if free := fs.Space().DiskFree; free < 32<<20 {
		t.Fatalf("%d files filled the disk too (%d bytes free): the test wants the arena full first", n, free)
	}
	want := pattern(200<<10, 1)
	a, err := fs.GetAttr(big)
	must(t, err)
	for off := a.Size; off < a.Size+8<<20; off += 1 << 20 {
		p := pattern(1<<20, byte(off>>20))
		if _, err := fs.Write(big, 0, int64(off), p, false); err != nil {
			t.Fatalf("appending to a large file after %d spilled files filled the arena, at %d: %v", n, off, err)
		}
		want = append(want, p...)
	}
	must(t, fs.Fsync(big, false))
	if got := readAll(t, fs, big); !bytes.Equal(got, want) {
		t.Fatal("the large file reads wrong")
	}
}

// createUntilFull creates files prefix0, prefix1, ... in the root, each
// holding size bytes of pattern(size, i), until a create or a write fails
// with ENOSPC (a file whose write failed is removed), and returns how many
// were written in full.
func createUntilFull(t *testing.T, fs *FS, prefix string, size int) int {
	t.Helper()
	for n := 0; ; n++ {
		name := sprintf("%s%d", prefix, n)
		at, h, err := fs.Create(RootIno, name, 0o644, O_CREAT|O_RDWR, user)
		if errors.Is(err, ErrNoSpace) {
			return n
		}
		must(t, err)
		_, err = fs.Write(at.Ino, h, 0, pattern(size, byte(n)), false)
		fs.Release(at.Ino, h)
		fs.Forget(at.Ino, 1)
		if errors.Is(err, ErrNoSpace) {
			must(t, fs.Unlink(RootIno, name))
			return n
		}
		must(t, err)
	}
}
