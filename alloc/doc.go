// Package alloc is the heap allocator of a Conquest arena. Its whole state
// lives in the arena, so after a restart Open reads one header and the heap
// is usable as it was: no load step and no rebuild, whatever the number of
// allocations.
//
// # What alloc owns
//
// The heap [HeapOff, Size) of a pram arena, reached from root slot 0:
//
//	HeapOff   header page: magic "CONQHEAP", version, layout (map and data
//	          offsets, page count), a farm-hash checksum of that static part;
//	          then counters (top, free/slab/large pages, objects, used bytes),
//	          the free-list head of each buddy order and the partial-slab
//	          list head of each size class. Offsets: hdr* in layout.go.
//	mapOff    page map: one 32-byte entry per data page (ent* in layout.go):
//	          kind, order or size class, slab use count, page count of a
//	          large allocation, next/prev list links (page+1, 0 = none) and a
//	          128-bit slot bitmap for slabs.
//	dataOff   data pages, each PageSize bytes.
//
// Three allocators share the data pages:
//   - a binary buddy system of blocks of 1..256 pages (4 KiB .. 1 MiB), with
//     one free list per order linked through the page map. Only a block's
//     first page has a non-zero entry. Requests no free list can serve are
//     carved from the never-used pages above "top", so Format is O(1) and an
//     image file stays sparse until its pages are needed; carving asks the
//     arena to reserve their blocks first (pram.Arena.Reserve), so a full
//     file system under an image file is ErrNoSpace, not a fault. A few
//     pages (ReservePages: 1/128 of the heap, 128 KiB to 1 MiB) are kept
//     for frees: ordinary requests fail with ErrNoSpace rather than take
//     them, and only code inside Heap.UsingReserve (deleting and shrinking
//     files, whose free-map records need memory) may (freereserve.go). The
//     owner may keep a rewrite reserve beside it (SetRewriteReserve), which
//     ordinary requests leave too and Heap.UsingHalfReserve (rewrites'
//     extent records) may take with half the free reserve;
//   - page-sized allocations (MaxSmall < n <= MaxAlloc) take ceil(n/4 KiB)
//     pages: the buddy block of the next power of two is taken and its tail
//     returned at once, so a 100 KB object costs 100 KB rounded up to 4 KiB,
//     not 128 KiB;
//   - slabs: one page of equal objects of a size class (16 B .. 2 KiB, see
//     classSizes). The slot bitmap is in the page map entry (for the 16-byte
//     class, whose 254 slots need more bits, in the last 32 bytes of the
//     page). 10,000 objects of 1 KB fill 2,500 pages: 10.24 MB plus a 32-byte
//     map entry per page.
//
// Power-of-two capacities up to 4 KiB are aligned to themselves (slabs are
// page aligned); every allocation is 16-byte aligned. Alloc and Free are
// O(log n) in the arena size (at most MaxOrder splits or merges) and O(1) in
// the number of allocations.
//
// # Transactions
//
// Every change to allocator state goes through the caller's pram.Tx. No
// bookkeeping lives inside a free block (links and bitmaps are in the page
// map), so an Abort after the caller scribbled unlogged over memory it
// allocated in the Tx restores the heap exactly. Memory freed and allocated
// again within one Tx is logged (Touch) before it is handed out, so its old
// contents come back on Abort too (reuse.go).
//
// # Consistency walk
//
// NewChecker/Mark/Finish is the heap's part of the file system's Check: the
// layers above mark what they reach; Finish reports leaks, damage and
// counters that do not add up, as errors, never panics.
//
// # What alloc must never do
//
// Store a Go pointer in the arena; change the arena other than through a Tx
// (except zeroing a fresh allocation for AllocZero and clearing the page map
// of a device inside Format, both unreachable on rollback); panic on a
// damaged arena or a bad offset (it returns the sentinel errors of
// errors.go; only pram.ErrTxFull panics pass through, by the Tx contract);
// interpret the contents of allocations.
package alloc
