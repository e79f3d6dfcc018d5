package diskstore

import (
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
	tx := a.Begin()
	defer func() {
		if r := recover(); r != nil { // a journal too small, a damaged arena
			tx.Abort()
			err = fmt.Errorf("%w: laying a new free map: %v", ErrCorrupt, r)
		}
	}()
	to, err = h.AllocZero(tx, freeMapSize)
	if err != nil {
		tx.Abort()
		return from, 0, fmt.Errorf("laying a new free map: %w", err)
	}
	tx.Set64(to, freeMapMagic)
	tx.Set64(to+fmOffBlockSize, uint64(sup.BlockSize))
	tx.Set64(to+fmOffBlocks, sup.Blocks)
	s := &Store{a: a, h: h, fm: to}
	s.freeList().initHeader(tx)
	s.unsyncedFiles().initHeader(tx)
	s.quarantineList().initHeader(tx)
	tx.Set64(pram.RootOff(RootFreeMap), uint64(to))
	tx.Commit()
	return from, to, nil
}
