package alloc

import (
	"encoding/binary"
	"fmt"
	"os"

	farm "github.com/dgryski/go-farm"

	"conquest/pram"
)

// MaxAlloc is the largest single allocation (1 MiB).
const MaxAlloc = 1 << 20

// Heap is an open allocator over an arena's heap. It caches only the static
// layout (checked by Open); all changing state is in the arena, so a Heap
// costs O(1) to open whatever the number of allocations.
//
// Concurrency: Alloc and Free are called by one writer at a time (the file
// system's write lock, which also covers the Tx). SizeOf, ClassSize and Stats
// only read the arena and may run concurrently with each other while no
// writer runs.
type Heap struct {
	a *pram.Arena
	g geometry

	// reuse tracks memory freed by the current Tx; guarded by the writer's
	// lock like Alloc and Free.
	reuse reuseTracker

	// useReserve > 0 lets allocations take the pages kept for frees
	// (freereserve.go); guarded by the writer's lock.
	useReserve int
	// halfReserve > 0 lets them take half of those pages
	// (UsingHalfReserve); guarded likewise.
	halfReserve int
	// rewritePages: pages kept from ordinary allocations beside the
	// reserve, for UsingHalfReserve's (SetRewriteReserve); set at open.
	rewritePages uint64
}

// Stats summarizes the heap. TotalBytes = FreeBytes + UsedBytes + SlackBytes.
type Stats struct {
	TotalBytes uint64 // bytes of the data area (header and page map excluded)
	FreeBytes  uint64 // bytes in free pages, usable by any request
	UsedBytes  uint64 // capacity of live allocations
	Objects    uint64 // live allocations
	SlackBytes uint64 // bytes in slab and large pages not in any capacity: free slots and rounding
	MetaBytes  uint64 // heap header and page map

	Pages      uint64 // data pages
	FreePages  uint64 // pages in free buddy blocks or never used
	SlabPages  uint64 // pages holding small objects
	LargePages uint64 // pages of live page-sized allocations
	NeverUsed  uint64 // pages never handed out since Format (still sparse in a file)

	ReservePages uint64 // free pages ordinary allocations leave (ReservePages, and the rewrite reserve)
	AvailBytes   uint64 // free bytes outside the reserve: what ordinary allocations can get
}

// Format lays allocator state over [HeapOff, Size) and sets root slot 0,
// through tx. Only the header (HeaderSize bytes) and the root slot are
// logged: the page map is known to be zero on a freshly formatted image file
// and is cleared without logging on a device (it is unreachable until the
// root slot is set, so a rollback leaves nothing half-done).
func Format(tx *pram.Tx) (*Heap, error) {
	a := tx.Arena()
	g, ok := layoutFor(a.Geometry())
	if !ok {
		return nil, fmt.Errorf("%w: arena of %d bytes leaves no room for a heap", ErrNoSpace, a.Size())
	}
	if r := a.Root(0); r != 0 {
		return nil, fmt.Errorf("%w at %#x", ErrFormatted, r)
	}
	h := &Heap{a: a, g: g}
	if err := h.reserve(0); err != nil {
		return nil, err
	}
	if a.Kind() != pram.KindFile {
		// A device holds what it held before, not the zeros of a new
		// image file: the header page's unused words (checkHeader wants
		// them zero; fsck reported each of them after an mkfs of a
		// reused device) and the page map.
		clearNonZero(a.Bytes(g.hdr, uint64(g.dataOff-g.hdr)))
	}
	var b [HeaderSize]byte
	copy(b[:], staticHeader(g))
	tx.SetBytes(g.hdr, b[:])
	tx.Set64(pram.RootOff(0), uint64(g.hdr))
	return h, nil
}

// reserve has the arena's image file back the heap up to the end of data
// page pages-1, with the header and the page map (pram.Arena.Reserve): a
// store to a page the file system cannot back would kill the process.
// Called before pages are first handed out; ErrNoSpace if there is no room.
func (h *Heap) reserve(pages uint64) error {
	if err := h.a.Reserve(uint64(h.g.page(pages))); err != nil {
		return fmt.Errorf("%w: %w", ErrNoSpace, err)
	}
	return nil
}

// clearNonZero zeroes b page by page, writing only pages that are not
// already zero.
func clearNonZero(b []byte) {
	for len(b) > 0 {
		n := min(len(b), pageSize)
		for _, c := range b[:n] {
			if c != 0 {
				clear(b[:n])
				break
			}
		}
		b = b[n:]
	}
}

