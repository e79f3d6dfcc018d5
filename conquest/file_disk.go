package conquest

import (
	"errors"
	"fmt"

	"conquest/diskstore"
	"conquest/pram"
)

// Large files on disk (the large-file path of Conquest). A regular file
// whose size crosses the threshold (arena parameter 0, mkfs
// --large-threshold) moves to the disk; its inode then has flagDisk and the
// offset of its diskstore segment list in iSeg, and iData/iIdxLen/iAllocd
// are zero. The move copies the arena bytes to disk and syncs them, frees
// the arena copy and points the inode at the segment list in one
// transaction: a crash leaves the old copy or the new one. A file written
// across the threshold usually waits in the arena for the next periodic
// disk commit, which moves several files with one sync (move.go).
// (If the arena copy is too large to free in that transaction the inode
// keeps the rest of it and goes on the orphan list, like an unfinished
// truncate; the remainder is freed in the next transactions, or by Open
// after a crash. The disk copy is the file from the first commit on.)
//
// A file truncated to at most half the threshold (diskstore.ToArena) moves
// back into the arena in one transaction (read, destroy the segment list,
// copy into fresh arena blocks), unless its data cannot be read (it then
// stays on disk) or the arena would fall below its reserve (spill.go).
// A write that needs arena storage the arena cannot spare moves a file to
// the disk whatever its size (spill.go).
//
// # Sizes and the ordering point
//
// The arena must never publish a size that covers data the store has not
// written to the device. In the store's default mode
// (DurableOnProcessCrash) every Write reaches the device before it returns,
// so the size is published in the write's own transaction. In GatherInMemory
// mode writes are gathered and reach the disk in large requests (when a
// file's buffer is full, at fsync, truncate, the last close, and unmount),
// so a disk file has two sizes: the published size iSize, and, while
// written bytes beyond it are only gathered, a larger logical size kept in
// fs.lsize (volatile, like ext4's i_size beside i_disksize). Every
// operation that leaves the file's buffer empty publishes the logical size
// in the same transaction as the flush, after the store has synced the
// disk. After a crash the file has its published size and reads, beyond
// what was flushed, as before the lost writes: old data or zeros, never
// another file's bytes. Every byte in [iSize, logical size) is gathered or
// a hole.
//
// Preconditions of everything here: fs.mu held (exclusively where a Tx is
// taken), fs.ds != nil where a disk file is involved.

// moveBackMax bounds the bytes a move back into the arena copies in one
// transaction (with the default threshold, ToArena allows 512 KiB).
const moveBackMax = freeBatch * BlockSize

// diskStep is how many disk blocks' worth of file range one transaction
// releases or reserves at most (truncate, punch, unlink, fallocate): the
// store's journal use grows with the blocks it maps or unmaps and with their
// unsynced records, so a large range is done in several transactions (see
// diskShrinkStep).
const diskStep = 1024

// diskStepBytes is one step in bytes: diskStep blocks, fewer with a small
// journal. A step can touch as many extents as blocks (a file written into
// fragmented free space), and each extent freed into the free map can cost
// the journal a leaf's shift, up to 4 KiB (measured: 1.5 KiB a block when
// 128 blocks overflowed a 256 KiB journal), so a step takes at most half
// the journal at that rate: 32 blocks for the 256 KiB journal of an arena
// up to 32 MiB, 128 for the 1 MiB of a 128 MiB arena, diskStep from 8 MiB
// (arenas of 1 GiB and more) on.
func (fs *FS) diskStepBytes() uint64 {
	return min(diskStep, max(16, fs.a.Geometry().JournalLen/8192)) * fs.ds.BlockSize()
}

// roundUp rounds n up to a multiple of the disk block size.
func (fs *FS) roundUp(n uint64) uint64 {
	bs := fs.ds.BlockSize()
	return (n + bs - 1) / bs * bs
}

// lsizeChange records an lsize entry before a change, for abortTx.
type lsizeChange struct {
	ino Ino
	old uint64 // 0: absent
}

// openDisk opens the store for Open, or checks that the arena needs none.
// diskPairErr names the disk and its arena in an error of diskstore.Open
// (or CheckPair).
func diskPairErr(diskPath, arenaPath string, err error) error {
	switch {
	case errors.Is(err, diskstore.ErrUUIDMismatch):
		return fmt.Errorf("disk %s does not belong to arena %s: %w", diskPath, arenaPath, err)
	case errors.Is(err, diskstore.ErrGeometry):
		// A disk truncated or grown since mkfs, or one of another size.
		return fmt.Errorf("disk %s does not match arena %s: %w", diskPath, arenaPath, err)
	}
	return fmt.Errorf("disk %s (of arena %s): %w", diskPath, arenaPath, err)
}

