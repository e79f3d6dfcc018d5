package alloc

import (
	"errors"
	"fmt"

	"conquest/pram"
)

// Sentinel errors. Callers test them with errors.Is; returned errors wrap
// them with the offset or size involved.
var (
	// ErrNoSpace: no free block is large enough for the request (ENOSPC
	// above). Alloc returns it before changing anything.
	ErrNoSpace = errors.New("alloc: no space left in the arena heap")
	// ErrDoubleFree: Free of an offset that is the start of free memory: a
	// free slab slot or a page inside a free block.
	ErrDoubleFree = errors.New("alloc: double free")
	// ErrNotAllocated: an offset inside the heap's data area that is not the
	// start of a live allocation (never allocated, or inside one).
	ErrNotAllocated = errors.New("alloc: offset is not an allocation")
	// ErrOutOfRange: an offset outside the heap's data area (including 0).
	ErrOutOfRange = errors.New("alloc: offset outside the heap")
	// ErrTooLarge: a request of 0 bytes or of more than MaxAlloc.
	ErrTooLarge = errors.New("alloc: allocation size out of range")
	// ErrCorrupt: the allocator's state in the arena is damaged (bad header,
	// a link or count out of range). An operation that returns it may have
	// changed state before noticing: the caller aborts its Tx.
	ErrCorrupt = errors.New("alloc: heap state is corrupt")
	// ErrNoHeap (with ErrCorrupt): root slot 0 is empty and no heap header
	// is where the arena's geometry puts it: Format never ran (an
	// interrupted mkfs), as opposed to a damaged slot.
	ErrNoHeap = errors.New("no heap was ever formatted in the arena")
	// ErrFormatted: Format was called on an arena that already has a heap
	// (root slot 0 is set). Extension of DESIGN.md.
	ErrFormatted = errors.New("alloc: arena already has a heap")
	// ErrReachedTwice: the consistency walk was told (Checker.Mark) that the
	// same allocation is reached twice. Extension of DESIGN.md.
	ErrReachedTwice = errors.New("alloc: allocation reached twice")
	// ErrLeak: the consistency walk found a live allocation that no
	// Checker.Mark reached; the error is a *LeakError naming it. Extension
	// of DESIGN.md.
	ErrLeak = errors.New("alloc: allocation is not reachable (leak)")
)

// LeakError is the ErrLeak the consistency walk (Checker.Finish) reports for
// one live allocation that no Checker.Mark reached. Callers get it with
// errors.As; errors.Is(err, ErrLeak) holds. Extension of DESIGN.md.
type LeakError struct {
	Off  pram.Off // the allocation's offset (what Free takes)
	Size uint64   // its size in bytes: the slab class or the pages it spans
	// Object is true for a slab object (at most MaxSmall bytes), false for
	// an allocation of whole pages.
	Object bool
}

func (e *LeakError) Error() string {
	if e.Object {
		return fmt.Sprintf("%v: %d-byte object at %#x", ErrLeak, e.Size, e.Off)
	}
	return fmt.Sprintf("%v: %d bytes at %#x", ErrLeak, e.Size, e.Off)
}

// Unwrap returns ErrLeak.
func (e *LeakError) Unwrap() error { return ErrLeak }

// StrayFieldsError is the ErrCorrupt the consistency walk reports for a
// page-map entry of a free block, a whole-page allocation or a slab whose
// unused fields are not zero (the kind, order or size, and the list links,
// are sane), for bitmap bits of a slab past its last slot, or for a
// non-zero entry of a page inside a block. Heap.ClearStrayFields repairs it. Callers get it with errors.As;
// errors.Is(err, ErrCorrupt) holds.
type StrayFieldsError struct {
	Page   uint64 // the block's first page, or the page inside it
	Free   bool   // a free block (else a whole-page allocation or a slab)
	Inside bool   // Page lies inside the block whose first page is Head
	Head   uint64
	Slab   bool // a slab page: its entry, or (Bits) bitmap bits past its last slot
	Bits   bool
}

