package conquest

import (
	"bytes"
	"errors"
	"fmt"
	"testing"
)

// punchDisk fills the disk with files of size bytes, written until it is
// full, and punches every other 4 KiB block of them, so that the free space is single
// blocks; it waits until the punched blocks are no longer held for a
// checkpoint.
func punchDisk(t *testing.T, fs *FS, size int) {
	t.Helper()
	var big []Ino
	for i := 0; ; i++ {
		at, h, err := fs.Create(RootIno, fmt.Sprint("b", i), 0o644, O_CREAT|O_RDWR, user)
		must(t, err)
		_, err = fs.Write(at.Ino, h, 0, pattern(size, byte(i)), false)
		fs.Release(at.Ino, h)
		big = append(big, at.Ino)
		if err != nil {
			break // the disk is full: no contiguous free space is left
		}
	}
	for _, ino := range big {
		for off := int64(0); off < int64(size); off += 8192 {
			must(t, fs.Fallocate(ino, off, 4096, FallocKeepSize|FallocPunchHole))
		}
	}
	// The punched blocks are held until a checkpoint no longer maps them.
	must(t, fs.Fsync(big[0], false))
	tickUntilSettled(t, fs)
	must(t, fs.Fsync(big[0], false))
}

// TestMoveOnSingleBlockFreeSpace: with the disk's free space cut into
// single blocks, moving a file to the disk takes one free extent per block,
// and each taken extent was a record removed from the middle of a free-map
// leaf (a shift of up to a leaf's 4 KiB of journal): the write that took a
// file past 2 MiB (moveCap) moved it in its own transaction, which needed
// more than a 256 KiB journal holds, and the writer got EIO. The store now
// takes a run of whole free extents with one shift per leaf.
func TestMoveOnSingleBlockFreeSpace(t *testing.T) {
	fs, env := newMoveFS(t, fsOpt{journalLen: 256 << 10, diskSize: 64 << 20, threshold: 1 << 20})
	punchDisk(t, fs, 4<<20)
	t.Logf("disk free %d KiB, in single blocks", fs.Usage().DiskFree>>10)
	for i := range 4 {
		data := pattern(2<<20+(i+1)*100<<10, byte(100+i))
		at, h, err := fs.Create(RootIno, fmt.Sprint("m", i), 0o644, O_CREAT|O_RDWR, user)
		must(t, err)
		for off := 0; off < len(data); off += 128 << 10 {
			if _, err := fs.Write(at.Ino, h, int64(off), data[off:min(len(data), off+128<<10)], false); err != nil {
				t.Fatalf("m%d: write at %d: %v (log %q)", i, off, err, env.logs)
			}
		}
		must(t, fs.Fsync(at.Ino, false))
		fs.Release(at.Ino, h)
		if !isLarge(t, fs, at.Ino) {
			t.Errorf("m%d (%d bytes) stayed in the arena (log %q)", i, len(data), env.logs)
		}
		wantContent(t, fs, fmt.Sprint("/m", i), data)
	}
}

