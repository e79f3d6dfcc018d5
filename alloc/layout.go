package alloc

import (
	"math/bits"

	"conquest/pram"
)

// Heap layout. The heap occupies [HeapOff, Size) of the arena:
//
//	HeapOff            header page (hdr* offsets below), reached from root slot 0
//	mapOff             page map: one 32-byte entry per data page (ent* offsets)
//	dataOff            data pages, npages of them, each PageSize bytes
//
// All of it is addressed by arena offsets; nothing in it is a Go pointer.
const (
	pageShift = 12
	pageSize  = 1 << pageShift // == pram.PageSize

	// MaxOrder is the largest buddy order: blocks of PageSize<<MaxOrder bytes.
	MaxOrder = 8
	// MaxSmall is the largest request served from a slab size class; larger
	// requests take whole pages.
	MaxSmall = 2048

	maxBlockPages = 1 << MaxOrder
	// maxPages bounds the data pages so page numbers (plus one) fit the
	// 32-bit links of the page map.
	maxPages = 1<<32 - 2
)

// Heap header, at HeapOff. The static part [0, hdrChecksum) is written by
// Format and covered by the checksum; the dynamic part is changed only
// through the caller's Tx.
const (
	HeapMagic          = "CONQHEAP"
	HeapVersion uint32 = 1

	hdrMagic     = 0   // [8]byte HeapMagic
	hdrVersion   = 8   // uint32 HeapVersion
	hdrEntrySize = 12  // uint32 EntrySize
	hdrMapOff    = 16  // uint64 arena offset of the page map
	hdrDataOff   = 24  // uint64 arena offset of data page 0
	hdrNPages    = 32  // uint64 number of data pages
	hdrClasses   = 40  // uint32 number of size classes
	hdrMaxOrder  = 44  // uint32 MaxOrder
	hdrChecksum  = 48  // uint64 farm.Hash64 of [0, hdrChecksum)
	hdrTop       = 64  // uint64 pages ever carved; pages >= top are untouched
	hdrFreePages = 72  // uint64 pages in free buddy blocks
	hdrSlabPages = 80  // uint64 pages holding slabs
	hdrLargePgs  = 88  // uint64 pages in live page-sized allocations
	hdrObjects   = 96  // uint64 live allocations
	hdrUsedBytes = 104 // uint64 capacity of live allocations
	hdrFreeHeads = 128 // [16]uint64 free list heads per order (page+1, 0 = empty)
	hdrPartial   = 256 // [32]uint64 partial-slab list heads per class (page+1)
	HeaderSize   = 512 // bytes of the header in use (the header page is PageSize)

	maxHeadSlots  = 16
	maxClassSlots = 32
)

// Page map entry: one per data page. Only the entry of the first page of a
// block (its head) is meaningful; every other entry is all zero (kindNone).
// Entries of pages at or past top were never written and are not read.
const (
	EntrySize = 32

	entKind   = 0  // uint8 kind*
	entOrder  = 1  // uint8 buddy order (kindFree) or size class (kindSlab)
	entUsed   = 2  // uint16 objects in use (kindSlab)
	entNPages = 4  // uint32 pages of the allocation (kindLarge)
	entNext   = 8  // uint32 next page on the free or partial list, plus one
	entPrev   = 12 // uint32 previous page on the list, plus one
	entBitmap = 16 // [2]uint64 slot bitmap (kindSlab, classes with <= 128 slots)
)

// Page kinds.
const (
	kindNone  = 0 // not the head of a block (or never carved)
	kindFree  = 1 // head of a free buddy block of 2^order pages
	kindLarge = 2 // head of a live allocation of npages whole pages
	kindSlab  = 3 // a one-page slab of objects of one size class
)

// Size classes. Above 256 bytes each class is the largest multiple of 16
// that fits k times in a page, so slab pages waste little. Power-of-two
// classes are naturally aligned because slabs are page aligned.
var classSizes = [...]uint32{
	16, 32, 48, 64, 80, 96, 112, 128, 160, 192, 224, // 11
	256, 288, 336, 400, 448, 512, 576, 672, 816, 1024, 1360, 2048, // 12
}

// NumClasses is the number of slab size classes.
const NumClasses = len(classSizes)

// Class 0 (16 bytes) has more slots than the 128 bits of the entry's bitmap:
// its bitmap lives in the last tailBitmap bytes of the slab page instead,
// which leaves room for tinySlots objects.
const (
	tailBitmap = 32
	tinySlots  = (pageSize - tailBitmap) / 16 // 254
)

// sizeToClass maps (n+15)/16 to the smallest class holding n bytes.
var sizeToClass [MaxSmall/16 + 1]uint8

func init() {
	c := 0
	for i := range sizeToClass {
		for uint32(i)*16 > classSizes[c] {
			c++
		}
		sizeToClass[i] = uint8(c)
	}
}

// classOf is the size class for a request of 1..MaxSmall bytes.
func classOf(n uint64) int { return int(sizeToClass[(n+15)>>4]) }

// slotsOf is the number of objects in a slab of class c.
func slotsOf(c int) uint64 {
	if c == 0 {
		return tinySlots
	}
	return pageSize / uint64(classSizes[c])
}

// pagesFor is the number of pages of an allocation of n > MaxSmall bytes.
func pagesFor(n uint64) uint64 { return (n + pageSize - 1) >> pageShift }

// orderFor is the buddy order of the smallest block of at least np pages.
func orderFor(np uint64) uint {
	if np <= 1 {
		return 0
	}
	return uint(bits.Len64(np - 1))
}

// geometry is the heap's static layout, derived from the arena's and checked
// against the header by Open.
type geometry struct {
	hdr     pram.Off // header (== HeapOff)
	mapOff  pram.Off // page map
	dataOff pram.Off // data page 0
	npages  uint64   // data pages
}

// layoutFor computes the layout Format gives an arena's heap.
func layoutFor(g pram.Geometry) (geometry, bool) {
	heap := uint64(g.HeapOff)
	if heap%pageSize != 0 || heap >= g.Size {
		return geometry{}, false
	}
	avail := (g.Size - heap) &^ (pageSize - 1)
	if avail < 3*pageSize {
		return geometry{}, false
	}
	avail -= pageSize // header page
	n := avail / (pageSize + EntrySize)
	for n > 0 && mapBytes(n)+n*pageSize > avail {
		n--
	}
	n = min(n, maxPages)
	if n == 0 {
		return geometry{}, false
	}
	mo := heap + pageSize
	return geometry{hdr: pram.Off(heap), mapOff: pram.Off(mo), dataOff: pram.Off(mo + mapBytes(n)), npages: n}, true
}

// mapBytes is the page-rounded size of the page map for n pages.
func mapBytes(n uint64) uint64 { return (n*EntrySize + pageSize - 1) &^ (pageSize - 1) }

// Offsets of the structures of page pg.
func (g *geometry) ent(pg uint64) pram.Off  { return g.mapOff + pram.Off(pg*EntrySize) }
func (g *geometry) page(pg uint64) pram.Off { return g.dataOff + pram.Off(pg<<pageShift) }
func (g *geometry) dataEnd() pram.Off       { return g.page(g.npages) }
