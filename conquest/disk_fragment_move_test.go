package conquest

import (
	"fmt"
	"testing"
)

// TestMoveOnSingleBlockFreeSpace: with the disk's free space cut into
// single blocks, moving a file to the disk takes one free extent per block,
// and each taken extent was a record removed from the middle of a free-map
// leaf (a shift of up to a leaf's 4 KiB of journal): the write that took a
// file past 2 MiB (moveCap) moved it in its own transaction, which needed
// more than a 256 KiB journal holds, and the writer got EIO. The store now
// takes a run of whole free extents with one shift per leaf.
func TestMoveOnSingleBlockFreeSpace(t *testing.T) {
	fs, env := newMoveFS(t, fsOpt{journalLen: 256 << 10, diskSize: 64 << 20, threshold: 1 << 20})
	var big []Ino
	for i := 0; ; i++ {
		at, h, err := fs.Create(RootIno, fmt.Sprint("b", i), 0o644, O_CREAT|O_RDWR, user)
		must(t, err)
		_, err = fs.Write(at.Ino, h, 0, pattern(4<<20, byte(i)), false)
		fs.Release(at.Ino, h)
		big = append(big, at.Ino)
		if err != nil {
			break // the disk is full: no contiguous free space is left
		}
	}
	for _, ino := range big {
		for off := int64(0); off < 4<<20; off += 8192 {
			must(t, fs.Fallocate(ino, off, 4096, FallocKeepSize|FallocPunchHole))
		}
	}
	// The punched blocks are held until a checkpoint no longer maps them.
	must(t, fs.Fsync(big[0], false))
	tickUntilSettled(t, fs)
	must(t, fs.Fsync(big[0], false))
	t.Logf("%d files punched; disk free %d KiB", len(big), fs.Usage().DiskFree>>10)
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
