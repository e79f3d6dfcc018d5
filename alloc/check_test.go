package alloc

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"conquest/pram"
)

// mixedHeap builds a heap holding objects of many sizes, with some freed
// so that free lists, partial slabs and a 16-byte slab all exist.
func mixedHeap(t testing.TB) (*pram.Arena, *Heap, string, *model) {
	a, h, path := newArena(t, 4<<20)
	m := newModel()
	var offs []pram.Off
	for i := range 400 {
		n := []uint64{16, 16, 40, 100, 256, 700, 1024, 2000, 5000, 30000, 200000}[i%11]
		if i%11 == 10 && i > 100 {
			continue
		}
		off := mustAlloc(t, h, n)
		m.live[off] = obj{n: n, size: ClassSize(n), fill: byte(i)}
		fillObj(a, off, m.live[off])
		offs = append(offs, off)
	}
	for i, off := range offs {
		if i%3 == 0 {
			mustFree(t, h, off)
			delete(m.live, off)
		}
	}
	if err := m.verify(h); err != nil {
		t.Fatal(err)
	}
	return a, h, path, m
}

func hasErr(errs []error, target error, substr string) bool {
	for _, err := range errs {
		if errors.Is(err, target) && strings.Contains(err.Error(), substr) {
			return true
		}
	}
	return false
}

func TestCheckerReachability(t *testing.T) {
	_, h, _, m := mixedHeap(t)
	var small, large pram.Off
	for off, o := range m.live {
		if o.size <= MaxSmall && small == 0 {
			small = off
		}
		if o.size > MaxSmall && large == 0 {
			large = off
		}
	}
	start, end := h.DataRange()
	c := h.NewChecker()
	for off := range m.live {
		if off != small { // small is leaked
			c.Mark(off, "model")
		}
	}
	c.Mark(large, "second referrer") // reached twice
	c.Mark(large+4096, "interior")   // inside an allocation
	c.Mark(start-8, "before heap")   // out of range
	c.Mark(end-4096, "never used")   // never allocated
	c.Mark(0, "nil")                 // out of range
	if got := c.Errors(); len(got) != 5 {
		t.Errorf("Errors() before Finish: %d errors, want 5: %v", len(got), got)
	}
	errs := c.Finish()
	for _, want := range []struct {
		err    error
		substr string
	}{
		{ErrLeak, fmtOff(small)}, {ErrReachedTwice, "second referrer"}, {ErrNotAllocated, "interior"},
		{ErrOutOfRange, "before heap"}, {ErrNotAllocated, "never used"}, {ErrOutOfRange, "nil"},
	} {
		if !hasErr(errs, want.err, want.substr) {
			t.Errorf("missing %v %q in %v", want.err, want.substr, errs)
		}
	}
	if len(errs) != 6 {
		t.Errorf("%d errors, want 6: %v", len(errs), errs)
	}
	// A freed object that is still referenced.
	mustFree(t, h, small)
	c = h.NewChecker()
	c.Mark(small, "dangling")
	if errs := c.Finish(); !hasErr(errs, ErrNotAllocated, "dangling") {
		t.Errorf("mark of a freed object: %v", errs)
	}
}

// TestLeakErrorTyped: Finish reports each unmarked allocation as a
// *LeakError whose offset and size are the allocation's, whose text names
// them and which is ErrLeak; marked allocations are not reported.
func TestLeakErrorTyped(t *testing.T) {
	_, h, _, m := mixedHeap(t)
	leaked := make(map[pram.Off]bool)
	for off, o := range m.live {
		small := o.size <= MaxSmall
		if !leaked[off] && len(leaked) < 4 && (small && len(leaked)%2 == 0 || !small && len(leaked)%2 == 1) {
			leaked[off] = true
		}
	}
	if len(leaked) != 4 {
		t.Fatalf("picked %d allocations to leak, want 4", len(leaked))
	}
	c := h.NewChecker()
	for off := range m.live {
		if !leaked[off] {
			c.Mark(off, "model")
		}
	}
	got := make(map[pram.Off]bool)
	for _, err := range c.Finish() {
		var le *LeakError
		if !errors.As(err, &le) {
			t.Errorf("unexpected error: %v", err)
			continue
		}
		if !errors.Is(err, ErrLeak) {
			t.Errorf("%v: not ErrLeak", err)
		}
		if !leaked[le.Off] || got[le.Off] {
			t.Errorf("leak reported at %#x, which is not leaked or reported twice", le.Off)
			continue
		}
		got[le.Off] = true
		size, serr := h.SizeOf(le.Off)
		if serr != nil || le.Size != size {
			t.Errorf("leak at %#x: Size %d, SizeOf %d (%v)", le.Off, le.Size, size, serr)
		}
		if le.Object != (size <= MaxSmall) {
			t.Errorf("leak at %#x of %d bytes: Object %v", le.Off, size, le.Object)
		}
		want := fmt.Sprintf("%d bytes at %#x", size, le.Off)
		if le.Object {
			want = fmt.Sprintf("%d-byte object at %#x", size, le.Off)
		}
		if !strings.HasPrefix(err.Error(), ErrLeak.Error()) || !strings.HasSuffix(err.Error(), want) {
			t.Errorf("leak text %q, want %q after the sentinel's", err.Error(), want)
		}
	}
	if len(got) != len(leaked) {
		t.Errorf("%d leaks reported, want %d", len(got), len(leaked))
	}
}

func fmtOff(off pram.Off) string { return fmt.Sprintf("%#x", off) }

