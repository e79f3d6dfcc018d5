package conquest

import (
	"errors"
	"fmt"

	"conquest/alloc"
	"conquest/pram"
)

// In-arena file data (the small-file path of Conquest): this file is the one
// seam through which regular-file bytes are stored. A file is in one of
// three states, recorded in its inode:
//
//   - empty: iData == 0 (reads as zeros up to iSize: a hole);
//   - small: flagSmall, iData is one small-class block holding bytes
//     [0, iIdxLen) (iIdxLen = the block's capacity, <= maxSmall);
//   - index: iData is a single-level array of iIdxLen block offsets, one per
//     BlockSize bytes of the file; a zero entry is a hole.
//
// Bytes past iSize inside allocated storage are unspecified; every operation
// that raises iSize first zeroes the storage in [old size, new size) (see
// memZero), so truncate-down need not clear anything and stays metadata-only.
// Data stores are unlogged (POSIX does not make write atomic); fresh blocks
// are free again after a rollback, and every allocation happens before any
// byte is copied, so an operation that fails with ENOSPC changes nothing.
//
// Large files on disk (diskstore) will be a fourth state behind the same
// functions: memRead, memReserve, memCopyIn, memZero, memShrink, memPunch.
const (
	maxSmall       = 2048                 // largest file kept as one small-class block
	indexMin       = 16                   // smallest index, entries
	maxIndex       = alloc.MaxAlloc / 8   // largest index, entries
	maxMemFileSize = maxIndex * BlockSize // largest in-arena file: 512 MiB
	freeBatch      = 256                  // blocks freed per Tx at most
	journalReserve = 32 << 10             // journal bytes kept free for the rest of a Tx
	cheapFree      = 64 * BlockSize       // data freed inside the unlink Tx itself
)

func (in inode) small() bool { return in.flags()&flagSmall != 0 }

// memRead copies bytes [off, off+len(dst)) of the file into dst.
// Preconditions: fs.mu held (shared); off+len(dst) <= size.
func (fs *FS) memRead(in inode, off uint64, dst []byte) {
	data := in.data()
	switch {
	case data == 0:
		clear(dst)
	case in.small():
		c := in.idxLen()
		n := uint64(0)
		if off < c {
			n = min(uint64(len(dst)), c-off)
			copy(dst[:n], fs.a.View(data+pram.Off(off), n))
		}
		clear(dst[n:])
	default:
		nidx := in.idxLen()
		for len(dst) > 0 {
			b, o := off/BlockSize, off%BlockSize
			n := min(BlockSize-o, uint64(len(dst)))
			var blk pram.Off
			if b < nidx {
				blk = pram.Off(fs.a.U64(data + pram.Off(8*b)))
			}
			if blk == 0 {
				clear(dst[:n])
			} else {
				copy(dst[:n], fs.a.View(blk+pram.Off(o), n))
			}
			dst, off = dst[n:], off+n
		}
	}
}

// memCovered reports whether the file already has storage for every byte
// of [off, end) (a write there allocates nothing). Preconditions: fs.mu
// held; off < end.
func (fs *FS) memCovered(in inode, off, end uint64) bool {
	data := in.data()
	switch {
	case data == 0:
		return false
	case in.small():
		return end <= in.idxLen()
	}
	last := (end - 1) / BlockSize
	if last >= in.idxLen() {
		return false
	}
	for b := off / BlockSize; b <= last; b++ {
		if fs.a.U64(data+pram.Off(8*b)) == 0 {
			return false
		}
	}
	return true
}

// indexCap is the index capacity (a power of two) that covers need blocks.
func indexCap(need uint64) uint64 {
	c := uint64(indexMin)
	for c < need {
		c <<= 1
	}
	return c
}

