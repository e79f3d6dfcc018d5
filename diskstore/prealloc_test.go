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

	// Blocks 0 and 5 written after the preallocation (a file written with
	// a hole between, as `cp --sparse` writes): the unwritten blocks
	// between them go too, splitting the segment (before session 45 only
	// the tail past the last written block went: 6 held).
	mid := e.newFile(5)
	if err := e.write(mid, 0, []byte{1}); err != nil {
		t.Fatal(err)
	}
	if err := e.write(mid, 5*bs+3, []byte{2}); err != nil { // inside the window
		t.Fatal(err)
	}
	drop(mid, 20<<20)
	if h := held(mid); h != 2 {
		t.Fatalf("blocks 0 and 5 written: %d held after DropPrealloc, want 2", h)
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

// DropPrealloc over a window cut into more unwritten runs than one Tx's
// journal can record splits of (a byte written in every other block of
// 16 MiB, with a 256 KiB journal): it unmaps as many as fit, fails
// nothing, and changes no byte.
func TestDropPreallocManyHoles(t *testing.T) {
	e := newEnv(t, envOpts{arenaSize: 16 << 20, blockSize: 4096})
	held := func(seg pram.Off) uint64 { return e.s.a.U64(seg + slOffBlocks) }
	bs := int64(e.s.bs)
	const blocks = 4096
	seg := e.newFile(1)
	want := make([]byte, blocks*bs)
	for b := int64(0); b < blocks; b += 2 {
		if err := e.write(seg, b*bs+7, []byte{byte(b/2) | 1}); err != nil {
			t.Fatal(err)
		}
		want[b*bs+7] = byte(b/2) | 1
	}
	before := held(seg)
	if before < blocks-1 {
		t.Fatalf("only %d blocks held: the writes took nothing ahead", before)
	}
	e.must(func(tx *pram.Tx) error { return e.s.DropPrealloc(tx, seg, blocks*bs) })
	after := held(seg)
	if after >= before || after <= blocks/2 {
		t.Fatalf("%d blocks held before one DropPrealloc, %d after (%d written): want some, not all, given back", before, after, blocks/2)
	}
	if !e.s.HasPrealloc(seg, blocks*bs) {
		t.Fatal("the rest of the window was forgotten")
	}
	// Further calls, each in a Tx of its own, take the rest (the core's
	// loop at the last close).
	for calls := 1; e.s.HasPrealloc(seg, blocks*bs); calls++ {
		if calls > 64 {
			t.Fatal("DropPrealloc makes no progress")
		}
		e.must(func(tx *pram.Tx) error { return e.s.DropPrealloc(tx, seg, blocks*bs) })
	}
	if h := held(seg); h != blocks/2 {
		t.Fatalf("%d blocks held after the window was dropped, want the %d written", h, blocks/2)
	}
	if got, err := e.read(seg, 0, len(want)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("the file reads wrong after DropPrealloc: %v", err)
	}
	e.check(map[pram.Off]int64{seg: blocks * bs})
}

// A file written forward with holes between its writes wider than what
// each write takes ahead (`cp --sparse` of a sparse file): the windows
// join across the holes, so DropPrealloc gives back every unwritten block
// (before session 45 only the last window was remembered, and a copy kept
// a third more blocks than its source). Blocks fallocate reserved in such
// a gap keep the windows apart and stay reserved.
func TestDropPreallocAcrossHoles(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096})
	held := func(seg pram.Off) uint64 { return e.s.a.U64(seg + slOffBlocks) }
	bs := int64(e.s.bs)
	dropAll := func(seg pram.Off, size int64) {
		t.Helper()
		for calls := 0; e.s.HasPrealloc(seg, size); calls++ {
			if calls > 64 {
				t.Fatal("DropPrealloc makes no progress")
			}
			e.must(func(tx *pram.Tx) error { return e.s.DropPrealloc(tx, seg, size) })
		}
	}

	seg := e.newFile(1)
	const writes, stride = 40, 700 // blocks apart: more than is taken ahead
	for i := int64(0); i < writes; i++ {
		if err := e.write(seg, i*stride*bs, []byte{1}); err != nil {
			t.Fatal(err)
		}
	}
	size := writes * stride * bs
	if held(seg) <= writes {
		t.Fatalf("%d blocks held for %d written: nothing taken ahead", held(seg), writes)
	}
	dropAll(seg, size)
	if h := held(seg); h != writes {
		t.Fatalf("%d blocks held after DropPrealloc, want the %d written", h, writes)
	}

	// A far write that the kernel split in two (a 128 KiB write not
	// aligned to a page): the first piece takes only its own blocks, the
	// second takes blocks ahead; written blocks between the windows do not
	// keep them apart, so the first window's unwritten blocks go too.
	split := e.newFile(3)
	if err := e.write(split, 0, pattern(5, 0, 200000)); err != nil {
		t.Fatal(err)
	}
	far := int64(8000000)
	if err := e.write(split, far, pattern(6, 0, 126976)); err != nil {
		t.Fatal(err)
	}
	if err := e.write(split, far+126976, pattern(7, 0, 4096)); err != nil {
		t.Fatal(err)
	}
	splitSize := far + 131072
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, split, splitSize) })
	dropAll(split, splitSize)
	if h, want := held(split), uint64((200000+bs-1)/bs+(far+131072+bs-1)/bs-far/bs); h != want {
		t.Fatalf("split far write: %d blocks held after DropPrealloc, want the %d written", h, want)
	}

	// A fallocated run between two writes: kept.
	res := e.newFile(2)
	if err := e.write(res, 0, []byte{1}); err != nil {
		t.Fatal(err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Allocate(tx, res, 1000*bs, 10*bs) })
	if err := e.write(res, 2000*bs, []byte{2}); err != nil {
		t.Fatal(err)
	}
	e.must(func(tx *pram.Tx) error { return e.s.Trim(tx, res, 2001*bs) })
	dropAll(res, 2001*bs)
	for fb := uint64(1000); fb < 1010; fb++ {
		if sp, err := e.s.lookup(res, fb); err != nil || sp.disk == 0 {
			t.Fatalf("fallocated block %d was given back (%v)", fb, err)
		}
	}
	if h := held(res); h < 12 {
		t.Fatalf("%d blocks held after DropPrealloc, want at least the 2 written and the 10 fallocated", h)
	}
	want := make([]byte, 2001*bs)
	want[0], want[2000*bs] = 1, 2
	if got, err := e.read(res, 0, len(want)); err != nil || !bytes.Equal(got, want) {
		t.Fatalf("reads wrong after DropPrealloc: %v", err)
	}
	e.check(map[pram.Off]int64{seg: size, res: 2001 * bs, split: splitSize})
}
