package diskstore

import (
	"encoding/binary"
	"errors"
	"fmt"

	"conquest/alloc"
	"conquest/pram"
)

// NewFreeMap lays a new free map in the arena of h and points root slot 5
// at it, for `conquest fsck --repair` when Open found none (a
// *MissingRecordError for the free map: the record was overwritten, not
// just its magic or its root slot). Nothing in the free map is its own:
// its extents, the quarantine and the list of files with unsynced blocks
// all follow from the files' segment lists. The new map has the disk's
// geometry and empty lists, so it holds no block: the repair's walk then
// finds the blocks no file uses (leaked) and frees them, and the old
// record, now unreachable, is freed with the other leaked allocations. A
// free map that Open (as fsck opens it) would find is left alone:
// from == to, and nothing is written. dev must be the arena's disk.
func NewFreeMap(h *alloc.Heap, dev Device) (from, to pram.Off, err error) {
	a := h.Arena()
	sup, err := checkPair(dev, a.Geometry())
	if err != nil {
		return 0, 0, err
	}
	fm, _, err := findRecords(a, sup, true)
	var me *MissingRecordError
	if !errors.As(err, &me) || me.Slot != RootFreeMap {
		return fm, fm, nil
	}
	from = pram.Off(a.Root(RootFreeMap))
	to, err = layRecord(h, RootFreeMap, freeMapSize, "free map", func(tx *pram.Tx, to pram.Off) {
		tx.Set64(to, freeMapMagic)
		tx.Set64(to+fmOffBlockSize, uint64(sup.BlockSize))
		tx.Set64(to+fmOffBlocks, sup.Blocks)
		s := &Store{a: a, h: h, fm: to}
		s.freeList().initHeader(tx)
		s.unsyncedFiles().initHeader(tx)
		s.quarantineList().initHeader(tx)
	})
	return from, to, err
}

// NewStats lays a new stats record in the arena of h and points root slot 6
// at it, for `conquest fsck --repair` when Open found none (a
// *MissingRecordError for the stats record; the free map must be there:
// NewFreeMap first). What the record holds is found again where it can be:
//
//   - the sync epoch: the newest tag M of the quarantine's extents and of
//     the files' unsynced records, so the records of tag M stay live and a
//     recovery still verifies their blocks. Records of tag M-1 that were
//     live too (a sync was in flight at a crash, bgsync.go) become stale:
//     marking a sync started instead would keep them, but an Open that
//     finds no file on the unsynced list (a free map NewFreeMap laid)
//     ends both tags at once. fsck verifies every block anyway;
//   - the count of quarantined blocks: the quarantine's extents;
//   - the intent area: the one place in the heap that holds its magic and
//     slot count (none or two: a new area, which Open lays);
//   - the checksum format: checked page sums when the files' lists of
//     checksum pages have the check word's width (or there is no file),
//     else page sums, the format Format wrote from 2026-11-30 until then
//     (an older arena's blocks would then all fail their checksums, which
//     fsck reports and, without --zero-bad-blocks, leaves);
//   - the count of large files: 0, which the repair's walk sets to what it
//     reaches; the error counters start again at 0.
//
// A stats record that Open (as fsck opens it) would find is left alone:
// from == to, and nothing is written. dev must be the arena's disk.
func NewStats(h *alloc.Heap, dev Device) (from, to pram.Off, err error) {
	a := h.Arena()
	sup, err := checkPair(dev, a.Geometry())
	if err != nil {
		return 0, 0, err
	}
	fm, st, err := findRecords(a, sup, true)
	var me *MissingRecordError
	if !errors.As(err, &me) {
		return st, st, nil
	}
	if me.Slot != RootStats {
		return 0, 0, fmt.Errorf("%w: lay a new free map first", err)
	}
	from = pram.Off(a.Root(RootStats))
	s := &Store{a: a, h: h, fm: fm, super: sup, bs: uint64(sup.BlockSize)}
	epoch, quarantined := s.foundEpoch()
	format := s.foundSumFormat()
	intents := foundIntentArea(a)
	to, err = layRecord(h, RootStats, statsSize, "stats record", func(tx *pram.Tx, to pram.Off) {
		tx.Set64(to, statsMagic)
		tx.Set64(to+stOffEpoch, epoch)
		tx.Set64(to+stOffQuarantined, quarantined)
		tx.Set64(to+stOffIntents, uint64(intents))
		tx.Set64(to+stOffSumFormat, format)
	})
	return from, to, err
}

