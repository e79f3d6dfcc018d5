package alloc

import (
	"fmt"
	"math/bits"

	"conquest/pram"
)

// maxErrors bounds the errors one walk keeps; a badly damaged heap could
// otherwise produce one per page.
const maxErrors = 1000

// Checker is the heap's part of the file system's consistency walk. The
// layers above Mark every allocation they reach; Finish then walks the
// heap's own structures and reports what is wrong. It only reads the arena
// and never panics on a damaged one.
//
// What it checks:
//   - Mark: the offset is in the heap (ErrOutOfRange), is the start of a live
//     allocation (ErrNotAllocated: never allocated, free, or inside one), and
//     is reached only once (ErrReachedTwice);
//   - Finish: every live allocation was marked (a *LeakError per unmarked
//     one, which is ErrLeak); the header is intact; every carved page
//     belongs to exactly one block and non-head entries are zero; slab
//     bitmaps agree with their counts; every free block is on the free list
//     of its order and every slab with a free slot on its class's partial
//     list, exactly once, with consistent links; free buddies are merged;
//     the header's counters equal what the walk counted (all ErrCorrupt).
//
// A Checker is used by one goroutine, while no writer changes the heap.
type Checker struct {
	h       *Heap
	errs    []error
	dropped int
	marks   map[uint64]*[4]uint64 // data page -> marked slots (bit 0 for a large allocation)
	leaks   bool                  // Finish reports unmarked allocations
	unknown map[uint64][]pram.Off // page of unknown kind -> the offsets marked in it (RepairKindFrom)
}

// MarkedInUnknown is the offsets Mark was given inside data page pg when
// its entry's kind was unknown: the objects the walk found live there.
func (c *Checker) MarkedInUnknown(pg uint64) []pram.Off { return c.unknown[pg] }

// NewChecker starts a walk.
func (h *Heap) NewChecker() *Checker {
	return &Checker{h: h, marks: make(map[uint64]*[4]uint64), leaks: true}
}

// Verify checks the heap's internal consistency alone: Finish without
// reachability (no ErrLeak). Extension of DESIGN.md.
func (h *Heap) Verify() []error {
	c := h.NewChecker()
	c.leaks = false
	return c.Finish()
}

func (c *Checker) add(err error) {
	if len(c.errs) < maxErrors {
		c.errs = append(c.errs, err)
	} else {
		c.dropped++
	}
}

func (c *Checker) corrupt(format string, args ...any) {
	c.add(fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...))
}

// derived records damage to what RebuildLists recomputes.
func (c *Checker) derived(format string, args ...any) {
	c.add(&DerivedStateError{What: fmt.Sprintf(format, args...)})
}

// Mark records that the upper layers reach the allocation at off; what
// names the referrer in error messages. It returns the error it recorded
// (nil if none), so that a caller can tell an allocation reached twice
// (ErrReachedTwice) from one that is not an allocation.
func (c *Checker) Mark(off pram.Off, what string) error {
	l, err := c.h.locate(off)
	if err == nil && l.free {
		err = fmt.Errorf("%w: %#x is free", ErrNotAllocated, off)
	}
	if pg, ok := c.h.unknownKindPage(off); ok {
		if c.unknown == nil {
			c.unknown = make(map[uint64][]pram.Off)
		}
		c.unknown[pg] = append(c.unknown[pg], off)
	}
	if err != nil {
		err = fmt.Errorf("%s: %w", what, err)
		c.add(err)
		return err
	}
	m := c.marks[l.pg]
	if m == nil {
		m = new([4]uint64)
		c.marks[l.pg] = m
	}
	w, b := l.slot/64, uint64(1)<<(l.slot%64)
	if m[w]&b != 0 {
		err := fmt.Errorf("%s: %w: %#x", what, ErrReachedTwice, off)
		c.add(err)
		return err
	}
	m[w] |= b
	return nil
}

// Marked reports whether Mark has recorded the allocation at off as reached
// (false for an offset that is no allocation). It records nothing.
func (c *Checker) Marked(off pram.Off) bool {
	l, err := c.h.locate(off)
	return err == nil && !l.free && c.marked(l.pg, l.slot)
}

func (c *Checker) marked(pg, slot uint64) bool {
	m := c.marks[pg]
	return m != nil && m[slot/64]&(1<<(slot%64)) != 0
}

// Errors returns the errors found so far.
func (c *Checker) Errors() []error { return append([]error(nil), c.errs...) }

