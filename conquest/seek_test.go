package conquest

import (
	"bytes"
	"testing"
)

// checkSeek walks the file's data segments with Seek and checks them
// against model (its contents): every nonzero byte lies in a segment (a
// hole reported over data would make `cp --sparse` drop it), each answer
// is at or after the offset asked and inside the file, and every offset at
// or past the end is ErrNoSuchOffset.
func checkSeek(t *testing.T, fs *FS, ino Ino, model []byte) {
	t.Helper()
	size := int64(len(model))
	covered := make([]bool, size)
	for off := int64(0); off < size; {
		d, err := fs.Seek(ino, off, SeekData)
		if err == ErrNoSuchOffset {
			break
		}
		must(t, err)
		if d < off || d >= size {
			t.Fatalf("SeekData(%d) = %d in a file of %d bytes", off, d, size)
		}
		h, err := fs.Seek(ino, d, SeekHole)
		must(t, err)
		if h <= d || h > size {
			t.Fatalf("SeekHole(%d) = %d in a file of %d bytes", d, h, size)
		}
		for i := d; i < h; i++ {
			covered[i] = true
		}
		off = h
	}
	for i, b := range model {
		if b != 0 && !covered[i] {
			t.Fatalf("byte %d of %d is %d but lies in a reported hole", i, size, b)
		}
	}
	for _, off := range []int64{-1, size, size + 1} {
		for _, whence := range []int{SeekData, SeekHole} {
			if _, err := fs.Seek(ino, off, whence); err != ErrNoSuchOffset {
				t.Fatalf("Seek(%d, %d) in a file of %d bytes: %v, want ErrNoSuchOffset", off, whence, size, err)
			}
		}
	}
}

// TestSeek: the data and holes of sparse files in the arena (an index file,
// a small file, an empty one) and on the disk, at their block granularity,
// and the errors.
func TestSeek(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true}) // threshold 64 KiB, disk blocks 4 KiB
	type seg [2]int64
	segments := func(ino Ino) []seg {
		t.Helper()
		var out []seg
		at, err := fs.GetAttr(ino)
		must(t, err)
		for off := int64(0); off < int64(at.Size); {
			d, err := fs.Seek(ino, off, SeekData)
			if err == ErrNoSuchOffset {
				break
			}
			must(t, err)
			h, err := fs.Seek(ino, d, SeekHole)
			must(t, err)
			out = append(out, seg{d, h})
			off = h
		}
		return out
	}
	expect := func(name string, ino Ino, want ...seg) {
		t.Helper()
		got := segments(ino)
		if len(got) != len(want) {
			t.Fatalf("%s: segments %v, want %v", name, got, want)
		}
		for i := range got {
			if got[i] != want[i] {
				t.Fatalf("%s: segments %v, want %v", name, got, want)
			}
		}
	}

	// An arena file: 4 KiB index blocks, one written at 0 and one at 40000.
	a := create(t, fs, RootIno, "arena", nil)
	write(t, fs, a.Ino, 0, pattern(100, 1))
	write(t, fs, a.Ino, 40000, pattern(10, 1))
	setSize(t, fs, a.Ino, 60000)
	expect("arena", a.Ino, seg{0, 4096}, seg{36864, 40960})
	if d, err := fs.Seek(a.Ino, 50, SeekData); err != nil || d != 50 {
		t.Fatalf("SeekData inside data: %d, %v", d, err)
	}
	if h, err := fs.Seek(a.Ino, 5000, SeekHole); err != nil || h != 5000 {
		t.Fatalf("SeekHole inside a hole: %d, %v", h, err)
	}
	mustErr(t, func() error { _, err := fs.Seek(a.Ino, 41000, SeekData); return err }(), ErrNoSuchOffset)

	// A small file (one block of at most 2 KiB) and an empty one.
	s := create(t, fs, RootIno, "small", pattern(10, 1))
	expect("small", s.Ino, seg{0, 10})
	e := create(t, fs, RootIno, "empty", nil)
	setSize(t, fs, e.Ino, 30000)
	expect("empty", e.Ino)
	if h, err := fs.Seek(e.Ino, 0, SeekHole); err != nil || h != 0 {
		t.Fatalf("SeekHole in an empty file: %d, %v", h, err)
	}

	// A disk file: data at 0, 1 MiB and 3 MiB + 5 in a 4 MiB file. Space
	// taken ahead of the writes is not data.
	d := create(t, fs, RootIno, "disk", nil)
	write(t, fs, d.Ino, 0, pattern(100, 1))
	write(t, fs, d.Ino, 1<<20, pattern(8192, 1))
	write(t, fs, d.Ino, 3<<20+5, pattern(1, 1))
	setSize(t, fs, d.Ino, 4<<20)
	expect("disk", d.Ino, seg{0, 4096}, seg{1 << 20, 1<<20 + 8192}, seg{3 << 20, 3<<20 + 4096})
	// fallocate reserves, and reads zeros: still a hole.
	must(t, fs.Fallocate(d.Ino, 2<<20, 64<<10, FallocKeepSize))
	expect("disk after fallocate", d.Ino, seg{0, 4096}, seg{1 << 20, 1<<20 + 8192}, seg{3 << 20, 3<<20 + 4096})
	must(t, fs.Fallocate(d.Ino, 1<<20, 4096, FallocPunchHole|FallocKeepSize))
	expect("disk after punch", d.Ino, seg{0, 4096}, seg{1<<20 + 4096, 1<<20 + 8192}, seg{3 << 20, 3<<20 + 4096})

	// Errors.
	mustErr(t, func() error { _, err := fs.Seek(d.Ino, 0, 2); return err }(), ErrInvalid)
	mustErr(t, func() error { _, err := fs.Seek(RootIno, 0, SeekData); return err }(), ErrIsDir)
	mustErr(t, func() error { _, err := fs.Seek(d.Ino, 4<<20, SeekHole); return err }(), ErrNoSuchOffset)
	mustErr(t, func() error { _, err := fs.Seek(d.Ino, -1, SeekData); return err }(), ErrNoSuchOffset)
}