// TestCorruptionDetected damages allocator state in specific ways; each
// must be reported by Open or by the walk (Verify), never panic.
func TestCorruptionDetected(t *testing.T) {
	a, h, _, _ := mixedHeap(t)
	top := a.U64(h.g.hdr + hdrTop)
	find := func(kind uint8, pred func(pg uint64, e entry) bool) uint64 {
		for pg := range top {
			if e := h.readEnt(pg); e.kind == kind && (pred == nil || pred(pg, e)) {
				return pg
			}
		}
		t.Fatalf("no page of kind %d", kind)
		return 0
	}
	slab := find(kindSlab, func(_ uint64, e entry) bool { return e.order != 0 && e.used > 1 })
	tiny := find(kindSlab, func(_ uint64, e entry) bool { return e.order == 0 })
	large := find(kindLarge, func(_ uint64, e entry) bool { return e.npages > 2 })
	free := find(kindFree, nil)
	hdr := h.g.hdr
	cases := []struct {
		name string
		off  pram.Off
		xor  uint64 // xor into the 8-byte word at off
	}{
		{"magic", hdr + hdrMagic, 1},
		{"version", hdr + hdrVersion, 2},
		{"checksum", hdr + hdrChecksum, 1 << 40},
		{"npages", hdr + hdrNPages, 1},
		{"top+1", hdr + hdrTop, top ^ (top + 1)},
		{"top huge", hdr + hdrTop, 1 << 50},
		{"free count", hdr + hdrFreePages, 1},
		{"objects", hdr + hdrObjects, 4},
		{"used bytes", hdr + hdrUsedBytes, 16},
		{"reserved header word", hdr + 120, 1},
		{"unused list head slot", hdr + hdrFreeHeads + 8*(MaxOrder+1), 1},
		{"free list head", hdr + hdrFreeHeads, 1 << 20},
		{"partial list head", hdr + hdrPartial + 8*pram.Off(h.readEnt(slab).order), 1},
		{"slab kind", h.g.ent(slab), 1},
		{"slab class", h.g.ent(slab), 1 << 8},
		{"slab used", h.g.ent(slab), 1 << 16},
		{"slab bitmap", h.g.ent(slab) + entBitmap, 1 << 1},
		{"tiny tail bitmap", h.bitmapWord(tiny, 0, 1), 1 << 3},
		{"large npages", h.g.ent(large), 1 << 32},
		{"large kind", h.g.ent(large), 2},
		{"interior entry", h.g.ent(large + 1), 1 << 8},
		{"free order", h.g.ent(free), 1 << 8},
		{"free next", h.g.ent(free) + entNext, 1 << 3},
		{"free prev", h.g.ent(free) + entNext, 1 << 35},
		{"free stray bitmap", h.g.ent(free) + entBitmap + 8, 1},
		{"root slot 0", pram.RootOff(0), 4096},
	}
	for _, tc := range cases {
		a.PutU64(tc.off, a.U64(tc.off)^tc.xor)
		h2, err := Open(a)
		var errs []error
		if err == nil {
			errs = h2.Verify()
		} else if !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Open error %v does not wrap ErrCorrupt", tc.name, err)
		}
		if err == nil && len(errs) == 0 {
			t.Errorf("%s: damage not detected", tc.name)
		}
		for _, e := range errs {
			if !errors.Is(e, ErrCorrupt) {
				t.Errorf("%s: walk error %v does not wrap ErrCorrupt", tc.name, e)
			}
		}
		a.PutU64(tc.off, a.U64(tc.off)^tc.xor)
		if errs := h.Verify(); len(errs) > 0 {
			t.Fatalf("%s: undoing the damage left %v", tc.name, errs)
		}
	}
}

// TestRandomFlipsDetected flips one random byte of allocator state at a
// time (header page, page map below top, 16-byte slab tails): Open or the
// walk (marking every live object, as the file system's Check does) must
// report every one. Verify alone cannot see a flip that moves a bitmap bit
// from a used slot to a free one; the marks do.
func TestRandomFlipsDetected(t *testing.T) {
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, 1))
	a, h, _, m := mixedHeap(t)
	top := a.U64(h.g.hdr + hdrTop)
	walk := func(h *Heap) []error {
		c := h.NewChecker()
		for off := range m.live {
			c.Mark(off, "model")
		}
		return c.Finish()
	}
	var regions [][2]pram.Off
	regions = append(regions, [2]pram.Off{h.g.hdr, h.g.hdr + pageSize}, [2]pram.Off{h.g.mapOff, h.g.ent(top)})
	for pg := range top {
		if e := h.readEnt(pg); e.kind == kindSlab && e.order == 0 {
			o := h.bitmapWord(pg, 0, 0)
			regions = append(regions, [2]pram.Off{o, o + tailBitmap})
		}
	}
	var total uint64
	for _, r := range regions {
		total += uint64(r[1] - r[0])
	}
	for i := range 3000 {
		k := rng.Uint64N(total)
		var off pram.Off
		for _, r := range regions {
			if n := uint64(r[1] - r[0]); k < n {
				off = r[0] + pram.Off(k)
				break
			} else {
				k -= n
			}
		}
		x := byte(1 + rng.IntN(255))
		b := a.Bytes(off, 1)
		b[0] ^= x
		h2, err := Open(a)
		if err == nil && len(walk(h2)) == 0 {
			t.Errorf("flip %d (seed %d): xor %#x at %#x (heap+%d) not detected", i, seed, x, off, off-h.g.hdr)
		}
		b[0] ^= x
	}
	if errs := walk(h); len(errs) > 0 {
		t.Fatal(errs)
	}
}