// TestMoveOnSingleBlockFreeSpaceFull: the same disk with fewer free blocks
// than a move needs: takeRun takes the few hundred single blocks there are,
// the allocation then fails, and the writer must get ENOSPC. (Giving those
// blocks back one free-map insertion each overflowed the journal in a
// review's stress run, where they lay among other free extents; here they
// are the last ones, so that undo is cheap: diskstore's
// TestUnallocKeepsJournalRoom reproduces it.)
func TestMoveOnSingleBlockFreeSpaceFull(t *testing.T) {
	fs, env := newMoveFS(t, fsOpt{journalLen: 256 << 10, diskSize: 64 << 20, threshold: 1 << 20})
	punchDisk(t, fs, 4<<20)
	// Leave 300 free blocks: a filler on the disk takes the rest.
	free := fs.Usage().DiskFree
	at, h, err := fs.Create(RootIno, "filler", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	fill := int(free - 300*4096)
	for off := 0; off < fill; off += 128 << 10 {
		if _, err := fs.Write(at.Ino, h, int64(off), pattern(min(128<<10, fill-off), 7), false); err != nil {
			t.Fatalf("filler at %d: %v", off, err)
		}
	}
	must(t, fs.Fsync(at.Ino, false))
	fs.Release(at.Ino, h)
	tickUntilSettled(t, fs)
	t.Logf("%d KiB free after the filler", fs.Usage().DiskFree>>10)
	data := pattern(2<<20+300<<10, 9)
	at, h, err = fs.Create(RootIno, "m", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	defer fs.Release(at.Ino, h)
	var werr error
	for off := 0; off < len(data) && werr == nil; off += 128 << 10 {
		_, werr = fs.Write(at.Ino, h, int64(off), data[off:min(len(data), off+128<<10)], false)
	}
	if !errors.Is(werr, ErrNoSpace) {
		t.Fatalf("write past the disk's free blocks: %v, want ENOSPC (log %q)", werr, env.logs)
	}
	if env.logged("too large for the journal") {
		t.Fatalf("the journal overflowed: %q", env.logs)
	}
}

// TestMoveTooLargeForJournalStaysInArena: a file whose move cannot fit in
// the journal at all (4 MiB moved at moveCap, each block its own extent on
// free space cut into single blocks, a 256 KiB journal) overflowed it in the
// writer's transaction, and the writer got EIO. The write now goes on in the
// arena (holdMove): no error, the contents intact, the file queued for the
// commit and left in the arena when its move fails there too.
func TestMoveTooLargeForJournalStaysInArena(t *testing.T) {
	fs, env, at, data := writeHeld(t)
	wantContent(t, fs, "/m", data)
	if env.logged("operation aborted") || env.logged("too large for the journal") {
		t.Fatalf("a write's transaction was aborted: %q", env.logs)
	}
	if isLarge(t, fs, at.Ino) || !isQueued(fs, at.Ino) {
		t.Fatalf("on disk %v, queued %v: want held in the arena, queued", isLarge(t, fs, at.Ino), isQueued(fs, at.Ino))
	}
	fs.diskTick()
	wantContent(t, fs, "/m", data)
	if isLarge(t, fs, at.Ino) || !env.logged("a move to the disk overflowed the journal") || env.logged("operation aborted") || env.logged("too large for the journal") {
		t.Fatalf("after the commit: on disk %v; log %q", isLarge(t, fs, at.Ino), env.logs)
	}
}

// TestTruncateHeldFileStaysReadable: a truncate that grows a file held in
// the arena (its move overflowed the journal) far past what an arena file
// can hold either moves it or fails; the file stays readable. Found by a
// review of session 46's change (a truncate up asks moveNow, which keeps a
// held file in the arena whatever its size): the truncate to 600 MiB
// succeeded, and every read then failed with EIO ("size past what its
// storage can hold: damaged").
func TestTruncateHeldFileStaysReadable(t *testing.T) {
	fs, _, at, data := writeHeld(t)
	if isLarge(t, fs, at.Ino) || !isQueued(fs, at.Ino) {
		t.Fatalf("on disk %v, queued %v: want held in the arena, queued", isLarge(t, fs, at.Ino), isQueued(fs, at.Ino))
	}
	a, err := fs.SetAttr(at.Ino, SetAttr{Valid: SetSize, Size: 600 << 20}, user)
	t.Logf("truncate to 600 MiB: %v", err)
	if err == nil {
		if a.Size != 600<<20 || !isLarge(t, fs, at.Ino) {
			t.Fatalf("truncate to 600 MiB succeeded with size %d, on disk %v", a.Size, isLarge(t, fs, at.Ino))
		}
		data = append(data, make([]byte, 600<<20-len(data))...)
	}
	buf := make([]byte, 4096)
	if n, err := fs.Read(at.Ino, 0, 0, buf); err != nil || n != len(buf) || !bytes.Equal(buf, data[:4096]) {
		t.Fatalf("after the truncate (%v): read at 0: %d bytes, %v", err, n, err)
	}
}

// writeHeld writes a 9 MiB file "m" in 128 KiB pieces onto a disk whose
// free space is single blocks, with a 256 KiB journal: its move overflows
// the journal, and the file stays held in the arena (holdMove), queued.
func writeHeld(t *testing.T) (*FS, *testEnv, Attr, []byte) {
	t.Helper()
	fs, env := newMoveFS(t, fsOpt{size: 48 << 20, journalLen: 256 << 10, diskSize: 64 << 20, threshold: 4 << 20})
	punchDisk(t, fs, 4<<20)
	data := pattern(9<<20, 9)
	at, h, err := fs.Create(RootIno, "m", 0o644, O_CREAT|O_RDWR, user)
	must(t, err)
	for off := 0; off < len(data); off += 128 << 10 {
		if _, err := fs.Write(at.Ino, h, int64(off), data[off:off+128<<10], false); err != nil {
			t.Fatalf("write at %d: %v (log %q)", off, err, env.logs)
		}
	}
	must(t, fs.Fsync(at.Ino, false))
	fs.Release(at.Ino, h)
	return fs, env, at, data
}
