package alloc

import (
	"encoding/hex"
	"testing"

	"conquest/pram"
)

// TestLayoutPinned pins the on-arena format: changing any of these values
// changes the format and needs a new HeapVersion.
func TestLayoutPinned(t *testing.T) {
	pins := []struct {
		name      string
		got, want int
	}{
		{"hdrMagic", hdrMagic, 0}, {"hdrVersion", hdrVersion, 8}, {"hdrEntrySize", hdrEntrySize, 12},
		{"hdrMapOff", hdrMapOff, 16}, {"hdrDataOff", hdrDataOff, 24}, {"hdrNPages", hdrNPages, 32},
		{"hdrClasses", hdrClasses, 40}, {"hdrMaxOrder", hdrMaxOrder, 44}, {"hdrChecksum", hdrChecksum, 48},
		{"hdrTop", hdrTop, 64}, {"hdrFreePages", hdrFreePages, 72}, {"hdrSlabPages", hdrSlabPages, 80},
		{"hdrLargePgs", hdrLargePgs, 88}, {"hdrObjects", hdrObjects, 96}, {"hdrUsedBytes", hdrUsedBytes, 104},
		{"hdrFreeHeads", hdrFreeHeads, 128}, {"hdrPartial", hdrPartial, 256}, {"HeaderSize", HeaderSize, 512},
		{"EntrySize", EntrySize, 32}, {"entKind", entKind, 0}, {"entOrder", entOrder, 1}, {"entUsed", entUsed, 2},
		{"entNPages", entNPages, 4}, {"entNext", entNext, 8}, {"entPrev", entPrev, 12}, {"entBitmap", entBitmap, 16},
		{"kindNone", kindNone, 0}, {"kindFree", kindFree, 1}, {"kindLarge", kindLarge, 2}, {"kindSlab", kindSlab, 3},
		{"MaxOrder", MaxOrder, 8}, {"MaxSmall", MaxSmall, 2048}, {"NumClasses", NumClasses, 23},
		{"tailBitmap", tailBitmap, 32}, {"tinySlots", tinySlots, 254}, {"pageSize", pageSize, pram.PageSize},
		{"HeapVersion", int(HeapVersion), 1},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s = %d, pinned at %d", p.name, p.got, p.want)
		}
	}
	if HeapMagic != "CONQHEAP" {
		t.Errorf("HeapMagic = %q", HeapMagic)
	}
	// Arrays fit their reserved space.
	if hdrFreeHeads+8*maxHeadSlots > hdrPartial || MaxOrder+1 > maxHeadSlots {
		t.Error("free list heads overflow their slots")
	}
	if hdrPartial+8*maxClassSlots > HeaderSize || NumClasses > maxClassSlots {
		t.Error("partial list heads overflow the header")
	}
	if hdrUsedBytes+8 > hdrFreeHeads || hdrChecksum+8 > hdrTop {
		t.Error("header fields overlap")
	}
	if entBitmap+16 != EntrySize || pageSize%EntrySize != 0 {
		t.Error("entry layout")
	}
}