// memReserve makes storage exist for bytes [off, end) of the file, allocating
// blocks for holes. overwrite says the caller will store every byte of the
// range, so fully covered new blocks need not be zeroed. It stops early when
// the transaction's journal runs low, and returns how far storage now
// reaches (end, or a block boundary before it).
// Preconditions: fs.mu held exclusively; off < end <= maxMemFileSize.
func (fs *FS) memReserve(tx *pram.Tx, in inode, off, end uint64, overwrite bool) (uint64, error) {
	data := in.data()
	if data == 0 && end <= maxSmall {
		blk, err := fs.h.AllocZero(tx, end)
		if err != nil {
			return off, err
		}
		c, err := fs.h.SizeOf(blk)
		if err != nil {
			return off, err
		}
		c = min(c, maxSmall)
		in.set64(tx, iData, uint64(blk))
		in.set64(tx, iIdxLen, c)
		in.set64(tx, iAllocd, c)
		in.set32(tx, iFlags, in.flags()|flagSmall)
		return end, nil
	}
	if in.small() {
		c := in.idxLen()
		if end <= c {
			return end, nil
		}
		if err := fs.memUnsmall(tx, in, end); err != nil {
			return off, err
		}
		if in.small() {
			return end, nil
		}
	}
	need := (end-1)/BlockSize + 1
	if need > maxIndex {
		return off, ErrFileTooBig
	}
	if need > in.idxLen() {
		if err := fs.memGrowIndex(tx, in, indexCap(need)); err != nil {
			return off, err
		}
	}
	data = in.data()
	added := uint64(0)
	defer func() {
		if added > 0 {
			in.set64(tx, iAllocd, in.allocd()+added)
		}
	}()
	for b := off / BlockSize; b < need; b++ {
		e := data + pram.Off(8*b)
		if fs.a.U64(e) != 0 {
			continue
		}
		if added > 0 && fs.journalLow(tx) {
			return max(off, b*BlockSize), nil
		}
		var blk pram.Off
		var err error
		if overwrite && b*BlockSize >= off && (b+1)*BlockSize <= end {
			blk, err = fs.h.Alloc(tx, BlockSize)
		} else {
			blk, err = fs.h.AllocZero(tx, BlockSize)
		}
		if err != nil {
			return off, err
		}
		tx.Set64(e, uint64(blk))
		added += BlockSize
	}
	return end, nil
}

// memUnsmall moves a small file's block to a bigger small block (if end
// still fits maxSmall) or into index form.
func (fs *FS) memUnsmall(tx *pram.Tx, in inode, end uint64) error {
	old, c := in.data(), in.idxLen()
	valid := min(c, in.size())
	if end <= maxSmall {
		blk, err := fs.h.AllocZero(tx, end)
		if err != nil {
			return err
		}
		nc, err := fs.h.SizeOf(blk)
		if err != nil {
			return err
		}
		nc = min(nc, maxSmall)
		copy(fs.a.Bytes(blk, valid), fs.a.View(old, valid))
		if err := fs.h.Free(tx, old); err != nil {
			return err
		}
		in.set64(tx, iData, uint64(blk))
		in.set64(tx, iIdxLen, nc)
		in.set64(tx, iAllocd, nc)
		return nil
	}
	need := (end-1)/BlockSize + 1
	idx, err := fs.h.AllocZero(tx, 8*indexCap(need))
	if err != nil {
		return err
	}
	blk, err := fs.h.AllocZero(tx, BlockSize)
	if err != nil {
		return err
	}
	copy(fs.a.Bytes(blk, valid), fs.a.View(old, valid))
	fs.a.PutU64(idx, uint64(blk)) // fresh in this Tx: unlogged
	if err := fs.h.Free(tx, old); err != nil {
		return err
	}
	in.set64(tx, iData, uint64(idx))
	in.set64(tx, iIdxLen, indexCap(need))
	in.set64(tx, iAllocd, BlockSize)
	in.set32(tx, iFlags, in.flags()&^flagSmall)
	return nil
}