func (fs *FS) openDisk(diskPath string, o Options) error {
	g := fs.a.Geometry()
	hasDisk := g.Features&pram.FeatureDisk != 0
	dev := o.Device
	switch {
	case !hasDisk && (diskPath != "" || dev != nil):
		return fmt.Errorf("%s: %w: file system was made without a disk, but disk %s was given", fs.a.Path(), ErrInvalid, diskPath)
	case !hasDisk:
		fs.threshold = maxMemFileSize
		return nil
	case diskPath == "" && dev == nil:
		return fmt.Errorf("%s: %w: file system has a large-file disk; give its path", fs.a.Path(), ErrInvalid)
	}
	fs.threshold = g.Params[diskstore.ParamThreshold]
	if fs.threshold < MinLargeFileThreshold || fs.threshold > MaxLargeFileThreshold {
		return fmt.Errorf("%s: %w: large-file threshold %d", fs.a.Path(), ErrCorrupt, fs.threshold)
	}
	if dev == nil {
		var err error
		if dev, err = diskstore.OpenDevice(diskPath, diskstore.DeviceOptions{ReadOnly: fs.readOnly}); err != nil {
			return err
		}
	}
	so := o.Disk
	so.Logf = fs.logf
	ds, err := diskstore.Open(fs.h, dev, so)
	if err != nil {
		dev.Close()
		return diskPairErr(diskPath, fs.a.Path(), err)
	}
	fs.ds = ds
	// Room that only rewrites' extent records may take (alloc's rewrite
	// reserve): a copy-on-write overwrite can cut a file's extents down to
	// one per block (24 bytes, and the free map's as many), so 32 bytes a
	// disk block, at most 1/32 of the heap. Ordinary allocations (small
	// files, growth) leave it, as ext4 keeps blocks for its metadata: with
	// the arena full, scattered rewrites went on only as long as half the
	// heap's free reserve lasted (an outside review, session 46).
	fs.h.SetRewriteReserve(min(ds.Stats().DataBlocks*rewriteBytesPerBlock/pram.PageSize, fs.h.Stats().Pages/32))
	if r := ds.Recovery(); r.Checked > 0 || r.Damaged > 0 {
		fs.logf("%s: recovery: %d blocks of %d files written since the last sync: %d intact, %d restored, %d zeroed, %d unreadable, %d damaged",
			diskPath, r.Checked, r.Files, r.Intact, r.Restored, r.Zeroed, r.Unreadable, r.Damaged)
	}
	return nil
}

// rewriteBytesPerBlock is the arena kept for rewrites per disk block (see
// SetRewriteReserve's call in openDisk).
const rewriteBytesPerBlock = 32

// fileSize is a regular file's size as users see it.
func (fs *FS) fileSize(in inode) uint64 {
	if in.onDisk() {
		if l, ok := fs.lsize[in.ino]; ok && l > in.size() {
			return l
		}
	}
	return in.size()
}

// setLsize records the logical size of a disk file (0 drops the entry),
// undone if the Tx aborts.
// Preconditions: fs.mu held exclusively.
func (fs *FS) setLsize(ino Ino, size uint64) {
	old, ok := fs.lsize[ino]
	if !ok && size == 0 || ok && old == size {
		return
	}
	fs.lsizeUndo = append(fs.lsizeUndo, lsizeChange{ino, old})
	if size == 0 {
		delete(fs.lsize, ino)
	} else {
		fs.lsize[ino] = size
	}
}

func (fs *FS) undoLsize() {
	for i := len(fs.lsizeUndo) - 1; i >= 0; i-- {
		c := fs.lsizeUndo[i]
		if c.old == 0 {
			delete(fs.lsize, c.ino)
		} else {
			fs.lsize[c.ino] = c.old
		}
	}
	fs.lsizeUndo = fs.lsizeUndo[:0]
}

// publishSize makes size the disk file's size: in the arena if none of the
// file's data is still buffered (the store has synced it), else in lsize
// only (see the ordering point above). size is never below what the arena
// has, except through diskSetSize.
func (fs *FS) publishSize(tx *pram.Tx, in inode, size uint64) {
	if size > in.size() && fs.ds.Buffered(in.seg()) > 0 {
		// What lies before the first buffered byte is on disk (a write
		// that filled the buffer flushed it) or a hole: publish that much,
		// so that no flushed block lies beyond the published size.
		if first := uint64(fs.ds.BufferedStart(in.seg())); first > in.size() {
			in.set64(tx, iSize, min(size, first))
		}
		if size > in.size() {
			fs.setLsize(in.ino, size)
			return
		}
	}
	if size > in.size() {
		in.set64(tx, iSize, size)
	}
	fs.setLsize(in.ino, 0)
}

