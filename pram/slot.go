package pram

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"sort"

	farm "github.com/dgryski/go-farm"
)

// Checkpoint slots.
//
// A shadowed arena's image file is the arena (bytes [0, Size)) followed by
// two checkpoint slots, used in turn. A checkpoint writes the pages that
// changed since the last one into the next slot, syncs, and only then
// copies them into the arena part of the image; a power loss at any moment
// leaves either the previous consistent image or a complete slot that the
// next Open applies again. A slot is:
//
//	[0, PageSize)        header: magic, UUID, sequence number, page count,
//	                     arena size, hash of the index, hash of the header
//	[PageSize, dataOff)  index: for each page, its arena offset and its hash
//	[dataOff, ...)       the pages, in index order (increasing offsets)
//
// Every part is hashed, so a slot that a power loss cut short is seen as
// invalid and ignored (see recoverSlots for why applying the valid ones,
// oldest first, gives the state of the newest). A slot can hold
// every page of the arena, so no checkpoint is ever too large for it; the
// image file is sparse, and only what checkpoints write takes disk space.
const (
	slotMagic = "CQCKPT01"

	sOffMagic  = 0
	sOffUUID   = 8
	sOffSeq    = 24
	sOffPages  = 32
	sOffSize   = 40
	sOffIndex  = 48 // farm hash of the index entries
	sOffSum    = 56 // farm hash of [0, sOffSum)
	slotHeader = 64

	indexEntry = 16 // arena offset, page hash
)

// slotIndexLen is the bytes of index pages a slot of n pages needs.
func slotIndexLen(n uint64) uint64 { return roundPage(n * indexEntry) }

// slotCap is the largest slot an arena of size bytes can need.
func slotCap(size uint64) uint64 { return PageSize + slotIndexLen(size/PageSize) + size }

// TailLen is the length of the two checkpoint slots that follow the arena
// in a shadowed image file of an arena of size bytes.
func TailLen(size uint64) uint64 { return 2 * slotCap(size) }

// slotOff is where slot i (0 or 1) starts in the image file.
func slotOff(size uint64, i uint64) int64 { return int64(size + i*slotCap(size)) }

func roundPage(n uint64) uint64 { return (n + PageSize - 1) &^ (PageSize - 1) }

// slotLayout is where the index and the pages of a slot of n pages start.
func slotLayout(n uint64) (indexOff, dataOff uint64) {
	return PageSize, PageSize + slotIndexLen(n)
}

// sealSlot fills in the index hashes and the header of a staged slot whose
// pages (at dataOff) and offsets (the index's first words) are in place.
func sealSlot(stage []byte, uuid [16]byte, seq, size uint64, pages []uint64) {
	le := binary.LittleEndian
	n := uint64(len(pages))
	indexOff, dataOff := slotLayout(n)
	for i, p := range pages {
		e := stage[indexOff+uint64(i)*indexEntry:]
		le.PutUint64(e, p*PageSize)
		pg := stage[dataOff+uint64(i)*PageSize : dataOff+uint64(i+1)*PageSize]
		le.PutUint64(e[8:], farm.Hash64(pg))
	}
	h := stage[:PageSize]
	clear(h)
	copy(h[sOffMagic:], slotMagic)
	copy(h[sOffUUID:], uuid[:])
	le.PutUint64(h[sOffSeq:], seq)
	le.PutUint64(h[sOffPages:], n)
	le.PutUint64(h[sOffSize:], size)
	le.PutUint64(h[sOffIndex:], farm.Hash64(stage[indexOff:indexOff+n*indexEntry]))
	le.PutUint64(h[sOffSum:], farm.Hash64(h[:sOffSum]))
}

// slotHead is a slot header that passed its own checks.
type slotHead struct {
	slot  uint64
	seq   uint64
	pages uint64
	index uint64 // hash of the index
}

// readSlotHead reads and checks the header of slot i; ok is false for a
// slot never written, of another arena, or cut short.
func readSlotHead(img ImageFile, g Geometry, i uint64) (slotHead, bool, error) {
	h := make([]byte, slotHeader)
	if _, err := img.ReadAt(h, slotOff(g.Size, i)); err != nil {
		return slotHead{}, false, err
	}
	le := binary.LittleEndian
	if !bytes.Equal(h[sOffMagic:sOffMagic+8], []byte(slotMagic)) ||
		le.Uint64(h[sOffSum:]) != farm.Hash64(h[:sOffSum]) ||
		!bytes.Equal(h[sOffUUID:sOffUUID+16], g.UUID[:]) ||
		le.Uint64(h[sOffSize:]) != g.Size {
		return slotHead{}, false, nil
	}
	sh := slotHead{slot: i, seq: le.Uint64(h[sOffSeq:]), pages: le.Uint64(h[sOffPages:]), index: le.Uint64(h[sOffIndex:])}
	if sh.pages == 0 || sh.pages > g.Size/PageSize {
		return slotHead{}, false, nil
	}
	return sh, true, nil
}