// memGrowIndex replaces the index by one of n entries (copy, then free).
func (fs *FS) memGrowIndex(tx *pram.Tx, in inode, n uint64) error {
	idx, err := fs.h.AllocZero(tx, 8*n)
	if err != nil {
		return err
	}
	if old := in.data(); old != 0 {
		k := in.idxLen()
		copy(fs.a.Bytes(idx, 8*k), fs.a.View(old, 8*k))
		if err := fs.h.Free(tx, old); err != nil {
			return err
		}
	}
	in.set64(tx, iData, uint64(idx))
	in.set64(tx, iIdxLen, n)
	return nil
}

// memCopyIn stores src at file offset off (unlogged data stores).
// Preconditions: memReserve covered [off, off+len(src)).
func (fs *FS) memCopyIn(in inode, off uint64, src []byte) {
	data := in.data()
	if in.small() {
		copy(fs.a.Bytes(data+pram.Off(off), uint64(len(src))), src)
		return
	}
	for len(src) > 0 {
		b, o := off/BlockSize, off%BlockSize
		n := min(BlockSize-o, uint64(len(src)))
		blk := pram.Off(fs.a.U64(data + pram.Off(8*b)))
		if blk == 0 || b >= in.idxLen() {
			panic(fmt.Errorf("conquest: write to unreserved block %d of inode %d", b, in.ino))
		}
		copy(fs.a.Bytes(blk+pram.Off(o), n), src[:n])
		src, off = src[n:], off+n
	}
}

// pastStorage is the storage wholly past a file's size that a write is
// about to store into (memStoragePast).
type pastStorage struct {
	small  pram.Off // the small block, when the size is 0
	blocks []uint64 // else the indexes of such blocks, ascending
}

// memStoragePast returns the storage that already exists wholly past the
// file's size within [off, *end): blocks, or the small block of a file of
// size 0, that a KEEP_SIZE fallocate reserved (zeroed; nothing else leaves
// storage there). A write stores into them through the journal (memStore),
// so that a crash before its Tx commits leaves them zeros: Check takes
// non-zero bytes there for a size damaged downward (memDataPastSize), and a
// system crash would otherwise leave the arena refused at mount. Storage
// that memReserve adds needs no journal (a rollback frees it), nor does
// storage within the size (a torn overwrite there is allowed). *end is
// lowered to a block boundary when the journal cannot hold every such
// block and still keep journalReserve; at least one is always kept.
// Preconditions: fs.mu held exclusively; !in.onDisk(); off < *end.
func (fs *FS) memStoragePast(tx *pram.Tx, in inode, off uint64, end *uint64) pastStorage {
	data, size := in.data(), in.size()
	if data == 0 {
		return pastStorage{}
	}
	if in.small() {
		if size == 0 {
			return pastStorage{small: data}
		}
		return pastStorage{}
	}
	var p pastStorage
	room, keep := tx.Room(), min(journalReserve, fs.a.Geometry().JournalLen/4)
	need := uint64(0) // journal bytes: the blocks' records and memReserve's
	for b := off / BlockSize; b*BlockSize < *end; b++ {
		blk := uint64(0)
		if b < in.idxLen() {
			blk = fs.a.U64(data + pram.Off(8*b))
		}
		switch {
		case blk == 0:
			need += reserveJournalCost
		case b*BlockSize >= size:
			need += 16 + BlockSize // a journal record of the whole block
		default:
			continue
		}
		if len(p.blocks) > 0 && need+keep > room {
			*end = b * BlockSize
			break
		}
		if blk != 0 {
			p.blocks = append(p.blocks, b)
		}
	}
	return p
}

// reserveJournalCost bounds the journal bytes memReserve takes per block it
// allocates (measured: about 170, index growth included).
const reserveJournalCost = 256