// diskBytes is the disk space a disk file holds, counting buffered data
// that will need blocks (for st_blocks).
func (fs *FS) diskBytes(in inode) uint64 {
	if fs.ds == nil {
		return 0
	}
	seg := in.seg()
	n, err := fs.ds.DiskBytes(seg)
	if err != nil {
		return 0
	}
	if b := uint64(fs.ds.Buffered(seg)); b > 0 {
		bs := fs.ds.BlockSize()
		n = max(n, min(n+(b+bs-1)/bs*bs, (fs.fileSize(in)+bs-1)/bs*bs))
	}
	return n
}

// wantDisk reports whether an arena file growing to end must move to disk.
func (fs *FS) wantDisk(in inode, end uint64) bool {
	return fs.ds != nil && !in.onDisk() && diskstore.ToDisk(int64(min(end, 1<<62)), fs.threshold)
}

// maxSize is the largest regular file.
func (fs *FS) maxSize() uint64 {
	if fs.ds != nil {
		return diskstore.MaxFileSize
	}
	return maxMemFileSize
}

// toDiskLocked moves an arena file's data to a new segment list (see the
// comment at the top): the data is written to the device, the inode points
// at the list, its arena data is freed, and the device is synced before tx
// commits (the disk commit moves the files queued for it another way,
// without FS.mu: move.go). more reports arena storage left to free after
// the commit (the inode is then on the orphan list; run
// finishShrinkLocked).
func (fs *FS) toDiskLocked(tx *pram.Tx, in inode) (more bool, err error) {
	if err := fs.sizeSane(in); err != nil {
		return false, err // damaged: the copy would allocate its size
	}
	seg, err := fs.ds.NewFile(tx, uint64(in.ino))
	if err != nil {
		return false, err
	}
	if err := fs.reserveOnMove(tx, in, seg); err != nil {
		return false, err
	}
	if size := in.size(); size > 0 && in.data() != 0 {
		buf := make([]byte, size)
		fs.memRead(in, 0, buf)
		if err := fs.ds.Write(tx, seg, 0, buf); err != nil {
			return false, err
		}
	}
	if more, err = fs.switchToDiskLocked(tx, in, seg); err != nil {
		return false, err
	}
	if err := fs.ds.Flush(tx, seg); err != nil {
		return false, err
	}
	return more, nil
}

// switchToDiskLocked points the inode at seg, which holds a copy of its
// data, and frees its arena data. The device must be synced before tx
// commits, or have been since seg's data was written (move.go). more: as
// toDiskLocked.
func (fs *FS) switchToDiskLocked(tx *pram.Tx, in inode, seg pram.Off) (more bool, err error) {
	in.set64(tx, iSeg, uint64(seg))
	in.set32(tx, iFlags, (in.flags()|flagDisk)&^flagReserved)
	more, err = fs.memShrink(tx, in, 0)
	if err != nil {
		return false, err
	}
	if more {
		fs.orphanAdd(tx, in)
	}
	fs.vol.markDirty(in.ino)
	return more, nil
}

// reserveOnMove reserves disk blocks in seg, the new segment list of an
// arena file about to move to the disk, under every arena block the file
// holds, if fallocate reserved some of them (flagReserved): the arena does
// not record which blocks those were, and a block of zeros would otherwise
// become a hole, which a later write could find no space for (ext4 keeps
// what fallocate reserved). Reserved blocks past the size are kept past it
// (iKeepEnd), as KEEP_SIZE's are on the disk. The blocks read as zeros
// until written. Without the flag the move leaves blocks of zeros as
// holes.
// Preconditions: fs.mu held exclusively; in is still in the arena.
func (fs *FS) reserveOnMove(tx *pram.Tx, in inode, seg pram.Off) error {
	if in.flags()&flagReserved == 0 || in.data() == 0 {
		return nil
	}
	size := int64(in.size())
	for pos := int64(0); ; {
		a := fs.memSeek(in, pos, true)
		if a >= int64(maxMemFileSize) {
			return nil
		}
		b := fs.memSeek(in, a, false)
		if b <= a {
			return fmt.Errorf("%w: inode %d: no progress listing its arena blocks", ErrIO, in.ino)
		}
		if err := fs.ds.Allocate(tx, seg, a, b-a); err != nil {
			return err
		}
		if b > size {
			in.set64(tx, iKeepEnd, max(in.u64(iKeepEnd), uint64(b)))
			if Ino(fs.a.Root(slotFalloc)) == in.ino {
				// An extending fallocate of this file moved it: what it
				// gives back if it fails must not include this older
				// reservation (falloc_pending.go; found by a review).
				tx.Set64(pram.RootOff(slotFallocKeep), max(fs.a.Root(slotFallocKeep), in.u64(iKeepEnd)))
			}
		}
		pos = b
	}
}