// Finish walks the heap and returns every error found, Mark's included.
func (c *Checker) Finish() []error {
	h := c.h
	if err := h.checkHeader(); err != nil {
		c.add(err)
	}
	top := min(h.a.U64(h.g.hdr+hdrTop), h.g.npages)
	w := &walk{c: c, top: top, want: make([]uint64, (top+63)/64)}
	w.reserved()
	w.pages()
	w.lists()
	w.counters()
	if c.dropped > 0 {
		c.errs = append(c.errs, fmt.Errorf("%w: %d more errors not shown", ErrCorrupt, c.dropped))
		c.dropped = 0
	}
	return c.Errors()
}

// walk is the state of Finish.
type walk struct {
	c    *Checker
	top  uint64
	want []uint64 // pages that must be on a list (free heads, non-full slabs)

	free, slab, large, objects, used uint64
}

func (w *walk) setWant(pg uint64) { w.want[pg/64] |= 1 << (pg % 64) }
func (w *walk) takeWant(pg uint64) bool { // reports and clears the bit
	b := uint64(1) << (pg % 64)
	had := w.want[pg/64]&b != 0
	w.want[pg/64] &^= b
	return had
}

// pages scans the page map from page 0 to top, block by block.
func (w *walk) pages() {
	c, h := w.c, w.c.h
	for pg := uint64(0); pg < w.top; {
		e := h.readEnt(pg)
		switch e.kind {
		case kindFree:
			j := uint(e.order)
			if j > MaxOrder || pg&(1<<j-1) != 0 || pg+1<<j > w.top {
				c.add(&BadOrderError{Page: pg, Order: j, Top: w.top})
				pg++
				continue
			}
			w.interior(pg, 1<<j)
			if e.used != 0 || e.npages != 0 || !w.bitmapZero(pg) {
				c.add(&StrayFieldsError{Page: pg, Free: true})
			}
			if q := pg ^ 1<<j; j < MaxOrder && q > pg && q+1<<j <= w.top {
				if eq := h.readEnt(q); eq.kind == kindFree && uint(eq.order) == j {
					c.corrupt("free buddies at pages %d and %d (order %d) are not merged", pg, q, j)
				}
			}
			w.setWant(pg)
			w.free += 1 << j
			pg += 1 << j
		case kindLarge:
			np := uint64(e.npages)
			if np == 0 || np > maxBlockPages || pg+np > w.top || pg&(1<<orderFor(np)-1) != 0 {
				c.add(&BadSizeError{Page: pg, NPages: np, Top: w.top})
				pg++
				continue
			}
			w.interior(pg, np)
			if e.order != 0 || e.used != 0 || e.next != 0 || e.prev != 0 || !w.bitmapZero(pg) {
				c.add(&StrayFieldsError{Page: pg})
			}
			if c.leaks && !c.marked(pg, 0) {
				c.add(&LeakError{Off: h.g.page(pg), Size: np << pageShift})
			}
			w.large += np
			w.objects++
			w.used += np << pageShift
			pg += np
		case kindSlab:
			w.slabPage(pg, e)
			pg++
		case kindNone:
			c.add(derivedf("page %d: below top %d but in no block (lost page)", pg, w.top))
			pg++
		default:
			c.add(&UnknownKindError{Page: pg, Kind: e.kind})
			pg++
		}
	}
}

// bitmapZero reports whether the bitmap words of pg's entry are zero.
func (w *walk) bitmapZero(pg uint64) bool {
	o := w.c.h.g.ent(pg) + entBitmap
	return w.c.h.a.U64(o)|w.c.h.a.U64(o+8) == 0
}

// reservedRanges are the unused words of the header page, [from, to).
var reservedRanges = [...]struct{ from, to int }{{hdrChecksum + 8, hdrTop}, {hdrUsedBytes + 8, hdrFreeHeads},
	{hdrFreeHeads + 8*(MaxOrder+1), hdrPartial}, {hdrPartial + 8*NumClasses, pageSize}}

// reservedWord reports whether off is the offset of an unused header word.
func reservedWord(off int) bool {
	for _, r := range reservedRanges {
		if off >= r.from && off < r.to && (off-r.from)%8 == 0 {
			return true
		}
	}
	return false
}

// reserved checks that the unused words of the header page are zero.
func (w *walk) reserved() {
	h := w.c.h
	for _, r := range reservedRanges {
		for off := r.from; off < r.to; off += 8 {
			if h.a.U64(h.g.hdr+pram.Off(off)) != 0 {
				w.c.add(&ReservedWordError{Off: off})
			}
		}
	}
}