// memStore stores src at file offset off: through the journal into the
// storage past the size that memStoragePast found before memReserve, the
// rest unlogged (memCopyIn).
// Preconditions: memReserve covered [off, off+len(src)).
func (fs *FS) memStore(tx *pram.Tx, in inode, off uint64, src []byte, past pastStorage) {
	if in.small() {
		if past.small != 0 && in.data() == past.small {
			tx.SetBytes(past.small+pram.Off(off), src)
		} else {
			fs.memCopyIn(in, off, src)
		}
		return
	}
	for _, b := range past.blocks {
		lo, hi := max(off, b*BlockSize), min(off+uint64(len(src)), (b+1)*BlockSize)
		if lo >= hi {
			continue
		}
		if lo > off {
			fs.memCopyIn(in, off, src[:lo-off])
		}
		blk := pram.Off(fs.a.U64(in.data() + pram.Off(8*b)))
		tx.SetBytes(blk+pram.Off(lo%BlockSize), src[lo-off:hi-off])
		src, off = src[hi-off:], hi
	}
	if len(src) > 0 {
		fs.memCopyIn(in, off, src)
	}
}

// memZero clears whatever storage exists for bytes [from, to) (unlogged).
func (fs *FS) memZero(in inode, from, to uint64) {
	data := in.data()
	if data == 0 || from >= to {
		return
	}
	if in.small() {
		c := in.idxLen()
		if from < c {
			clear(fs.a.Bytes(data+pram.Off(from), min(to, c)-from))
		}
		return
	}
	nidx := in.idxLen()
	for off := from; off < to; {
		b, o := off/BlockSize, off%BlockSize
		if b >= nidx {
			return
		}
		n := min(BlockSize-o, to-off)
		if blk := pram.Off(fs.a.U64(data + pram.Off(8*b))); blk != 0 {
			clear(fs.a.Bytes(blk+pram.Off(o), n))
		}
		off += n
	}
}

// memShrink frees the storage wholly beyond newSize, from the end, in a
// budget that fits one Tx; more reports that blocks remain. Freeing down to
// zero also frees the index (or the small block).
// Preconditions: fs.mu held exclusively.
func (fs *FS) memShrink(tx *pram.Tx, in inode, newSize uint64) (more bool, err error) {
	data := in.data()
	if data == 0 {
		return false, nil
	}
	if in.small() {
		if newSize == 0 {
			if err := fs.h.Free(tx, data); err != nil {
				return false, err
			}
			fs.memSetEmpty(tx, in)
		}
		return false, nil
	}
	keep := (newSize + BlockSize - 1) / BlockSize
	freed := uint64(0)
	defer func() {
		if freed > 0 {
			in.set64(tx, iAllocd, in.allocd()-min(freed, in.allocd()))
		}
	}()
	for b := in.idxLen(); b > keep; b-- {
		e := data + pram.Off(8*(b-1))
		blk := pram.Off(fs.a.U64(e))
		if blk == 0 {
			continue
		}
		if freed >= freeBatch*BlockSize || freed > 0 && fs.journalLow(tx) {
			return true, nil
		}
		if err := fs.h.Free(tx, blk); err != nil {
			return false, err
		}
		tx.Set64(e, 0)
		freed += BlockSize
	}
	if keep == 0 {
		if err := fs.h.Free(tx, data); err != nil {
			return false, err
		}
		fs.memSetEmpty(tx, in)
	}
	return false, nil
}

func (fs *FS) memSetEmpty(tx *pram.Tx, in inode) {
	in.set64(tx, iData, 0)
	in.set64(tx, iIdxLen, 0)
	in.set64(tx, iAllocd, 0)
	in.set32(tx, iFlags, in.flags()&^flagSmall)
}