// toArenaLocked moves a disk file being truncated to size back into the
// arena, if it can: ok is false (and nothing changed) when its data cannot
// be read, the copy would be too large or the arena would fall below its
// reserve (arenaRoomFor).
func (fs *FS) toArenaLocked(tx *pram.Tx, in inode, size uint64) (ok bool, err error) {
	if in.data() != 0 || size > moveBackMax || size > fs.threshold/2 {
		return false, nil
	}
	var buf []byte
	var runs [][2]int64 // what the disk holds of [0, size): holes stay holes in the arena
	if size > 0 {
		if !fs.arenaRoomFor(size) {
			return false, nil
		}
		buf = make([]byte, size)
		if _, err := fs.ds.ReadAt(in.seg(), buf, 0, nil); err != nil {
			fs.logf("%s: inode %d stays on disk: %v", fs.diskPath, in.ino, err)
			return false, nil
		}
		// Blocks fallocate reserved come along (reserved in the arena):
		// a later write there must not fail for want of space.
		if runs, err = fs.ds.MappedRuns(in.seg(), int64(size)); err != nil {
			return false, err
		}
	}
	// Blocks that read as zeros (reserved, or written with zeros) come
	// back as reserved arena blocks: the next move reserves them again.
	reserved := false
	for _, r := range runs {
		hole, err := fs.ds.NextHole(in.seg(), r[0])
		if err != nil {
			return false, err
		}
		reserved = reserved || hole < r[1]
	}
	if err := fs.ds.Destroy(tx, in.seg()); err != nil {
		return false, err
	}
	in.set64(tx, iSeg, 0)
	in.set64(tx, iDiskCur, 0) // nothing on disk is left to free
	flags := in.flags() &^ flagDisk
	if reserved {
		flags |= flagReserved
	}
	in.set32(tx, iFlags, flags)
	in.set64(tx, iSize, size)
	fs.setLsize(in.ino, 0)
	if size == 0 {
		return true, nil
	}
	for _, r := range runs { // every allocation before any copy
		reached, err := fs.memReserve(tx, in, uint64(r[0]), uint64(r[1]), true)
		if err != nil {
			return false, err
		}
		if reached < uint64(r[1]) {
			return false, fmt.Errorf("%w: journal too small to move inode %d back into the arena", ErrIO, in.ino)
		}
	}
	for _, r := range runs {
		fs.memCopyIn(in, uint64(r[0]), buf[r[0]:r[1]])
	}
	return true, nil
}

// diskWrite stores as much of src as one Tx should carry at off (or at the
// end of file) and returns the bytes taken.
func (fs *FS) diskWrite(tx *pram.Tx, in inode, off uint64, appendMode bool, src []byte, pieceCap int) (int, error) {
	seg := in.seg()
	size := fs.fileSize(in)
	if appendMode {
		off = size
	}
	if off >= diskstore.MaxFileSize {
		return 0, ErrFileTooBig
	}
	src = src[:min(uint64(len(src)), diskstore.MaxFileSize-off)]
	// Each piece adds a checksum and, by default, an unsynced record per
	// disk block to the Tx, and on free space cut into single blocks each
	// block it takes shifts a leaf of the free map and of the segment list
	// (up to 4 KiB of journal each; a 128 KiB write of 4 KiB blocks
	// overflowed a 256 KiB journal). So a piece is at most as many blocks as
	// half the journal holds at diskstore.JournalPerBlock, the first one at
	// most as many as half the room left holds (a move to the disk in this
	// Tx may have used much of it), and another follows only while the
	// room left is twice what the last one took.
	bs := fs.ds.BlockSize()
	if pieceCap == 0 {
		pieceCap = fs.diskPieceBlocks()
	}
	piece := pieceCap * int(bs) // smaller in a retry after an overflow (diskWriteFull)
	first := int(min(uint64(piece), max(tx.Room()/2/diskstore.JournalPerBlock, 1)*bs))
	done := 0
	for done < len(src) {
		c := src[done:min(len(src), done+piece)]
		if done == 0 {
			c = src[:min(len(src), first)]
		}
		before := tx.Room()
		if err := fs.ds.Write(tx, seg, int64(off)+int64(done), c); err != nil {
			return 0, err
		}
		done += len(c)
		// After each piece: a piece that filled the buffer flushed all of
		// it, past the published size too, and the next piece may buffer
		// bytes below that size again, after which publishSize would no
		// longer see what was flushed (a crash then left written blocks
		// beyond the end).
		fs.publishSize(tx, in, max(size, off+uint64(done)))
		if fs.journalLow(tx) || tx.Room() < 2*(before-tx.Room()) {
			break
		}
	}
	fs.vol.markDirty(in.ino)
	return done, nil
}

// errDiskWriteFull: a write to a large file overflowed the journal.
// JournalPerBlock is a typical bound, not a worst case: on free space cut
// into single blocks, a rewritten block may shift a leaf of the free map, two
// of the segment list, one of the quarantine and one of the unsynced list,
// and a leaf that splits shifts its list's directory too. An outside review
// got EIO for 1 of 3,000 random 128 KiB rewrites of files punched every other
// 4 KiB block on a 16 MiB arena (10-block pieces, over 256 KiB of journal).
var errDiskWriteFull = fmt.Errorf("%w: a write to the disk overflowed the journal", ErrBusy)

