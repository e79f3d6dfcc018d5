package conquest

import (
	"errors"
	"fmt"

	"conquest/alloc"
	"conquest/pram"
)

// Two root slots of the core have no checksum of their own and are read by
// Open before anything else: the root directory's inode offset (slot 1)
// and the head of the orphan list (slot 3). One flipped bit in either made
// Open, and so every mount and fsck --repair, refuse the arena for good.
// Open now names them (ErrRootSlot, ErrOrphanList), and fsck --repair
// mends them: the root's slot from the one record in the heap that is the
// root directory's inode (FindRootInode), the orphan list by opening with
// Options.SkipDamagedOrphans and letting Repair cut the list where it
// breaks (the orphans past the cut are unreachable, and the repair frees
// them as it frees any unreachable inode).

// ErrRootSlot is wrapped (with ErrCorrupt) by Open's error when root slot 1
// does not lead to the root directory's inode.
var ErrRootSlot = errors.New("the root directory's slot does not lead to it")

// ErrOrphanList is wrapped (with ErrCorrupt) by Open's error when the list
// of orphans (unlinked files still open at a crash) is damaged.
var ErrOrphanList = errors.New("the orphan list is damaged")

// isRootRecord reports whether the 256 bytes at off look like the root
// directory's inode record.
func isRootRecord(a *pram.Arena, off pram.Off) bool {
	return off%8 == 0 && a.InHeap(off, inodeSize) && a.U64(off+iMagic) == inodeMagic && Ino(a.U64(off+iIno)) == RootIno &&
		a.U32(off+iMode)&S_IFMT == S_IFDIR && a.U64(off+iData) != 0
}

// FindRootInode sets root slot 1 of the arena at pramPath to the root
// directory's inode record, for `conquest fsck --repair` when Open refuses
// the arena with ErrRootSlot. It looks at every 256-byte allocation of the
// heap for the one record that carries the inode magic, the root's inode
// number and a directory's mode; with none or more than one it changes
// nothing and says so. It returns the offsets before and after.
func FindRootInode(pramPath string) (from, to pram.Off, err error) {
	a, err := pram.Open(pramPath)
	if err != nil {
		return 0, 0, err
	}
	defer func() {
		if cerr := a.Close(); err == nil && cerr != nil {
			err = fmt.Errorf("%s: %w", pramPath, cerr)
		}
	}()
	h, err := alloc.Open(a)
	if err != nil {
		return 0, 0, fmt.Errorf("%s: %w", pramPath, err)
	}
	from = pram.Off(a.Root(slotRoot))
	if isRootRecord(a, from) {
		if sz, err := h.SizeOf(from); err == nil && sz == inodeSize {
			return from, from, nil // nothing to mend
		}
	}
	g := a.Geometry()
	var found []pram.Off
	for off := (g.HeapOff + inodeSize - 1) &^ (inodeSize - 1); uint64(off)+inodeSize <= g.Size; off += inodeSize {
		if !isRootRecord(a, off) {
			continue
		}
		if sz, err := h.SizeOf(off); err != nil || sz != inodeSize {
			continue // a freed record, or bytes inside another object
		}
		if found = append(found, off); len(found) > 1 {
			break
		}
	}
	if len(found) != 1 {
		return from, 0, fmt.Errorf("%s: %w: %d records look like the root directory's inode, so none can be chosen", pramPath, ErrCorrupt, len(found))
	}
	to = found[0]
	tx := a.Begin()
	tx.Set64(pram.RootOff(slotRoot), uint64(to))
	tx.Commit()
	return from, to, nil
}