// memPunch frees the blocks wholly inside [off, end) and zeroes the partial
// ones (FALLOC_FL_PUNCH_HOLE), within a one-Tx budget; more reports that
// blocks remain to be freed.
func (fs *FS) memPunch(tx *pram.Tx, in inode, off, end uint64) (more bool, err error) {
	data := in.data()
	if data == 0 {
		return false, nil
	}
	if in.small() {
		fs.memZero(in, off, end)
		return false, nil
	}
	first := (off + BlockSize - 1) / BlockSize // first whole block
	last := end / BlockSize                    // one past the last whole block
	if first >= last {
		fs.memZero(in, off, end)
		return false, nil
	}
	fs.memZero(in, off, first*BlockSize)
	fs.memZero(in, last*BlockSize, end)
	freed := uint64(0)
	defer func() {
		if freed > 0 {
			in.set64(tx, iAllocd, in.allocd()-min(freed, in.allocd()))
		}
	}()
	for b := first; b < min(last, in.idxLen()); b++ {
		e := data + pram.Off(8*b)
		blk := pram.Off(fs.a.U64(e))
		if blk == 0 {
			continue
		}
		if freed >= freeBatch*BlockSize || freed > 0 && fs.journalLow(tx) {
			return true, nil
		}
		if err := fs.h.Free(tx, blk); err != nil {
			return false, err
		}
		tx.Set64(e, 0)
		freed += BlockSize
	}
	return false, nil
}

// memCheck marks the file's storage in the checker and verifies the
// recorded sizes.
//
// shared (may be nil) hears of each block of the index whose allocation an
// earlier file (or block) reached too.
func (fs *FS) memCheck(c *alloc.Checker, in inode, report func(string, ...any), shared func(b uint64)) {
	data := in.data()
	if data == 0 {
		if in.idxLen() != 0 || in.allocd() != 0 || in.small() {
			report("empty file with index length %d, %d bytes allocated, flags %#x", in.idxLen(), in.allocd(), in.flags())
		}
		return
	}
	c.Mark(data, fmt.Sprintf("data of inode %d", in.ino))
	sz, err := fs.h.SizeOf(data)
	if err != nil {
		report("data block %d: %v", data, err)
		return
	}
	if in.small() {
		if in.idxLen() != min(sz, maxSmall) || in.allocd() != in.idxLen() {
			report("small block of %d bytes recorded as %d (allocd %d)", sz, in.idxLen(), in.allocd())
		}
		return
	}
	n := in.idxLen()
	if n*8 != sz || n < indexMin || n&(n-1) != 0 {
		report("index of %d bytes recorded as %d entries", sz, n)
		return
	}
	blocks := uint64(0)
	for b := uint64(0); b < n; b++ {
		blk := pram.Off(fs.a.U64(data + pram.Off(8*b)))
		if blk == 0 {
			continue
		}
		if err := c.Mark(blk, fmt.Sprintf("block %d of inode %d", b, in.ino)); errors.Is(err, alloc.ErrReachedTwice) && shared != nil {
			shared(b)
		}
		if s, err := fs.h.SizeOf(blk); err != nil || s != BlockSize {
			report("block %d at %d: size %d, %v", b, blk, s, err)
		}
		blocks++
	}
	if blocks*BlockSize != in.allocd() {
		report("%d blocks allocated, inode records %d bytes", blocks, in.allocd())
	}
}

// memDataPastSize reports whether a file kept in the arena stores data no
// size covers, and where the last byte of it ends. Nothing the file system
// does leaves non-zero bytes in a block wholly past the size (a truncate
// frees such blocks, a fallocate with KEEP_SIZE reserves zeroed ones), nor
// in a small block when the size is 0 (a truncate to 0 frees it); a size
// damaged downward (zeroed, say: the file read as empty and fsck said
// clean) does. The partial last block may hold stale bytes past the size
// (a truncate does not zero them), so they are no evidence.
// Preconditions: fs.mu held; memCheck found the storage sound.
func (fs *FS) memDataPastSize(in inode) (end uint64, past bool) {
	data, size := in.data(), in.size()
	if data == 0 || in.onDisk() {
		return 0, false
	}
	lastNonZero := func(b []byte) int {
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				return i
			}
		}
		return -1
	}
	if in.small() {
		if size != 0 {
			return 0, false
		}
		if i := lastNonZero(fs.a.Bytes(data, in.idxLen())); i >= 0 {
			return uint64(i) + 1, true
		}
		return 0, false
	}
	for b := in.idxLen(); b > 0 && (b-1)*BlockSize >= size; b-- {
		blk := pram.Off(fs.a.U64(data + pram.Off(8*(b-1))))
		if blk == 0 {
			continue
		}
		if i := lastNonZero(fs.a.Bytes(blk, BlockSize)); i >= 0 {
			return (b-1)*BlockSize + uint64(i) + 1, true
		}
	}
	return 0, false
}