// diskWriteFull returns the piece size, in disk blocks, for the retry of a
// write whose Tx overflowed the journal with pieces of at most pieceCap
// blocks (0: diskWrite's own size): half of it, and 0 when a single block
// overflowed (the write then fails with EIO). The Tx was rolled back whole,
// so the retry starts the chunk again.
func (fs *FS) diskWriteFull(pieceCap int) int {
	if pieceCap == 0 {
		pieceCap = fs.diskPieceBlocks()
	}
	return pieceCap / 2
}

// diskPieceBlocks is the size of diskWrite's pieces in disk blocks: at most
// a chunk, 64 blocks, and as many as half the journal holds at
// diskstore.JournalPerBlock.
func (fs *FS) diskPieceBlocks() int {
	bs := fs.ds.BlockSize()
	return int(min(writeChunk/bs, 64, max(fs.a.Geometry().JournalLen/2/diskstore.JournalPerBlock, 1)))
}

// diskSetSize truncates or extends a disk file (truncate(2)). A file cut to
// ToArena size moves back into the arena. A shrink, or a grow that frees
// what was reserved past the new end, that releases more than one step of
// disk data publishes the new size at once, records the end of
// the data still to release in iDiskCur, puts the inode on the orphan list
// and returns more: the caller commits and runs finishShrinkLocked, which
// releases the rest step by step (Open does it after a crash; nothing can
// read the file in between).
func (fs *FS) diskSetSize(tx *pram.Tx, in inode, size uint64) (more bool, err error) {
	seg := in.seg()
	old := fs.fileSize(in)
	// A truncate frees the blocks fallocate(KEEP_SIZE) reserved past the
	// new end, as on ext4, unless it grows the file (ext4_setattr cuts
	// blocks past the end only when the size does not grow): then what
	// lies past the new end stays reserved (up to iKeepEnd; to keepTo, in
	// whole blocks), and what it brings inside the file stays too.
	if size <= old || in.u64(iKeepEnd) <= size {
		in.set64(tx, iKeepEnd, 0)
	}
	keepTo := fs.keepTo(in, size)
	held, err := fs.ds.DiskBytes(seg)
	if err != nil {
		return false, err
	}
	// What goes reaches the last mapped block, past the end too: a grow
	// frees what was reserved past the new end. That took one Tx however
	// much it was, and reservations cut into pieces (KEEP_SIZE, then holes
	// punched in them) overflowed a 256 KiB journal at about 185 pieces
	// (EIO, found by an outside review); so a grow steps down like a shrink.
	mapped, err := fs.ds.MappedEnd(seg)
	if err != nil {
		return false, err
	}
	end := max(uint64(mapped), fs.roundUp(old))
	if held > fs.diskStepBytes() && end > fs.roundUp(keepTo)+fs.diskStepBytes() {
		if size > in.size() {
			// Gathered bytes below size must be on disk before the
			// arena's size covers them. (Those past keepTo, which
			// ZeroTail drops, come back if the Tx aborts.)
			if err := fs.ds.Writeback(tx, seg); err != nil {
				return false, err
			}
		}
		// The cut's one device write, before the size is published: a
		// disk that fails it leaves the file as it was (the truncate
		// fails whole), and what the later steps leave undone cannot
		// show old bytes past the new size (an outside review saw a
		// truncate fail with EIO in its last step and keep its new size).
		if err := fs.ds.ZeroTail(tx, seg, int64(keepTo)); err != nil {
			return false, err
		}
		in.set64(tx, iDiskCur, max(in.u64(iDiskCur), end))
		in.set64(tx, iSize, size)
		fs.setLsize(in.ino, 0)
		fs.orphanAdd(tx, in)
		return true, nil
	}
	if size < old {
		if diskstore.ToArena(int64(size), fs.threshold) {
			ok, err := fs.toArenaLocked(tx, in, size)
			if err != nil || ok {
				return false, err
			}
		}
	}
	if err := fs.diskTruncate(tx, seg, old, keepTo); err != nil {
		return false, err
	}
	if size > in.size() {
		// Gathered bytes below size must be on disk before the arena's
		// size covers them.
		if err := fs.ds.Writeback(tx, seg); err != nil {
			return false, err
		}
	}
	in.set64(tx, iSize, size)
	fs.setLsize(in.ino, 0)
	fs.vol.markDirty(in.ino)
	return false, nil
}