// Open finds the heap through root slot 0 and validates its header: magic,
// version, checksum, layout against the arena's geometry, and the bounds of
// the counters and list heads. It reads nothing else, so it takes the same
// time for an empty heap and a full one. Errors wrap ErrCorrupt, but for
// an intact header of another format version (pram.ErrVersion).
func Open(a *pram.Arena) (*Heap, error) {
	h, err := locate(a)
	if err != nil {
		return nil, err
	}
	if err := h.checkHeader(); err != nil {
		return nil, err
	}
	if err := h.reserve(h.a.U64(h.g.hdr + hdrTop)); err != nil {
		return nil, err
	}
	return h, nil
}

// errUnformatted is the error of an arena whose mkfs stopped before it
// formatted the heap.
var errUnformatted = fmt.Errorf("%w: root slot 0 is empty and %w", ErrCorrupt, ErrNoHeap)

// CheckFormatted reads the arena image at path, of geometry g (as
// pram.ReadGeometry gives it), without opening it, and returns Open's
// ErrNoHeap error if its mkfs stopped before it formatted the heap: root
// slot 0 empty and no heap magic where g puts the header. Such an mkfs may
// not have written the disk's superblock either, so a caller that finds the
// disk unrecognizable asks this first, to name the interrupted mkfs rather
// than a wrong disk. It returns nil when the heap was formatted, and when
// the image cannot be read (the arena's own open reports that).
func CheckFormatted(path string, g pram.Geometry) error {
	lg, ok := layoutFor(g)
	if !ok {
		return nil
	}
	roots, ok := readImage(path, int64(pram.RootOff(0)), 8*pram.NumRoots)
	if !ok {
		return nil
	}
	magic, ok := readImage(path, int64(lg.hdr), len(HeapMagic))
	if !ok {
		return nil
	}
	if unformatted(func(i int) uint64 { return binary.LittleEndian.Uint64(roots[8*i:]) }, string(magic)) {
		return errUnformatted
	}
	return nil
}

// CheckVersion reads the heap header of the arena image at path, of
// geometry g, without opening it, and returns Open's error for a header of
// another format version (wrapping pram.ErrVersion), so that the arena's
// open, which counts the mount and may recover the image, is not reached:
// a newer format is refused with nothing written, as a newer superblock
// version is. It returns nil otherwise, and when the image cannot be read.
func CheckVersion(path string, g pram.Geometry) error {
	lg, ok := layoutFor(g)
	if !ok {
		return nil
	}
	b, ok := readImage(path, int64(lg.hdr), HeaderSize)
	if !ok {
		return nil
	}
	return versionErr(b)
}

// readImage reads n bytes at off of the arena image at path, without
// opening it as an arena; ok is false when they cannot be read.
func readImage(path string, off int64, n int) (b []byte, ok bool) {
	f, err := os.Open(path)
	if err != nil {
		return nil, false
	}
	defer f.Close()
	b = make([]byte, n)
	if _, err := f.ReadAt(b, off); err != nil {
		return nil, false
	}
	return b, true
}

// versionErr is the error of a heap header b that is intact (its magic
// and checksum) but of another format version than this build's: a newer
// build made it, not damage (an outside review: it was reported as
// damage, and every refused command counted a mount in the image).
func versionErr(b []byte) error {
	le := binary.LittleEndian
	v := le.Uint32(b[hdrVersion:])
	if string(b[hdrMagic:hdrMagic+8]) != HeapMagic || v == HeapVersion || le.Uint64(b[hdrChecksum:]) != farm.Hash64(b[:hdrChecksum]) {
		return nil
	}
	return fmt.Errorf("%w: the heap's format version is %d, this build reads %d (made by a newer Conquest?)", pram.ErrVersion, v, HeapVersion)
}

// unformatted reports whether an arena's root slots (root(i)) and the bytes
// where its heap magic belongs say that its mkfs stopped before it
// formatted the heap: root slot 0 empty, no heap magic, and no other root
// slot set (the layers above set theirs after the heap exists, so one set
// means files may exist: root slot 0 was damaged, not never written).
func unformatted(root func(int) uint64, magic string) bool {
	if root(0) != 0 || magic == HeapMagic {
		return false
	}
	for i := 1; i < pram.NumRoots; i++ {
		if root(i) != 0 {
			return false
		}
	}
	return true
}

