package diskstore

import (
	"bytes"
	"errors"
	"testing"

	"conquest/pram"
)

// DropPrealloc gives back the blocks a write took ahead of itself inside
// the file's size and never wrote, keeps what fallocate reserved, and
// changes no byte.
func TestDropPrealloc(t *testing.T) {
	e := newEnv(t, envOpts{})
	held := func(seg pram.Off) uint64 { return e.s.a.U64(seg + slOffBlocks) }
	drop := func(seg pram.Off, size int64) {
		t.Helper()
		e.must(func(tx *pram.Tx) error { return e.s.DropPrealloc(tx, seg, size) })
		if e.s.HasPrealloc(seg, size) {
			t.Fatalf("the window is still remembered after DropPrealloc")
		}
	}
	bs := int64(e.s.bs)

	// One byte at 0 of a file 20 MiB long (truncated up): 1 MiB taken.
	one := e.newFile(1)
	if err := e.write(one, 0, []byte{7}); err != nil {
		t.Fatal(err)
	}
	if h := held(one); h < 2 || !e.s.HasPrealloc(one, 20<<20) || e.s.HasPrealloc(one, 1) {
		t.Fatalf("a 1-byte write holds %d blocks (window remembered inside 20 MiB: %v, inside 1 byte: %v): want a preallocation past the byte",
			h, e.s.HasPrealloc(one, 20<<20), e.s.HasPrealloc(one, 1))
	}
	free := e.s.Stats().FreeBlocks
	drop(one, 20<<20)
	if h := held(one); h != 1 {
		t.Fatalf("after DropPrealloc the file holds %d blocks, want 1", h)
	}
	if got := e.s.Stats().FreeBlocks; got <= free {
		t.Fatalf("free blocks %d, were %d: nothing given back", got, free)
	}

	// 3 MiB written from 0 in 128 KiB requests into a 10 MiB file.
	seq := e.newFile(2)
	const n = 3 << 20
	for off := int64(0); off < n; off += 128 << 10 {
		if err := e.write(seq, off, pattern(2, off, 128<<10)); err != nil {
			t.Fatal(err)
		}
	}
	if h := held(seq); h <= n/uint64(bs) {
		t.Fatalf("3 MiB written hold %d blocks: want a preallocation past them", h)
	}
	drop(seq, 10<<20)
	if h := held(seq); h != n/uint64(bs) {
		t.Fatalf("after DropPrealloc 3 MiB hold %d blocks, want %d", h, n/bs)
	}

	// fallocate over the window: its blocks stay reserved.
	res := e.newFile(3)
	if err := e.write(res, 0, []byte{9}); err != nil {
		t.Fatal(err)
	}
	// (Inside the window: the blocks are mapped already, so the segment
	// still ends where the window does.)
	e.must(func(tx *pram.Tx) error { return e.s.Allocate(tx, res, 0, 512<<10) })
	e.must(func(tx *pram.Tx) error { return e.s.DropPrealloc(tx, res, 20<<20) })
	if h := held(res); h < uint64(512<<10/bs) {
		t.Fatalf("a file fallocated 512 KiB holds %d blocks after DropPrealloc, want at least %d", h, 512<<10/bs)
	}

	// Past the size it is Trim's: a file of one block keeps its window's
	// blocks to DropPrealloc.
	small := e.newFile(4)
	if err := e.write(small, 0, pattern(4, 0, 5000)); err != nil {
		t.Fatal(err)
	}
	before := held(small)
	e.must(func(tx *pram.Tx) error { return e.s.DropPrealloc(tx, small, 5000) })
	if h := held(small); h != before {
		t.Fatalf("DropPrealloc freed blocks past the size: %d held, were %d", h, before)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, small, 5000) })

	// A hole written in the middle after the preallocation: only the tail
	// past the last written block goes.
	mid := e.newFile(5)
	if err := e.write(mid, 0, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := e.write(mid, 5*bs+3, []byte{2}); err != nil { // inside the window
		t.Fatal(err)
	}
	drop(mid, 20<<20)
	if h := held(mid); h != 6 {
		t.Fatalf("blocks 0 and 5 written: %d held after DropPrealloc, want 6 (0-5, the tail freed)", h)
	}

	for seg, bytesAt := range map[pram.Off]map[int64]byte{one: {0: 7}, res: {0: 9}, mid: {0: 1, 5*bs + 3: 2}} {
		want := make([]byte, 6<<20)
		for off, b := range bytesAt {
			want[off] = b
		}
		if got, err := e.read(seg, 0, len(want)); err != nil || !bytes.Equal(got, want) {
			t.Fatalf("file %d reads wrong after DropPrealloc: %v", seg, err)
		}
	}
	if got, err := e.read(seq, 0, n); err != nil || !bytes.Equal(got, pattern(2, 0, n)) {
		t.Fatalf("3 MiB file reads wrong after DropPrealloc: %v", err)
	}
	e.check(map[pram.Off]int64{one: 20 << 20, seq: 10 << 20, res: 20 << 20, small: 5000, mid: 20 << 20})
}

// A file appended to in small writes fills a small disk to its last
// block. Its preallocation used to take every free block ahead of it; then
// the copy-on-write of its partly written last block after a sync found no
// free block, and a 64 MiB disk failed writes with ENOSPC at 38 MiB while
// the file held 26 MiB it had not written.
func TestAppendsFillSmallDisk(t *testing.T) {
	e := newEnv(t, envOpts{arenaSize: 16 << 20, dev: NewMemDevice(64 << 20)})
	seg := e.newFile(1)
	buf := make([]byte, 4096)
	var off int64
	var err error
	for ; off < 128<<20; off += int64(len(buf)) {
		copy(buf, pattern(1, off, len(buf)))
		if err = e.write(seg, off, buf); err != nil {
			break
		}
	}
	if !errors.Is(err, ErrNoSpace) {
		t.Fatalf("appends to a 64 MiB disk ended at %d bytes with %v, want ErrNoSpace", off, err)
	}
	st := e.s.Stats()
	if full := int64(st.DataBlocks-e.s.overwriteReserve()) * int64(st.BlockSize); off < full-2*int64(st.BlockSize) {
		t.Fatalf("ENOSPC after %d bytes of a disk of %d (%d blocks free, the file holds %d)",
			off, full, st.FreeBlocks, e.s.a.U64(seg+slOffBlocks))
	}
	if got, err := e.read(seg, 0, int(off)); err != nil || !bytes.Equal(got, pattern(1, 0, int(off))) {
		t.Fatalf("the file reads wrong: %v", err)
	}
	e.check(map[pram.Off]int64{seg: off})
}