// diskShrinkStep releases one step of the disk data above a disk file's
// size (iDiskCur down to the size); more reports that steps remain. The last
// step cuts the file exactly (zeroing the tail of its last block) and moves
// it back into the arena if it is small enough.
// Preconditions: fs.mu held exclusively; in is on disk with iDiskCur set.
func (fs *FS) diskShrinkStep(tx *pram.Tx, in inode) (more bool, err error) {
	seg, size := in.seg(), in.size()
	keepTo := fs.keepTo(in, size)
	cur, floor := in.u64(iDiskCur), fs.roundUp(keepTo)
	if cur > floor+fs.diskStepBytes() {
		next := cur - fs.diskStepBytes()
		if err := fs.diskTruncate(tx, seg, cur, next); err != nil {
			return false, err
		}
		in.set64(tx, iDiskCur, next)
		return true, nil
	}
	in.set64(tx, iDiskCur, 0)
	if keepTo == size && diskstore.ToArena(int64(size), fs.threshold) {
		if held, err := fs.ds.DiskBytes(seg); err == nil && held <= fs.diskStepBytes() {
			ok, err := fs.toArenaLocked(tx, in, size)
			if err != nil || ok {
				return false, err
			}
		}
	}
	return false, fs.diskTruncate(tx, seg, cur, keepTo)
}

// keepTo is how far a disk file of size keeps its blocks at a truncate:
// to size, or past it to the end of the block holding iKeepEnd when
// fallocate(KEEP_SIZE) reserved further (a truncate that grew the file
// kept that: diskSetSize).
func (fs *FS) keepTo(in inode, size uint64) uint64 {
	if keep := in.u64(iKeepEnd); keep > size {
		return fs.roundUp(keep)
	}
	return size
}

// diskTruncate cuts or extends the disk data of segment list seg from old to
// size bytes. A cut may draw on the heap's free reserve (alloc.UsingReserve):
// the extents it returns to the disk's free map can need arena memory, and a
// full arena must still be able to shrink and delete files. A cut frees the
// file's own records too, so over its run it gives back what it takes. A
// truncate to the same size counts as a cut (it frees what KEEP_SIZE
// reserved past the end).
// Preconditions: fs.mu held exclusively.
func (fs *FS) diskTruncate(tx *pram.Tx, seg pram.Off, old, size uint64) error {
	if size > old {
		return fs.ds.Truncate(tx, seg, int64(size))
	}
	return fs.h.UsingReserve(func() error { return fs.ds.Truncate(tx, seg, int64(size)) })
}

// diskFallocate applies fallocate to the disk file's range [start, end)
// from pos on, one step per Tx, and returns how far it got (end when done):
// a hole is punched, or a range zeroed (punched, then reserved), or space
// reserved. Space that KEEP_SIZE reserves past the end of the file is
// remembered (iKeepEnd), so that the trim at the last close keeps it; so is
// what the steps before the last of an extending fallocate reserve, whose
// size changes in its last step only (atomic; if a later step fails, or
// the system crashes before the last, the size stays and the reservation
// is given back, see falloc_pending.go).
func (fs *FS) diskFallocate(tx *pram.Tx, in inode, start, pos, end uint64, punch, zero, keep bool) (uint64, error) {
	seg := in.seg()
	size := fs.fileSize(in)
	fs.vol.markDirty(in.ino)
	stop := min(end, pos+fs.diskStepBytes())
	if punch || zero {
		// PunchHole writes the file's gathered data first: publish.
		if err := fs.ds.PunchHole(tx, seg, int64(pos), int64(stop-pos)); err != nil {
			return pos, err
		}
	}
	if !punch {
		if err := fs.ds.Allocate(tx, seg, int64(pos), int64(stop-pos)); err != nil {
			return pos, err
		}
		switch {
		case stop <= size:
		case keep || stop < end:
			// KEEP_SIZE, or a step before the last of a fallocate that
			// extends the file: the size changes in the last step only, so
			// that a crash leaves it as before or after; what the steps
			// reserve past it is kept as KEEP_SIZE's is.
			in.set64(tx, iKeepEnd, max(in.u64(iKeepEnd), stop))
		default:
			size = stop
		}
	}
	fs.publishSize(tx, in, size)
	return stop, nil
}

// flushDiskLocked writes a disk file's gathered data and publishes its
// size. With durable it also syncs the device (fsync: Store.Flush); else it
// only writes back what is gathered (Store.Writeback: the last close, where
// no durability is promised, spares a device sync). With trim it drops the
// preallocation past the end of the file, and then, in a transaction of its
// own whose failure only keeps disk space, the preallocation inside it
// that the file did not write (Store.DropPrealloc).
// Preconditions: fs.mu held exclusively.
func (fs *FS) flushDiskLocked(ino Ino, durable, trim bool) error {
	var seg pram.Off // the file's segment list, if it has one
	err := fs.flushDiskTx(ino, durable, trim, &seg)
	if err != nil || !trim || seg == 0 {
		return err
	}
	// One Tx per call: a window cut into many holes takes several.
	for range maxDropTxs {
		if in, err := fs.inode(ino); err != nil || !fs.ds.HasPrealloc(seg, int64(in.size())) {
			return nil
		}
		dropped := false
		err = fs.update(func(tx *pram.Tx) error {
			in, err := fs.inode(ino)
			if err != nil || !in.isReg() || !in.onDisk() || in.seg() != seg {
				return nil
			}
			dropped = true
			return fs.ds.DropPrealloc(tx, seg, int64(in.size()))
		})
		if err == nil && !dropped {
			return nil
		}
		if err != nil {
			if !errors.Is(err, ErrNoSpace) {
				fs.logf("%s: inode %d keeps disk blocks it did not write: %v", fs.diskPath, ino, err)
			}
			return nil
		}
	}
	return nil
}