// interior checks that the entries of pages 1..n-1 of the block at pg are zero.
func (w *walk) interior(pg, n uint64) {
	for p := pg + 1; p < pg+n; p++ {
		if !w.c.h.entZero(p) {
			w.c.add(&StrayFieldsError{Page: p, Inside: true, Head: pg})
			return
		}
	}
}

func (w *walk) slabPage(pg uint64, e entry) {
	c, h := w.c, w.c.h
	cl := int(e.order)
	if cl >= NumClasses {
		c.corrupt("page %d: slab of unknown class %d", pg, cl)
		return
	}
	size, slots := uint64(classSizes[cl]), slotsOf(cl)
	var n uint64
	for i := range bitmapWords(cl) {
		word := h.a.U64(h.bitmapWord(pg, cl, i))
		if word&^slotMask(cl, i) != 0 {
			c.add(&StrayFieldsError{Page: pg, Slab: true, Bits: true})
		}
		word &= slotMask(cl, i)
		n += uint64(bits.OnesCount64(word))
		for ; c.leaks && word != 0; word &= word - 1 {
			s := uint64(64*i + bits.TrailingZeros64(word))
			if !c.marked(pg, s) {
				c.add(&LeakError{Off: h.g.page(pg) + pram.Off(s*size), Size: size, Object: true})
			}
		}
	}
	if n != uint64(e.used) {
		c.derived("page %d: slab counts %d used but its bitmap has %d", pg, e.used, n)
	}
	if e.npages != 0 || (cl == 0 && !w.bitmapZero(pg)) {
		c.add(&StrayFieldsError{Page: pg, Slab: true})
	}
	if n < slots {
		w.setWant(pg)
	} else if e.next != 0 || e.prev != 0 {
		c.derived("page %d: full slab has list links", pg)
	}
	w.slab++
	w.objects += n
	w.used += n * size
}

// lists walks every free list and partial list: members must be what the
// page scan expected, each exactly once, with consistent back links.
func (w *walk) lists() {
	h := w.c.h
	for j := range MaxOrder + 1 {
		w.list(h.freeHead(j), fmt.Sprintf("free list of order %d", j), func(e entry) bool {
			return e.kind == kindFree && int(e.order) == j
		})
	}
	for cl := range NumClasses {
		w.list(h.partialHead(cl), fmt.Sprintf("partial list of class %d", cl), func(e entry) bool {
			return e.kind == kindSlab && int(e.order) == cl && uint64(e.used) < slotsOf(cl)
		})
	}
	for i, word := range w.want {
		for ; word != 0; word &= word - 1 {
			pg := uint64(64*i + bits.TrailingZeros64(word))
			e := h.readEnt(pg)
			w.c.derived("page %d (kind %d, order/class %d) is on no list", pg, e.kind, e.order)
		}
	}
}

func (w *walk) list(head pram.Off, name string, ok func(entry) bool) {
	c, h := w.c, w.c.h
	prev := uint64(0)
	for v := h.a.U64(head); v != 0; {
		if v > w.top {
			c.derived("%s: link to page %d past top %d", name, v-1, w.top)
			return
		}
		pg := v - 1
		e := h.readEnt(pg)
		if !ok(e) {
			c.derived("%s: page %d does not belong there (kind %d, order/class %d)", name, pg, e.kind, e.order)
			return
		}
		if !w.takeWant(pg) {
			c.derived("%s: page %d reached twice (a cycle or on two lists)", name, pg)
			return
		}
		if uint64(e.prev) != prev {
			c.derived("%s: page %d has back link %d, want %d", name, pg, e.prev, prev)
		}
		prev, v = v, uint64(e.next)
	}
}

// counters compares the header's counters with what the walk counted.
func (w *walk) counters() {
	s := w.c.h.counters()
	for _, x := range [...]struct {
		name      string
		hdr, walk uint64
	}{{"top", s.top, w.free + w.slab + w.large}, {"free pages", s.free, w.free}, {"slab pages", s.slab, w.slab},
		{"large pages", s.large, w.large}, {"objects", s.objects, w.objects}, {"used bytes", s.used, w.used}} {
		if x.hdr != x.walk {
			w.c.derived("header counts %d %s, the walk found %d", x.hdr, x.name, x.walk)
		}
	}
}