// TestSizeClasses checks the class table: increasing, multiples of 16, at
// most 128 slots per page outside class 0 (the entry bitmap holds 128), and
// classOf picks the smallest class that fits.
func TestSizeClasses(t *testing.T) {
	want := []uint32{16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224,
		256, 288, 336, 400, 448, 512, 576, 672, 816, 1024, 1360, 2048}
	if len(want) != NumClasses {
		t.Fatalf("%d classes, want %d", NumClasses, len(want))
	}
	for c, s := range classSizes {
		if s != want[c] {
			t.Errorf("class %d = %d, pinned at %d", c, s, want[c])
		}
		if s%16 != 0 || (c > 0 && s <= classSizes[c-1]) {
			t.Errorf("class %d (%d) not an increasing multiple of 16", c, s)
		}
		if c > 0 && slotsOf(c) > 128 {
			t.Errorf("class %d has %d slots, bitmap holds 128", c, slotsOf(c))
		}
		if slotsOf(c)*uint64(s) > pageSize || (c == 0 && slotsOf(c)*uint64(s)+tailBitmap > pageSize) {
			t.Errorf("class %d: %d slots of %d overflow the page", c, slotsOf(c), s)
		}
	}
	for n := uint64(1); n <= MaxSmall; n++ {
		c := classOf(n)
		if uint64(classSizes[c]) < n || (c > 0 && uint64(classSizes[c-1]) >= n) {
			t.Fatalf("classOf(%d) = %d (%d bytes)", n, c, classSizes[c])
		}
	}
	for _, tc := range []struct{ n, want uint64 }{{0, 0}, {1, 16}, {16, 16}, {17, 32}, {1000, 1024}, {1024, 1024},
		{1025, 1360}, {2048, 2048}, {2049, 4096}, {4097, 8192}, {100 << 10, 100 << 10}, {100<<10 + 1, 104 << 10},
		{MaxAlloc, MaxAlloc}, {MaxAlloc + 1, 0}} {
		if got := ClassSize(tc.n); got != tc.want {
			t.Errorf("ClassSize(%d) = %d, want %d", tc.n, got, tc.want)
		}
	}
	for _, tc := range []struct {
		np   uint64
		want uint
	}{{1, 0}, {2, 1}, {3, 2}, {4, 2}, {5, 3}, {255, 8}, {256, 8}} {
		if got := orderFor(tc.np); got != tc.want {
			t.Errorf("orderFor(%d) = %d, want %d", tc.np, got, tc.want)
		}
	}
}

// TestLayoutFor checks the heap geometry: map and data fit the arena
// exactly, the page count is maximal, and data is page aligned.
func TestLayoutFor(t *testing.T) {
	for _, size := range []uint64{1 << 20, 3<<20 + 4096*7, 64 << 20, 1 << 30, 1 << 40} {
		g := pram.Geometry{Size: size, JournalOff: pram.PageSize, JournalLen: pram.DefaultJournalLen(size)}
		g.HeapOff = pram.Off(pram.PageSize + g.JournalLen)
		l, ok := layoutFor(g)
		if !ok {
			t.Fatalf("size %d: no layout", size)
		}
		end := uint64(l.dataOff) + l.npages*pageSize
		if l.hdr != g.HeapOff || l.mapOff != g.HeapOff+pageSize || uint64(l.dataOff)%pageSize != 0 ||
			uint64(l.dataOff-l.mapOff) < l.npages*EntrySize || end > size {
			t.Errorf("size %d: bad layout %+v", size, l)
		}
		// One more page would not fit.
		if n := l.npages + 1; uint64(g.HeapOff)+pageSize+mapBytes(n)+n*pageSize <= size {
			t.Errorf("size %d: %d pages, %d would fit", size, l.npages, n)
		}
	}
	if _, ok := layoutFor(pram.Geometry{Size: 1 << 20, HeapOff: 1<<20 - 2*pageSize}); ok {
		t.Error("layout for a 2-page heap")
	}
}

// TestHeaderGolden pins the encoded header of a fresh heap over a 1 MiB
// arena (default journal) byte for byte, checksum included.
func TestHeaderGolden(t *testing.T) {
	a, h, _ := newArena(t, 1<<20)
	if a.Geometry().HeapOff != 0x41000 {
		t.Fatalf("pram geometry changed: heap at %#x", a.Geometry().HeapOff)
	}
	const want = "434f4e5148454150" + "01000000" + "20000000" + // magic, version 1, entry size 32
		"0020040000000000" + "0040040000000000" + "bc00000000000000" + // map 0x42000, data 0x44000, 188 pages
		"17000000" + "08000000" + // 23 classes, max order 8
		"70e838d5b8f9fd15" + "0000000000000000" // farm checksum, reserved
	got := hex.EncodeToString(a.Bytes(h.g.hdr, 64))
	if got != want {
		t.Errorf("header\n got %s\nwant %s", got, want)
	}
	for off := pram.Off(hdrTop); off < HeaderSize; off += 8 {
		if v := a.U64(h.g.hdr + off); v != 0 {
			t.Errorf("fresh header word at %d = %d", off, v)
		}
	}
	if a.Root(0) != 0x41000 {
		t.Errorf("root slot 0 = %#x, want heap header 0x41000", a.Root(0))
	}
}