// maxDropTxs bounds the Txs one file's DropPrealloc takes at a close (each
// unmaps a few hundred runs of unwritten blocks at least).
const maxDropTxs = 64

func (fs *FS) flushDiskTx(ino Ino, durable, trim bool, segp *pram.Off) error {
	return fs.update(func(tx *pram.Tx) error {
		in, err := fs.inode(ino)
		if err != nil || !in.isReg() || !in.onDisk() {
			return nil // gone or moved back: nothing to flush
		}
		seg := in.seg()
		*segp = seg
		if durable {
			err = fs.ds.Flush(tx, seg)
		} else {
			err = fs.ds.Writeback(tx, seg)
		}
		if err != nil {
			return err
		}
		fs.publishSize(tx, in, fs.fileSize(in))
		if trim {
			return fs.ds.Trim(tx, seg, int64(max(in.size(), in.u64(iKeepEnd))))
		}
		return nil
	})
}

// trimRecoveredLocked trims the preallocation past the end of files after
// a crash: the trim at their last close never came, and the mark that asks
// for it (vol.dirty) did not outlive the crash. Those are the files that
// recovery found written since the last sync and, when the arena was not
// closed cleanly, every file on the disk that maps blocks past its end and
// its KEEP_SIZE reservation (iKeepEnd): a file synced (fsync, or the idle
// sync) while it was growing has no unsynced records left, and kept up to
// 64 MiB past its end. Finding those walks every inode, so only after a
// crash. Failures are logged: they only keep disk space.
// Preconditions: fs.mu held exclusively; nothing is open yet (Open).
func (fs *FS) trimRecoveredLocked() {
	trim := make(map[Ino]bool)
	for _, seg := range fs.ds.RecoveredFiles() {
		if owner, err := fs.ds.Owner(seg); err == nil {
			trim[Ino(owner)] = true
		}
	}
	if fs.a.WasDirty() {
		err := func() (err error) {
			defer fs.guard(&err) // a damaged arena: fsck's business
			return fs.eachInodeLocked(func(in inode) {
				if !in.isReg() || !in.onDisk() || trim[in.ino] {
					return
				}
				end, err := fs.ds.MappedEnd(in.seg())
				if err == nil && uint64(end) > fs.roundUp(max(in.size(), in.u64(iKeepEnd))) {
					trim[in.ino] = true
				}
			})
		}()
		if err != nil {
			fs.logf("%s: looking for preallocation left by the crash: %v", fs.diskPath, err)
		}
	}
	for ino := range trim {
		if in, err := fs.inode(ino); err != nil || !in.isReg() || !in.onDisk() {
			continue
		}
		if err := fs.flushDiskLocked(ino, false, true); err != nil {
			fs.logf("%s: trimming inode %d after the crash: %v", fs.diskPath, ino, err)
		}
	}
}

// releaseDisk writes back and trims a disk file after its last close.
func (fs *FS) releaseDisk(ino Ino) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return
	}
	if err := fs.flushDiskLocked(ino, false, true); err != nil {
		fs.vol.markDirty(ino) // still gathered: fsync or unmount retries
		fs.logf("%s: writing inode %d at close: %v", fs.diskPath, ino, err)
	}
}

// syncDiskLocked writes back every disk file with gathered data or an
// unpublished size (trimming those written since their last close), then
// syncs the device (sync(2), unmount). It returns the first error; the
// others are logged.
// Preconditions: fs.mu held exclusively.
func (fs *FS) syncDiskLocked() error {
	var first error
	note := func(err error, format string, args ...any) {
		if err == nil {
			return
		}
		fs.logf("%s: "+format+": %v", append(append([]any{fs.diskPath}, args...), err)...)
		if first == nil {
			first = err
		}
	}
	inos := fs.vol.takeDirty()
	for ino := range fs.lsize {
		inos[ino] = true
	}
	for ino := range inos {
		err := fs.flushDiskLocked(ino, false, true)
		if err != nil {
			fs.vol.markDirty(ino)
		}
		note(err, "writing inode %d", ino)
	}
	note(fs.update(func(tx *pram.Tx) error { return fs.ds.FlushAll(tx) }), "syncing the disk")
	return first
}