func (e *StrayFieldsError) Error() string {
	switch {
	case e.Slab && e.Bits:
		return fmt.Sprintf("%v: page %d: slab bitmap has bits past its last slot", ErrCorrupt, e.Page)
	case e.Slab:
		return fmt.Sprintf("%v: page %d: slab entry has stray fields", ErrCorrupt, e.Page)
	}
	if e.Inside {
		return fmt.Sprintf("%v: page %d: inside the block at page %d but its map entry is not zero", ErrCorrupt, e.Page, e.Head)
	}
	if e.Free {
		return fmt.Sprintf("%v: page %d: free block entry has stray fields", ErrCorrupt, e.Page)
	}
	return fmt.Sprintf("%v: page %d: allocation entry has stray fields", ErrCorrupt, e.Page)
}

// Unwrap returns ErrCorrupt.
func (e *StrayFieldsError) Unwrap() error { return ErrCorrupt }

// DerivedStateError is the ErrCorrupt of damage to what follows from the
// page map: a free or partial-slab list (its head, a link, a member that
// does not belong or is missing), a slab's count of objects in use, or a
// header counter. Heap.RebuildLists repairs it. Callers get it with
// errors.As.
type DerivedStateError struct {
	What string
}

func (e *DerivedStateError) Error() string { return fmt.Sprintf("%v: %s", ErrCorrupt, e.What) }

// Unwrap returns ErrCorrupt.
func (e *DerivedStateError) Unwrap() error { return ErrCorrupt }

// ReservedWordError is the ErrCorrupt the consistency walk reports for an
// unused word of the heap's header page that is not zero (nothing reads
// it). Heap.ClearReserved repairs it. Callers get it with errors.As.
type ReservedWordError struct {
	Off int // offset in the header page
}

func (e *ReservedWordError) Error() string {
	return fmt.Sprintf("%v: heap header: reserved word at %d is not zero", ErrCorrupt, e.Off)
}

// Unwrap returns ErrCorrupt.
func (e *ReservedWordError) Unwrap() error { return ErrCorrupt }

// BadSizeError is the ErrCorrupt the consistency walk reports for a
// whole-page allocation whose page count is zero, too large, misaligned or
// past top. Heap.RepairSize repairs it when the count can be told from the
// block the allocation sits in. Callers get it with errors.As.
type BadSizeError struct {
	Page   uint64
	NPages uint64
	Top    uint64
}

func (e *BadSizeError) Error() string {
	return fmt.Sprintf("%v: page %d: allocation of %d pages is misaligned or past top %d", ErrCorrupt, e.Page, e.NPages, e.Top)
}

// Unwrap returns ErrCorrupt.
func (e *BadSizeError) Unwrap() error { return ErrCorrupt }

// UnknownKindError is the ErrCorrupt the consistency walk reports for the
// page-map entry of a block's first page whose kind is none of the known
// ones. Heap.RepairKind gives it back its kind when the entry's other
// fields and its neighbours prove it. Callers get it with errors.As.
type UnknownKindError struct {
	Page uint64
	Kind uint8
}

func (e *UnknownKindError) Error() string {
	return fmt.Sprintf("%v: page %d: unknown kind %d", ErrCorrupt, e.Page, e.Kind)
}

// Unwrap returns ErrCorrupt.
func (e *UnknownKindError) Unwrap() error { return ErrCorrupt }

// BadOrderError is the ErrCorrupt the consistency walk reports for a free
// block whose order is too large, misaligned or runs past top.
// Heap.RepairOrder repairs it when the order can be told from the block
// the free block sits in. Callers get it with errors.As.
type BadOrderError struct {
	Page  uint64
	Order uint
	Top   uint64
}

func (e *BadOrderError) Error() string {
	return fmt.Sprintf("%v: page %d: free block of order %d is misaligned or past top %d", ErrCorrupt, e.Page, e.Order, e.Top)
}

// Unwrap returns ErrCorrupt.
func (e *BadOrderError) Unwrap() error { return ErrCorrupt }