// loadSlot reads a slot whose header checked and verifies its index and
// every page; ok is false if any of it does not match (a write cut short).
func loadSlot(img ImageFile, g Geometry, sh slotHead) (pages []uint64, data []byte, ok bool, err error) {
	indexOff, dataOff := slotLayout(sh.pages)
	base := slotOff(g.Size, sh.slot)
	index := make([]byte, sh.pages*indexEntry)
	if _, err := img.ReadAt(index, base+int64(indexOff)); err != nil {
		return nil, nil, false, err
	}
	if farm.Hash64(index) != sh.index {
		return nil, nil, false, nil
	}
	data = make([]byte, sh.pages*PageSize)
	if _, err := img.ReadAt(data, base+int64(dataOff)); err != nil {
		return nil, nil, false, err
	}
	le := binary.LittleEndian
	pages = make([]uint64, sh.pages)
	for i := range pages {
		off := le.Uint64(index[i*indexEntry:])
		if off%PageSize != 0 || off >= g.Size || (i > 0 && off/PageSize <= pages[i-1]) {
			return nil, nil, false, nil
		}
		pages[i] = off / PageSize
		if farm.Hash64(data[i*PageSize:(i+1)*PageSize]) != le.Uint64(index[i*indexEntry+8:]) {
			return nil, nil, false, nil
		}
	}
	return pages, data, true, nil
}

// recoverSlots finishes the checkpoints a power loss (or a crash) may have
// interrupted: it applies, oldest first, each valid slot whose sequence
// number is not below the one the image's superblock records, and syncs.
// Both slots may be needed: checkpoint g's slot can reach the device while
// the in-place writes of checkpoint g-1, made before it but not yet synced
// (the sync of g's slot is what makes them durable), do not; g-1's slot is
// intact then, since only checkpoint g+1 reuses it, after that sync. It
// returns the highest sequence number found (for the next checkpoint to
// exceed) and whether a slot was applied. An image without slots (shorter
// than Size + TailLen) has nothing to recover.
func recoverSlots(img ImageFile, g Geometry, imageSeq uint64) (maxSeq uint64, applied bool, err error) {
	size, err := img.Size()
	if err != nil {
		return 0, false, err
	}
	maxSeq = imageSeq
	if uint64(size) < g.Size+TailLen(g.Size) {
		return maxSeq, false, nil
	}
	var heads []slotHead
	for i := uint64(0); i < 2; i++ {
		sh, ok, err := readSlotHead(img, g, i)
		if err != nil {
			return 0, false, fmt.Errorf("reading checkpoint slot %d: %w", i, err)
		}
		if ok {
			heads = append(heads, sh)
			maxSeq = max(maxSeq, sh.seq)
		}
	}
	sort.Slice(heads, func(i, j int) bool { return heads[i].seq < heads[j].seq })
	for _, sh := range heads {
		if sh.seq < imageSeq {
			continue // older than what the image already holds
		}
		pages, data, ok, err := loadSlot(img, g, sh)
		if err != nil {
			return 0, false, fmt.Errorf("reading checkpoint slot %d: %w", sh.slot, err)
		}
		if !ok {
			continue // cut short by the crash
		}
		if err := applyPages(img, pages, data); err != nil {
			return 0, false, fmt.Errorf("applying checkpoint %d: %w", sh.seq, err)
		}
		applied = true
	}
	if applied {
		if err := img.Sync(); err != nil {
			return 0, false, fmt.Errorf("applying checkpoints: %w", err)
		}
	}
	return maxSeq, applied, nil
}

// applyPages writes pages (arena page numbers, increasing) from data into
// the arena part of the image, one write per run of consecutive pages.
func applyPages(img ImageFile, pages []uint64, data []byte) error {
	for i := 0; i < len(pages); {
		j := i + 1
		for j < len(pages) && pages[j] == pages[j-1]+1 {
			j++
		}
		if _, err := img.WriteAt(data[uint64(i)*PageSize:uint64(j)*PageSize], int64(pages[i]*PageSize)); err != nil {
			return err
		}
		i = j
	}
	return nil
}