// Sync writes every file's data and syncs the disk and the arena
// (sync(2), FUSE_SYNCFS).
func (fs *FS) Sync() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return ErrIO
	}
	if fs.readOnly {
		return nil
	}
	if fs.ds != nil {
		if err := fs.syncDiskLocked(); err != nil {
			return fs.mapErr(err)
		}
	}
	if err := fs.a.Sync(); err != nil {
		fs.logf("%v", err)
		return ErrIO
	}
	return nil
}

// fsyncDisk makes a disk file durable, and with it every change: its data
// is flushed and synced, then its metadata committed, then every other block
// written to the disk synced (syncWrittenLocked), then the arena persisted.
func (fs *FS) fsyncDisk(ino Ino) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return ErrIO
	}
	if err := fs.flushDiskLocked(ino, true, false); err != nil {
		return err
	}
	if err := fs.syncWrittenLocked(); err != nil {
		return err
	}
	if err := fs.a.Sync(); err != nil {
		fs.logf("%v", err)
		return ErrIO
	}
	return nil
}

// syncDisk syncs every block written to the disk so far (syncWrittenLocked),
// for the fsync of a file that is not on the disk or a directory.
func (fs *FS) syncDisk() error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return ErrIO
	}
	return fs.syncWrittenLocked()
}

// syncWrittenLocked syncs the blocks written to the disk since its last
// sync, whichever files they belong to: the arena already points at them
// (DurableOnProcessCrash), so the checkpoint an fsync makes next would
// otherwise persist sizes and block maps whose data a power loss can still
// drop, and recovery would zero it; an fsync makes every change durable
// (README, "Durability contract"), as an ext4 journal commit writes the
// ordered data first. Data still gathered in memory (GatherInMemory) stays
// there: its sizes are not published.
// Preconditions: fs.mu held exclusively.
func (fs *FS) syncWrittenLocked() error {
	err := fs.update(func(tx *pram.Tx) error { return fs.ds.SyncWritten(tx) })
	if err != nil {
		fs.logf("%s: syncing the disk: %v", fs.diskPath, err)
	}
	return err
}

// diskFreeStep releases part of an unlinked disk file's storage within one
// Tx: leftover arena storage first, then the disk range from the end in
// steps (the size is the cursor: nobody sees an unlinked, unused file),
// then the segment list. done reports that the inode has no disk storage.
// Preconditions: fs.mu held exclusively; in.nlink() == 0, not in use.
func (fs *FS) diskFreeStep(tx *pram.Tx, in inode) (done bool, err error) {
	if more, err := fs.memShrink(tx, in, 0); err != nil || more {
		return false, err
	}
	if cur := in.u64(iDiskCur); cur != 0 {
		// A shrink was in progress: the size is the cursor from now on.
		in.set64(tx, iSize, max(in.size(), cur))
		in.set64(tx, iDiskCur, 0)
	}
	seg := in.seg()
	step := fs.diskStepBytes()
	// From the last mapped block down, one step per Tx: blocks past the
	// end (preallocated, or reserved with KEEP_SIZE) count as well.
	if held, err := fs.ds.DiskBytes(seg); err == nil && held > step {
		mapped, err := fs.ds.MappedEnd(seg)
		if err != nil {
			return false, err
		}
		if end := max(uint64(mapped), fs.roundUp(fs.fileSize(in))); end > step {
			next := (end - step) / fs.ds.BlockSize() * fs.ds.BlockSize()
			if err := fs.ds.Truncate(tx, seg, int64(next)); err != nil {
				return false, err
			}
			in.set64(tx, iSize, min(fs.fileSize(in), next))
			fs.setLsize(in.ino, 0)
			return false, nil
		}
	}
	if err := fs.ds.Destroy(tx, seg); err != nil {
		return false, err
	}
	in.set64(tx, iSeg, 0)
	in.set32(tx, iFlags, in.flags()&^flagDisk)
	fs.setLsize(in.ino, 0)
	return true, nil
}

// readDisk reads a disk file for Read.
// Preconditions: fs.mu held shared.
func (fs *FS) readDisk(in inode, h Handle, off uint64, dst []byte) error {
	ra := fs.vol.readahead(in.ino, h, fs.ds)
	_, err := fs.ds.ReadAt(in.seg(), dst, int64(off), ra)
	return err
}

// KeepCache reports whether the kernel may keep the file's cached pages
// when it is opened (FOPEN_KEEP_CACHE): false when a read now would update
// atime under relatime (atime not after mtime or ctime, or older than 24
// hours), so that the first read reaches the core; always true with
// Options.NoAtime. An invalid inode gives false (the read will report it).
func (fs *FS) KeepCache(ino Ino) bool {
	keep := false
	_ = fs.read(func() error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		keep = !fs.atimeDue(in)
		return nil
	})
	return keep
}