// memDataEnd is the end of the last non-zero byte stored for a file kept
// in the arena, whatever its size says (0 if it stores none).
// Preconditions: fs.mu held; the file's storage checked (memCheck).
func (fs *FS) memDataEnd(in inode) uint64 {
	data := in.data()
	if data == 0 || in.onDisk() {
		return 0
	}
	if in.small() {
		b := fs.a.Bytes(data, in.idxLen())
		for i := len(b) - 1; i >= 0; i-- {
			if b[i] != 0 {
				return uint64(i) + 1
			}
		}
		return 0
	}
	for b := in.idxLen(); b > 0; b-- {
		blk := pram.Off(fs.a.U64(data + pram.Off(8*(b-1))))
		if blk == 0 {
			continue
		}
		p := fs.a.Bytes(blk, BlockSize)
		for i := len(p) - 1; i >= 0; i-- {
			if p[i] != 0 {
				return (b-1)*BlockSize + uint64(i) + 1
			}
		}
	}
	return 0
}

// memRepair makes the arena storage fields of a file kept in the arena
// consistent again after memCheck found them damaged (fsck --repair), and
// says what it did. What cannot be trusted is dropped and reads as zeros:
// the whole data when its pointer or its index is bad, single blocks whose
// pointers are bad. Storage no longer referenced is then a leak that a later
// pass frees.
// Preconditions: fs.mu held exclusively; !in.onDisk().
func (fs *FS) memRepair(tx *pram.Tx, in inode) string {
	drop := func(why string) string {
		in.set64(tx, iData, 0)
		in.set64(tx, iIdxLen, 0)
		in.set64(tx, iAllocd, 0)
		in.set32(tx, iFlags, in.flags()&^flagSmall)
		return "dropped its data (" + why + "); it reads as zeros"
	}
	data := in.data()
	if data == 0 {
		return drop("it had none")
	}
	sz, err := fs.h.SizeOf(data)
	if err != nil {
		return drop("bad pointer")
	}
	if in.small() {
		n := min(sz, maxSmall)
		in.set64(tx, iIdxLen, n)
		in.set64(tx, iAllocd, n)
		return fmt.Sprintf("set its block length to %d", n)
	}
	n := in.idxLen()
	if n*8 != sz || n < indexMin || n&(n-1) != 0 {
		return drop("bad index")
	}
	blocks, dropped := uint64(0), 0
	for b := uint64(0); b < n; b++ {
		at := data + pram.Off(8*b)
		blk := pram.Off(fs.a.U64(at))
		if blk == 0 {
			continue
		}
		if s, err := fs.h.SizeOf(blk); err != nil || s != BlockSize {
			tx.Set64(at, 0)
			dropped++
			continue
		}
		blocks++
	}
	in.set64(tx, iAllocd, blocks*BlockSize)
	return fmt.Sprintf("dropped %d damaged blocks (they read as zeros) and set its storage to %d blocks", dropped, blocks)
}

// journalLow reports that tx should stop taking on more blocks: less than
// journalReserve (or a quarter of a small journal) is left.
func (fs *FS) journalLow(tx *pram.Tx) bool {
	return tx.Room() < min(journalReserve, fs.a.Geometry().JournalLen/4)
}
