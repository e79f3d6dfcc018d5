package conquest

import "conquest/pram"

// statfsMaxSlabs bounds the pages of inode records whose free slots StatFS
// counts (a walk of at most 64 Ki page-map entries).
const statfsMaxSlabs = 1 << 16

// StatFS reports block and inode counts: blocks are 4 KiB of the arena heap
// (free = the allocator's free bytes) plus the disk's data blocks counted
// in 4 KiB units (free = the free map's blocks); inodes in use come from
// root slot 4, and free inodes are estimated as the heap bytes not in use
// (free pages and the free slots of slab pages), less the part kept for
// mapping the disk (mapReserve), / 256: every such byte could become an
// inode record, though data competes for the same space.
// Counting the free slots makes the estimate fall by one per inode made,
// as ext4's count does, instead of by 16 at a time when a slab page is
// taken.
func (fs *FS) StatFS() StatFS {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	if fs.closed {
		return StatFS{Bsize: BlockSize, Frsize: BlockSize, Namelen: MaxName}
	}
	st := fs.h.Stats()
	used := fs.a.Root(slotInodes)
	// The heap's free reserve (alloc.ReservePages) is free but not
	// available, as ext4's reserved blocks are: only frees may use it.
	blocks, free, avail := st.TotalBytes/BlockSize, st.FreeBytes/BlockSize, st.AvailBytes/BlockSize
	if fs.ds != nil {
		ds := fs.ds.Stats()
		blocks += ds.DataBlocks * ds.BlockSize / BlockSize
		free += ds.FreeBlocks * ds.BlockSize / BlockSize
		// The disk's overwrite reserve is free but not available too.
		avail += ds.AvailBlocks * ds.BlockSize / BlockSize
	}
	// Free inodes: the free slots of pages of inode records, and what the
	// available pages hold beyond the arena's mapReserve, which new inodes
	// may not take (newInode, spill.go).
	ffree := fs.h.FreeSlots(inodeSize, statfsMaxSlabs) + (st.AvailBytes-min(fs.mapReserve(st), st.AvailBytes))/inodeSize
	return StatFS{
		Blocks: blocks, Bfree: free, Bavail: avail,
		Files: used + ffree, Ffree: ffree,
		Bsize: BlockSize, Frsize: BlockSize, Namelen: MaxName,
	}
}

// Space reports the arena's and the disk's space from the allocators'
// counters, without walking the tree.
func (fs *FS) Space() Space {
	var sp Space
	_ = fs.read(func() error {
		sp = fs.spaceLocked()
		return nil
	})
	return sp
}

// spaceLocked is Space. Preconditions: fs.mu held.
func (fs *FS) spaceLocked() Space {
	st := fs.h.Stats()
	sp := Space{ArenaBytes: fs.a.Size(), HeapBytes: st.TotalBytes, HeapUsed: st.UsedBytes,
		HeapFree: st.AvailBytes, Inodes: fs.a.Root(slotInodes)}
	if fs.ds != nil {
		ds := fs.ds.Stats()
		sp.DiskBytes = ds.DataBlocks * ds.BlockSize
		sp.DiskUsed = (ds.UsedBlocks - min(ds.QuarantinedBlocks, ds.UsedBlocks)) * ds.BlockSize
		sp.DiskFree = ds.FreeBlocks * ds.BlockSize
		sp.DiskAvail = ds.AvailBlocks * ds.BlockSize
	}
	return sp
}

// Usage walks the tree and reports arena usage and file counts.
func (fs *FS) Usage() Usage {
	var u Usage
	_ = fs.read(func() error {
		sp := fs.spaceLocked()
		u = Usage{ArenaBytes: sp.ArenaBytes, HeapBytes: sp.HeapBytes, HeapUsed: sp.HeapUsed,
			HeapFree: sp.HeapFree, HeapObjects: fs.h.Stats().Objects, Inodes: sp.Inodes,
			DiskBytes: sp.DiskBytes, DiskUsed: sp.DiskUsed, DiskFree: sp.DiskFree, DiskAvail: sp.DiskAvail}
		if fs.ds != nil {
			ds := fs.ds.Stats()
			u.LargeFileThreshold = fs.threshold
			u.DiskBlockSize = ds.BlockSize
			u.DiskQuarantined = ds.QuarantinedBlocks * ds.BlockSize
			u.DiskUnsynced = ds.UnsyncedBytes
			u.DiskFreeExtents = ds.FreeExtents
			u.DiskBuffered = ds.BufferedBytes
			u.DiskChecksumErrors = ds.ChecksumErrors
			u.DiskIOErrors = ds.IOErrors
		}
		_ = fs.eachInodeLocked(func(in inode) {
			switch in.typ() {
			case S_IFREG:
				u.Files++
				size := fs.fileSize(in)
				u.FileBytes += size
				u.FileAllocated += in.allocd()
				if in.onDisk() {
					u.LargeFiles++
					u.LargeFileBytes += size
				} else {
					u.SmallFiles++
					u.SmallFileBytes += size
				}
			case S_IFDIR:
				u.Dirs++
			case S_IFLNK:
				u.Symlinks++
			default:
				u.Specials++
			}
		})
		for off := fs.a.Root(slotOrphans); off != 0 && u.Orphans < 1<<26; u.Orphans++ {
			in, err := fs.inodeAt(pram.Off(off))
			if err != nil {
				break
			}
			off = uint64(in.orphNext())
		}
		return nil
	})
	return u
}