// locate finds the heap through root slot 0 and checks that it lies where
// the arena's geometry puts it.
func locate(a *pram.Arena) (*Heap, error) {
	r := a.Root(0)
	g, ok := layoutFor(a.Geometry())
	if r == 0 {
		if !ok {
			return nil, fmt.Errorf("%w: root slot 0 is empty and an arena of %d bytes leaves no room for a heap", ErrCorrupt, a.Size())
		}
		if unformatted(a.Root, string(a.Bytes(g.hdr, uint64(len(HeapMagic))))) {
			return nil, errUnformatted
		}
		// Damaged: RewriteStatic sets it from the geometry.
		return nil, staticErr("root slot 0 is empty; the heap header belongs at %#x", g.hdr)
	}
	if !ok {
		return nil, fmt.Errorf("%w: arena of %d bytes leaves no room for a heap", ErrCorrupt, a.Size())
	}
	if r != uint64(g.hdr) {
		return nil, staticErr("heap header at %#x, want %#x", r, g.hdr)
	}
	return &Heap{a: a, g: g}, nil
}

// checkHeader validates the whole header against the cached layout.
func (h *Heap) checkHeader() error {
	if err := h.checkStatic(); err != nil {
		return err
	}
	return h.checkCounters()
}

// checkStatic validates the header's static part: what Format writes once.
func (h *Heap) checkStatic() error {
	b := h.a.Bytes(h.g.hdr, HeaderSize)
	if err := versionErr(b); err != nil {
		return err
	}
	le := binary.LittleEndian
	switch {
	case string(b[hdrMagic:hdrMagic+8]) != HeapMagic:
		return staticErr("bad heap magic %q", b[hdrMagic:hdrMagic+8])
	case le.Uint32(b[hdrVersion:]) != HeapVersion:
		return staticErr("heap version %d, this build reads %d", le.Uint32(b[hdrVersion:]), HeapVersion)
	case le.Uint64(b[hdrChecksum:]) != farm.Hash64(b[:hdrChecksum]):
		return staticErr("heap header checksum mismatch")
	case le.Uint32(b[hdrEntrySize:]) != EntrySize || le.Uint32(b[hdrClasses:]) != uint32(NumClasses) ||
		le.Uint32(b[hdrMaxOrder:]) != MaxOrder:
		return staticErr("heap header shape (entry %d, classes %d, orders %d) differs from this build",
			le.Uint32(b[hdrEntrySize:]), le.Uint32(b[hdrClasses:]), le.Uint32(b[hdrMaxOrder:]))
	case pram.Off(le.Uint64(b[hdrMapOff:])) != h.g.mapOff || pram.Off(le.Uint64(b[hdrDataOff:])) != h.g.dataOff ||
		le.Uint64(b[hdrNPages:]) != h.g.npages:
		return staticErr("heap layout in header does not match the arena")
	}
	return nil
}

// checkCounters validates the dynamic header words: every carved page is in
// exactly one of the free, slab and large counts, and list heads point below
// top.
func (h *Heap) checkCounters() error {
	s := h.counters()
	if s.top > h.g.npages {
		return derivedf("top %d beyond %d pages", s.top, h.g.npages)
	}
	if s.top < h.g.npages && h.a.Bytes(h.g.ent(s.top)+entKind, 1)[0] != kindNone {
		// Pages past top were never carved, so their entries are zero: a
		// block head there means top is wrong (a zeroed header page gives
		// counters of 0 that add up, and the heap looked empty).
		return derivedf("page %d, past top %d, heads a block", s.top, s.top)
	}
	if s.free > s.top || s.slab > s.top || s.large > s.top || s.free+s.slab+s.large != s.top {
		return derivedf("page counts free %d + slab %d + large %d != carved %d",
			s.free, s.slab, s.large, s.top)
	}
	if s.used > (s.slab+s.large)*pageSize || s.objects > s.slab*tinySlots+s.large {
		return derivedf("%d objects of %d bytes do not fit %d slab and %d large pages",
			s.objects, s.used, s.slab, s.large)
	}
	for i := range MaxOrder + 1 {
		if v := h.a.U64(h.freeHead(i)); v > s.top {
			return derivedf("free list %d starts at page %d of %d", i, v-1, s.top)
		}
	}
	for c := range NumClasses {
		if v := h.a.U64(h.partialHead(c)); v > s.top {
			return derivedf("partial list of class %d starts at page %d of %d", c, v-1, s.top)
		}
	}
	return nil
}