// layRecord allocates a zeroed record of size bytes, fills it and points
// root slot at it, in one transaction of h's arena.
func layRecord(h *alloc.Heap, slot int, size uint64, what string, fill func(*pram.Tx, pram.Off)) (to pram.Off, err error) {
	tx := h.Arena().Begin()
	defer func() {
		if r := recover(); r != nil { // a journal too small, a damaged arena
			tx.Abort()
			err = fmt.Errorf("%w: laying a new %s: %v", ErrCorrupt, what, r)
		}
	}()
	to, err = h.AllocZero(tx, size)
	if err != nil {
		tx.Abort()
		return 0, fmt.Errorf("laying a new %s: %w", what, err)
	}
	fill(tx, to)
	tx.Set64(pram.RootOff(slot), uint64(to))
	tx.Commit()
	return to, nil
}

// foundEpoch is the newest tag of the quarantine's extents and of the
// unsynced records of the files, and the blocks the quarantine holds, for
// NewStats. The files are the segment lists allocated in the heap (found
// by their magic: the free map's list of files with unsynced blocks may be
// one NewFreeMap just emptied). Damaged lists count for what could be
// read: the repair's walk rebuilds them.
func (s *Store) foundEpoch() (epoch, quarantined uint64) {
	defer func() { _ = recover() }() // a list damaged past its checks: what was read so far
	_ = s.quarantineList().walk(func(r rec) bool {
		epoch = max(epoch, r[2]&^epochStarted)
		if r[1] > r[0] && r[1] <= s.super.Blocks {
			quarantined += r[1] - r[0]
		}
		return true
	})
	for _, seg := range heapRecords(s.a, segListMagic, segListSize) {
		if sz, err := s.h.SizeOf(seg); err != nil || sz != segListSize {
			continue // a freed list, or bytes inside another object
		}
		_ = s.unsyncedOf(seg).walk(func(r rec) bool {
			if r[2] < s.super.Blocks { // old block: a record that may be sound
				epoch = max(epoch, r[1]&^epochStarted)
			}
			return true
		})
	}
	return epoch, quarantined
}

// foundSumFormat is the checksum format the files' lists of checksum pages
// show, for NewStats: checked page sums when most segment lists in the heap
// have lists of the check word's width, or when there is none.
func (s *Store) foundSumFormat() uint64 {
	checked, plain := 0, 0
	for _, seg := range heapRecords(s.a, segListMagic, segListSize) {
		if sz, err := s.h.SizeOf(seg); err != nil || sz != segListSize {
			continue
		}
		switch s.a.U32(seg + slOffSums + xhWords) {
		case sumWordsChecked:
			checked++
		case sumWordsPlain:
			plain++
		}
	}
	if plain > checked {
		return sumFormatPages
	}
	return sumFormatChecked
}

// foundIntentArea is the one intent area in the heap (its magic and slot
// count), or 0 (none, or more than one).
func foundIntentArea(a *pram.Arena) pram.Off {
	found := heapRecords(a, intentMagic, intentSize)
	var one []pram.Off
	for _, off := range found {
		if a.U64(off+8) == intentSlots {
			one = append(one, off)
		}
	}
	if len(one) != 1 {
		return 0
	}
	return one[0]
}

// heapRecords is every 8-byte-aligned place in the heap where a record of
// size bytes starting with magic fits.
func heapRecords(a *pram.Arena, magic, size uint64) []pram.Off {
	g := a.Geometry()
	heap := a.View(g.HeapOff, g.Size-uint64(g.HeapOff))
	var found []pram.Off
	for i := 0; i+int(size) <= len(heap); i += 8 {
		if binary.LittleEndian.Uint64(heap[i:]) == magic {
			found = append(found, g.HeapOff+pram.Off(i))
		}
	}
	return found
}
