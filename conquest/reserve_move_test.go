package conquest

import (
	"bytes"
	"errors"
	"testing"
	"time"
)

// What fallocate reserves while a file is in the arena stays reserved when
// the file moves to the disk (reserveOnMove): after the move, with the disk
// full, a write into the reserved range succeeds, as on ext4. Before, the
// reserved blocks, holding zeros, became holes at the move, and that write
// failed with ENOSPC. Every way a file moves is covered: a write across
// the threshold without the periodic commit (at once) and with it (the
// commit's staged batch), and a truncate across it; both fallocate modes
// that reserve (mode 0, and KEEP_SIZE past the end, which the truncate then
// brings inside the file).
func TestMoveToDiskKeepsReservation(t *testing.T) {
	const (
		written  = 10000 // the file's data before the fallocate
		reserved = 50000 // fallocate reserves [0, reserved): below the 64 KiB threshold
	)
	for _, how := range []string{"write", "commit", "truncate"} {
		for _, mode := range []uint32{0, FallocKeepSize} {
			t.Run(sprintf("%s-mode%d", how, mode), func(t *testing.T) {
				o := fsOpt{disk: true, size: 16 << 20, diskSize: 8 << 20}
				if how == "commit" {
					o.commit = time.Hour // ticked below
				}
				fs, env := newTestFSOpt(t, o)
				f := create(t, fs, RootIno, "f", nil)
				write(t, fs, f.Ino, 0, pattern(written, 1))
				must(t, fs.Fallocate(f.Ino, 0, reserved, mode))
				size := 100000
				switch how {
				case "truncate":
					setSize(t, fs, f.Ino, uint64(size))
				default:
					write(t, fs, f.Ino, 70000, pattern(size-70000, 2))
				}
				if how == "commit" {
					if isLarge(t, fs, f.Ino) || !isQueued(fs, f.Ino) {
						t.Fatal("the write did not leave the file queued in the arena")
					}
					fs.diskTick()
				}
				if !isLarge(t, fs, f.Ino) {
					t.Fatal("the file did not move to the disk")
				}
				fillDisk(t, fs)
				// Into the reserved range, past the data written before.
				write(t, fs, f.Ino, written, pattern(reserved-written, 3))
				want := make([]byte, size)
				copy(want, pattern(written, 1))
				copy(want[written:], pattern(reserved-written, 3))
				if how != "truncate" {
					copy(want[70000:], pattern(size-70000, 2))
				}
				if got := readAll(t, fs, f.Ino); !bytes.Equal(got, want) {
					t.Fatal("contents wrong after the write into the reservation")
				}
				fs = env.reopen(fs)
				if got := readAll(t, fs, f.Ino); !bytes.Equal(got, want) {
					t.Fatal("contents wrong after a reopen")
				}
			})
		}
	}
}

// TestMoveToDiskZerosStayHoles: without a fallocate, blocks of zeros that a
// file wrote in the arena take no disk space after its move (the rule that
// reserveOnMove keeps to files with flagReserved).
func TestMoveToDiskZerosStayHoles(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true})
	f := create(t, fs, RootIno, "f", nil)
	write(t, fs, f.Ino, 0, make([]byte, 50000))
	write(t, fs, f.Ino, 96<<10, pattern(4096, 1)) // one block of data, past the threshold
	if !isLarge(t, fs, f.Ino) {
		t.Fatal("the file did not move to the disk")
	}
	var held uint64
	must(t, fs.read(func() error {
		in, err := fs.inode(f.Ino)
		if err == nil {
			held, err = fs.ds.DiskBytes(in.seg())
		}
		return err
	}))
	if held != 4096 {
		t.Fatalf("the moved file holds %d disk bytes, want 4096 (its one block of data)", held)
	}
}

// fillDisk writes a file until the disk is full (ENOSPC), in shrinking
// pieces so that no block is left.
func fillDisk(t *testing.T, fs *FS) {
	t.Helper()
	at, h, err := fs.Create(RootIno, "filler", 0o644, O_RDWR|O_CREAT|O_EXCL, user)
	must(t, err)
	defer fs.Release(at.Ino, h)
	off := int64(0)
	for piece := 1 << 20; piece >= 4096; {
		n, err := fs.Write(at.Ino, h, off, pattern(piece, 9), false)
		off += int64(n)
		if errors.Is(err, ErrNoSpace) {
			piece /= 2
			continue
		}
		must(t, err)
	}
	must(t, fs.Fsync(at.Ino, false))
}

// TestRoundTripKeepsReservation: a disk file with reserved blocks that is
// cut back into the arena and then grows to the disk again still has
// them: the move back marks it (flagReserved), so that the second move
// reserves them again.
func TestRoundTripKeepsReservation(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true, size: 16 << 20, diskSize: 8 << 20})
	f := create(t, fs, RootIno, "f", nil)
	write(t, fs, f.Ino, 200000, pattern(10, 1)) // on the disk, holes below
	must(t, fs.Fallocate(f.Ino, 0, 20000, 0))
	setSize(t, fs, f.Ino, 30000) // back into the arena
	if isLarge(t, fs, f.Ino) {
		t.Fatal("the file did not move back into the arena")
	}
	write(t, fs, f.Ino, 70000, pattern(30000, 2)) // and to the disk again
	if !isLarge(t, fs, f.Ino) {
		t.Fatal("the file did not move to the disk again")
	}
	fillDisk(t, fs)
	write(t, fs, f.Ino, 0, pattern(20000, 3))
	want := make([]byte, 100000)
	copy(want, pattern(20000, 3))
	copy(want[70000:], pattern(30000, 2))
	if got := readAll(t, fs, f.Ino); !bytes.Equal(got, want) {
		t.Fatal("contents wrong after the write into the reservation")
	}
}

// TestFailedFallocateKeepsEarlierReservation: an extending fallocate that
// moves an arena file to the disk and then fails (ENOSPC) gives back only
// what it reserved itself: a KEEP_SIZE reservation the file made in the
// arena before, which the move carried to the disk (iKeepEnd), stays, and
// a write into it succeeds with the disk full. Found by a review of
// reserveOnMove: the fallocate's record said the file kept nothing past
// its end (it was in the arena when recorded), so the undo dropped it.
func TestFailedFallocateKeepsEarlierReservation(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true, size: 16 << 20, diskSize: 8 << 20})
	f := create(t, fs, RootIno, "f", nil)
	write(t, fs, f.Ino, 0, pattern(10000, 1))
	must(t, fs.Fallocate(f.Ino, 10000, 40000, FallocKeepSize)) // in the arena
	err := fs.Fallocate(f.Ino, 60000, 12<<20, 0)               // moves it, then runs out
	mustErr(t, err, ErrNoSpace)
	if !isLarge(t, fs, f.Ino) {
		t.Fatal("the fallocate did not move the file to the disk")
	}
	fillDisk(t, fs)
	write(t, fs, f.Ino, 10000, pattern(40000, 2))
	want := append(pattern(10000, 1), pattern(40000, 2)...)
	if got := readAll(t, fs, f.Ino); !bytes.Equal(got, want) {
		t.Fatal("contents wrong")
	}
}