type counters struct{ top, free, slab, large, objects, used uint64 }

func (h *Heap) counters() counters {
	a, o := h.a, h.g.hdr
	return counters{top: a.U64(o + hdrTop), free: a.U64(o + hdrFreePages), slab: a.U64(o + hdrSlabPages),
		large: a.U64(o + hdrLargePgs), objects: a.U64(o + hdrObjects), used: a.U64(o + hdrUsedBytes)}
}

func (h *Heap) freeHead(order int) pram.Off { return h.g.hdr + hdrFreeHeads + pram.Off(8*order) }
func (h *Heap) partialHead(c int) pram.Off  { return h.g.hdr + hdrPartial + pram.Off(8*c) }

// Arena is the arena the heap lives in.
func (h *Heap) Arena() *pram.Arena { return h.a }

// FreeSlots counts the free slots that allocations of n bytes could take
// without a page: those of the slabs on n's class's list of slabs with
// free slots, of which it looks at no more than maxSlabs (1 answers
// whether Alloc(n) would take a page; statfs counts free inodes; a
// damaged list ends the count there). It is 0 for a size that is not
// small. Preconditions: the caller holds the writer's
// lock or a reader's.
func (h *Heap) FreeSlots(n uint64, maxSlabs int) uint64 {
	if n == 0 || n > MaxSmall {
		return 0
	}
	c := classOf(n)
	slots, top := slotsOf(c), min(h.counters().top, h.g.npages)
	free := uint64(0)
	v := h.a.U64(h.partialHead(c))
	for i := 0; v != 0 && v <= top && i < maxSlabs; i++ {
		e := h.readEnt(v - 1)
		if e.kind != kindSlab || int(e.order) != c || uint64(e.used) >= slots {
			break
		}
		free += slots - uint64(e.used)
		v = uint64(e.next)
	}
	return free
}

// DataRange is the heap's data area [start, end): every allocation lies in
// it. Extension of DESIGN.md.
func (h *Heap) DataRange() (start, end pram.Off) { return h.g.dataOff, h.g.dataEnd() }

// ClassSize is the capacity Alloc(n) would return: the size class for
// n <= MaxSmall, n rounded up to whole pages above. It is 0 for n == 0 or
// n > MaxAlloc.
func (h *Heap) ClassSize(n uint64) uint64 { return ClassSize(n) }

// ClassSize is Heap.ClassSize without a heap (it depends only on n).
func ClassSize(n uint64) uint64 {
	switch {
	case n == 0 || n > MaxAlloc:
		return 0
	case n <= MaxSmall:
		return uint64(classSizes[classOf(n)])
	}
	return pagesFor(n) << pageShift
}

// Stats reads the heap's counters (O(1)).
func (h *Heap) Stats() Stats {
	c := h.counters()
	top := min(c.top, h.g.npages)
	s := Stats{
		TotalBytes: h.g.npages << pageShift,
		UsedBytes:  c.used,
		Objects:    c.objects,
		MetaBytes:  uint64(h.g.dataOff - h.g.hdr),
		Pages:      h.g.npages,
		FreePages:  c.free + h.g.npages - top,
		SlabPages:  c.slab,
		LargePages: c.large,
		NeverUsed:  h.g.npages - top,
	}
	s.FreeBytes = s.FreePages << pageShift
	s.ReservePages = ReservePages(h.g.npages) + h.rewritePages
	if s.FreePages > s.ReservePages {
		s.AvailBytes = (s.FreePages - s.ReservePages) << pageShift
	}
	if held := (c.slab + c.large) << pageShift; held > c.used {
		s.SlackBytes = held - c.used
	}
	return s
}

// SizeOf is the capacity of the live allocation that starts at off. Errors
// wrap ErrOutOfRange, ErrNotAllocated or ErrCorrupt.
func (h *Heap) SizeOf(off pram.Off) (uint64, error) {
	l, err := h.locate(off)
	if err != nil {
		return 0, err
	}
	if l.free {
		return 0, fmt.Errorf("%w: %#x is free", ErrNotAllocated, off)
	}
	return l.size, nil
}

// derivedf is a *DerivedStateError.
func derivedf(format string, args ...any) error {
	return &DerivedStateError{What: fmt.Sprintf(format, args...)}
}
