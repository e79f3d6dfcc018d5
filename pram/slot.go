package pram

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"sort"

	farm "github.com/dgryski/go-farm"
	"golang.org/x/sys/unix"
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

// slotBytes is the length of a slot of n pages.
func slotBytes(n uint64) uint64 { return PageSize + slotIndexLen(n) + n*PageSize }

// slotArea is where the two checkpoint slots of an image are and how many
// pages one of them holds.
//
// In an image file they follow the arena, each big enough for every page of
// it (the file is sparse, and Close cuts them off). A block device cannot
// grow, so mkfs leaves room for them after the arena (DeviceArenaSize), and
// a slot holds what that room allows: a checkpoint larger than that is
// split (checkpoint.go), which the backpressure limit makes all but
// impossible (shadow.limit is at most 1/8 of a slot).
type slotArea struct {
	base  uint64 // image offset of slot 0: the arena's size
	each  uint64 // bytes between the starts of slot 0 and slot 1
	pages uint64 // the most pages one slot holds
	fixed bool   // on a device: always there, never cut off or grown
}

// fileSlots is the slot area of an image file of an arena of size bytes.
func fileSlots(size uint64) slotArea {
	return slotArea{base: size, each: slotCap(size), pages: size / PageSize}
}

// deviceSlots is the slot area of an arena of size bytes at the start of a
// block device of dev bytes; ok is false when the room after the arena is
// smaller than deviceSlotPages asks (a device formatted whole by an older
// mkfs).
func deviceSlots(size, dev uint64) (sl slotArea, ok bool) {
	if dev < size {
		return slotArea{}, false
	}
	each := ((dev - size) / 2) &^ (PageSize - 1)
	n := slotPagesIn(each)
	if n < deviceSlotPages(size) {
		return slotArea{}, false
	}
	return slotArea{base: size, each: each, pages: min(n, size/PageSize), fixed: true}, true
}

// deviceSlotPages is the fewest pages a slot on a block device must hold
// for an arena of size bytes: 1/8 of the arena, at least 8 MiB (or the whole
// of a smaller arena).
func deviceSlotPages(size uint64) uint64 {
	return min(size, max(size/8, 8<<20)) / PageSize
}

// slotPagesIn is the most pages a slot of each bytes holds.
func slotPagesIn(each uint64) uint64 {
	if each < 2*PageSize {
		return 0
	}
	n := (each - PageSize) / (PageSize + indexEntry)
	for n > 0 && slotBytes(n) > each {
		n--
	}
	for slotBytes(n+1) <= each {
		n++
	}
	return n
}

// DeviceArenaSize is the largest arena mkfs makes on a block device of dev
// bytes, leaving room for its checkpoint slots after it; 0 if the device is
// too small for any.
func DeviceArenaSize(dev uint64) uint64 {
	fits := func(pages uint64) bool {
		size := pages * PageSize
		return size+2*slotBytes(deviceSlotPages(size)) <= dev
	}
	lo, hi := uint64(0), dev/PageSize // fits(lo); the largest that fits is in [lo, hi]
	for lo < hi {
		mid := lo + (hi-lo+1)/2
		if fits(mid) {
			lo = mid
		} else {
			hi = mid - 1
		}
	}
	if lo*PageSize < MinSize {
		return 0
	}
	return lo * PageSize
}

// clearDeviceSlots makes the slots after an arena of size bytes on a block
// device of dev bytes invalid (Format): a device holds old contents.
func clearDeviceSlots(f *os.File, size, dev uint64) error {
	sl, ok := deviceSlots(size, dev)
	if !ok {
		return nil
	}
	for i := uint64(0); i < 2; i++ {
		if _, err := f.WriteAt(zeroPage[:], sl.off(i)); err != nil {
			return fmt.Errorf("clearing checkpoint slot %d: %w", i, err)
		}
	}
	if err := unix.Fdatasync(int(f.Fd())); err != nil {
		return fmt.Errorf("clearing the checkpoint slots: %w", err)
	}
	return nil
}

// off is where slot i (0 or 1) starts in the image.
func (sl slotArea) off(i uint64) int64 { return int64(sl.base + i*sl.each) }

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
func readSlotHead(img ImageFile, g Geometry, sl slotArea, i uint64) (slotHead, bool, error) {
	h := make([]byte, slotHeader)
	if _, err := img.ReadAt(h, sl.off(i)); err != nil {
		return slotHead{}, false, err
	}
	sh, ok := parseSlotHead(h, g, sl, i)
	return sh, ok, nil
}

// parseSlotHead decodes the header h of slot i; ok is false if it does not
// check (never written, cut short, or another arena's).
func parseSlotHead(h []byte, g Geometry, sl slotArea, i uint64) (slotHead, bool) {
	le := binary.LittleEndian
	if !bytes.Equal(h[sOffMagic:sOffMagic+8], []byte(slotMagic)) ||
		le.Uint64(h[sOffSum:]) != farm.Hash64(h[:sOffSum]) ||
		!bytes.Equal(h[sOffUUID:sOffUUID+16], g.UUID[:]) ||
		le.Uint64(h[sOffSize:]) != g.Size {
		return slotHead{}, false
	}
	sh := slotHead{slot: i, seq: le.Uint64(h[sOffSeq:]), pages: le.Uint64(h[sOffPages:]), index: le.Uint64(h[sOffIndex:])}
	if sh.pages == 0 || sh.pages > sl.pages {
		return slotHead{}, false
	}
	return sh, true
}

// loadSlot reads a slot whose header checked and verifies its index and
// every page; ok is false if any of it does not match (a write cut short).
func loadSlot(img ImageFile, g Geometry, sl slotArea, sh slotHead) (pages []uint64, data []byte, ok bool, err error) {
	indexOff, dataOff := slotLayout(sh.pages)
	base := sl.off(sh.slot)
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
func recoverSlots(img ImageFile, g Geometry, sl slotArea, imageSeq uint64) (maxSeq uint64, applied bool, err error) {
	maxSeq = imageSeq
	if !sl.fixed {
		size, err := img.Size()
		if err != nil {
			return 0, false, err
		}
		if uint64(size) < g.Size+TailLen(g.Size) {
			return maxSeq, false, nil
		}
	}
	var heads []slotHead
	for i := uint64(0); i < 2; i++ {
		sh, ok, err := readSlotHead(img, g, sl, i)
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
		pages, data, ok, err := loadSlot(img, g, sl, sh)
		if err != nil {
			return 0, false, fmt.Errorf("reading checkpoint slot %d: %w", sh.slot, err)
		}
		if !ok {
			continue // cut short by the crash
		}
		if err := applyPages(img, pages, data); err != nil {
			return 0, false, fmt.Errorf("applying checkpoint %d: %w", sh.seq, err)
		}
		// Each slot is durable in place before the next is applied: a
		// power loss while the next one is written could otherwise keep
		// its superblock (which names it) and lose this one's pages, and
		// the next recovery would skip this slot as older than the image.
		if err := img.Sync(); err != nil {
			return 0, false, fmt.Errorf("applying checkpoint %d: %w", sh.seq, err)
		}
		applied = true
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