// TestMoveBackKeepsHoles: a sparse disk file cut to half the threshold
// moves back into the arena with only its data: the holes take no arena
// blocks and still read as zeros and show to SEEK_HOLE (before session 45
// the move filled them in).
func TestMoveBackKeepsHoles(t *testing.T) {
	fs, _ := newTestFSOpt(t, fsOpt{disk: true}) // threshold 64 KiB, disk blocks 4 KiB
	f := create(t, fs, RootIno, "f", nil)
	model := make([]byte, 30000)
	for _, w := range []struct {
		off int64
		n   int
	}{{0, 100}, {20000, 10}, {200000, 5}} {
		data := pattern(w.n, 3)
		write(t, fs, f.Ino, w.off, data)
		if int(w.off)+w.n <= len(model) {
			copy(model[w.off:], data)
		}
	}
	var st Attr
	must(t, fs.read(func() error {
		in, err := fs.inode(f.Ino)
		if err == nil && !in.onDisk() {
			t.Fatal("the file did not move to the disk")
		}
		return err
	}))
	st = setSize(t, fs, f.Ino, 30000)
	must(t, fs.read(func() error {
		in, err := fs.inode(f.Ino)
		if err == nil && in.onDisk() {
			t.Fatal("the file did not move back into the arena")
		}
		return err
	}))
	if got := readAll(t, fs, f.Ino); !bytes.Equal(got, model) {
		t.Fatal("contents changed in the move back")
	}
	st, err := fs.GetAttr(f.Ino)
	must(t, err)
	if st.Blocks != 2*BlockSize/512 {
		t.Fatalf("moved back: %d sectors allocated, want the 2 blocks that hold data", st.Blocks)
	}
	checkSeek(t, fs, f.Ino, model)
	if d, err := fs.Seek(f.Ino, 100, SeekData); err != nil || d != 100 {
		t.Fatalf("SeekData(100) = %d, %v", d, err)
	}
	if h, err := fs.Seek(f.Ino, 0, SeekHole); err != nil || h != BlockSize {
		t.Fatalf("SeekHole(0) = %d, %v, want %d", h, err, BlockSize)
	}
	if d, err := fs.Seek(f.Ino, BlockSize, SeekData); err != nil || d != 16384 {
		t.Fatalf("SeekData(4096) = %d, %v, want 16384", d, err)
	}
}

// TestMoveBackKeepsReservation: space fallocate reserved inside a disk
// file stays reserved when a truncate moves the file back into the arena
// (an outside review caught the first version of the hole-keeping move
// dropping it: a write there failed with ENOSPC once the arena filled).
func TestMoveBackKeepsReservation(t *testing.T) {
	for _, mode := range []uint32{0, FallocKeepSize} {
		fs, _ := newTestFSOpt(t, fsOpt{disk: true, size: 8 << 20}) // threshold 64 KiB
		f := create(t, fs, RootIno, "f", nil)
		write(t, fs, f.Ino, 200000, pattern(10, 1)) // on the disk
		must(t, fs.Fallocate(f.Ino, 0, 20000, mode))
		setSize(t, fs, f.Ino, 30000) // back into the arena
		must(t, fs.read(func() error {
			in, err := fs.inode(f.Ino)
			if err == nil && (in.onDisk() || !fs.memCovered(in, 0, 20000)) {
				t.Fatalf("mode %d: moved back without storage for the reserved range (on disk %v)", mode, in.onDisk())
			}
			return err
		}))
		// Fill the arena, then write into the reserved range.
		for i := 0; ; i++ {
			at, h, err := fs.Create(RootIno, sprintf("fill%d", i), 0o644, O_RDWR|O_CREAT|O_EXCL, user)
			if err == nil {
				_, err = fs.Write(at.Ino, h, 0, pattern(60000, 2), false)
				fs.Release(at.Ino, h)
			}
			if err != nil {
				mustErr(t, err, ErrNoSpace)
				break
			}
		}
		write(t, fs, f.Ino, 0, pattern(20000, 3))
		want := make([]byte, 30000)
		copy(want, pattern(20000, 3))
		if got := readAll(t, fs, f.Ino); !bytes.Equal(got, want) {
			t.Fatalf("mode %d: contents wrong after the write into the reservation", mode)
		}
	}
}
