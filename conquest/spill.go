package conquest

import "conquest/alloc"

// Spilling small files to the disk when the arena runs low.
//
// In Conquest the arena holds all metadata and the data of every file up to
// the large-file threshold. A file system whose arena is full of small
// files' data would then refuse every write with ENOSPC while its disk,
// and df, still showed free space, and it would refuse even a large file,
// which grows through the arena up to the threshold. So when the arena's
// available bytes would fall below a reserve, a write (or fallocate) that
// needs new arena storage moves the file to the disk first (toDiskLocked,
// the same move as at the threshold) and stores it there, whatever its
// size. The reserve keeps the arena able to hold what only it can:
// inodes, directories, xattrs, symlinks, and the disk's own metadata (the
// segment list and a checksum per disk block of every file on disk). It
// is a base of 1/64 of the heap (at least 1 MiB) plus 16 bytes for every
// free disk block, so that large files can fill the disk to the last
// block without the arena running out of room to map it (but never more
// than half the heap: an arena too small for its disk's metadata still
// keeps small files in RAM until then). Every file on the disk also costs
// the arena about 1 KiB (inode, name, segment list), which the reserve
// does not count: many small files spilled end in an arena that is full
// but for the per-block part (mapReserve, which new inodes may not take),
// like an ext4 out of inodes, with disk space left for the files there.
//
// A spilled file stays on disk until a truncate to half the threshold or
// less moves it back, which it does only while the arena keeps its
// reserve (toArenaLocked). When the disk is full too, writes fall back to
// the arena and its last bytes above the allocator's own free reserve.

const (
	spillBase      = 1 << 20 // the reserve's floor
	spillBaseShift = 6       // and its share of the heap: 1/64
	spillPerBlock  = 16      // arena bytes kept per free disk block

	// spillSmallKeep: a file that stays one small block of at most this
	// many bytes stays in the arena. A file on disk keeps its segment list
	// and checksum lists there, about 550 bytes more than an arena file
	// (measured: 905 bytes of arena for a 1-byte file on disk, 348 in the
	// arena), so spilling it would take more of the reserve than it saves.
	spillSmallKeep = 512
)

// spillReserve is the arena bytes that small files' data leaves to
// metadata: the base and mapReserve, at most half the heap. st is the
// heap's Stats. Preconditions: fs.mu held.
func (fs *FS) spillReserve(st alloc.Stats) uint64 {
	return min(max(st.TotalBytes>>spillBaseShift, spillBase)+fs.mapReserve(st), st.TotalBytes/2)
}

// mapReserve is the part of spillReserve kept for mapping the disk's free
// blocks: a new inode may not take it (newInode), so that when files on
// the disk, each of which costs the arena about 1 KiB, have filled the
// arena, creating files fails with ENOSPC, as on an ext4 out of inodes,
// while the files already there can still grow on the disk. Only new
// inodes are kept out: xattrs, links, directory growth and the extents
// that rewrites split off may still take it (README, limits).
// st is the heap's Stats. Preconditions: fs.mu held.
func (fs *FS) mapReserve(st alloc.Stats) uint64 {
	if fs.ds == nil {
		return 0
	}
	return min(fs.ds.AvailBytes()/fs.ds.BlockSize()*spillPerBlock, st.TotalBytes/2)
}

// spill reports whether an arena file about to store bytes [off, end)
// must move to the disk first: the arena's available bytes would drop
// below spillReserve, the range needs storage the file does not have, the
// file would not stay a small block of at most spillSmallKeep bytes, and
// the disk can take the whole file. It counts the files it sends (fs.spills;
// a rolled-back Tx's too) and logs the first.
// Preconditions: fs.mu held exclusively; off < end.
func (fs *FS) spill(in inode, off, end uint64) bool {
	if fs.ds == nil || in.onDisk() || end <= off {
		return false
	}
	if end <= spillSmallKeep && (in.data() == 0 || in.small()) {
		return false // cheaper in the arena (spillSmallKeep)
	}
	// An upper bound of what the range can allocate: its blocks, and an
	// index that grows to cover it.
	need := (end-off+BlockSize-1)/BlockSize*BlockSize + 2*BlockSize + 8*((end+BlockSize-1)/BlockSize)
	st := fs.h.Stats()
	if st.AvailBytes >= fs.spillReserve(st)+need || fs.memCovered(in, off, end) {
		return false
	}
	if fs.ds.AvailBytes() < fs.roundUp(max(fs.fileSize(in), end))+fs.ds.BlockSize() {
		return false
	}
	if fs.spills == 0 {
		fs.logf("%s: the arena is down to its reserve for metadata (%d bytes available): files that need more arena space go to the disk",
			fs.a.Path(), st.AvailBytes)
	}
	fs.spills++
	return true
}

// arenaRoomFor reports whether the arena can take n more bytes of file
// data, for a move back from the disk, and keep its reserve with room to
// spare (twice n and moveBackSlack more), so that a file truncated near
// the reserve does not go back and forth. Preconditions: fs.mu held;
// fs.ds != nil.
func (fs *FS) arenaRoomFor(n uint64) bool {
	st := fs.h.Stats()
	return st.FreeBytes >= 2*n+(1<<20) && st.AvailBytes >= fs.spillReserve(st)+2*n+moveBackSlack
}

// moveBackSlack is the room above the reserve that a move back leaves.
const moveBackSlack = 256 << 10

// Spills is how many files spill has sent to the disk since Open (a
// rolled-back operation's too).
func (fs *FS) Spills() uint64 {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	return fs.spills
}
