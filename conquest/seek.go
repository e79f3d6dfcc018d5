package conquest

import "conquest/pram"

// Whence values of Seek (lseek(2)'s SEEK_DATA and SEEK_HOLE).
const (
	SeekData = 3
	SeekHole = 4
)

// Seek answers lseek(2) with SEEK_DATA or SEEK_HOLE for a regular file: the
// first offset at or after off that holds data (SeekData) or lies in a hole
// (SeekHole; the end of the file counts as one). An offset that is negative
// or at or past the end of the file, or a SeekData with no data after it,
// is ErrNoSuchOffset (ENXIO), as on ext4.
//
// Data is what the file stores: in the arena, every index block allocated
// (fallocate's included) and all of a small file's one block; on the disk,
// every block written (mapped with a checksum) or buffered
// (diskstore.NextData). Holes are the rest: on the disk also the blocks
// that fallocate reserved or writes took ahead and nothing wrote, which
// read as zeros. POSIX allows a hole to be reported as data, never the
// reverse.
func (fs *FS) Seek(ino Ino, off int64, whence int) (int64, error) {
	if whence != SeekData && whence != SeekHole {
		return 0, ErrInvalid
	}
	var pos int64
	err := fs.read(func() error {
		in, err := fs.regInode(ino)
		if err != nil {
			return err
		}
		if err := fs.sizeSane(in); err != nil {
			return err
		}
		size := int64(fs.fileSize(in))
		if off < 0 || off >= size {
			return ErrNoSuchOffset
		}
		switch {
		case in.onDisk() && whence == SeekData:
			pos, err = fs.ds.NextData(in.seg(), off)
		case in.onDisk():
			pos, err = fs.ds.NextHole(in.seg(), off)
		default:
			pos = fs.memSeek(in, off, whence == SeekData)
		}
		if err != nil {
			return err
		}
		if pos >= size {
			if whence == SeekData {
				return ErrNoSuchOffset
			}
			pos = size
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	return pos, nil
}

// memSeek is Seek's answer for a file in the arena, unclipped: the first
// offset at or after off that holds data (data) or not. Past the storage
// every offset is a hole, so a search for data there returns the maximum.
// Preconditions: fs.mu held (shared).
func (fs *FS) memSeek(in inode, off int64, data bool) int64 {
	d, limit := in.data(), in.idxLen() // blocks past the index are holes
	switch {
	case d == 0:
		limit = 0
	case in.small():
		limit = (limit + BlockSize - 1) / BlockSize // its one block: data
	}
	for b := uint64(off) / BlockSize; b < limit; b++ {
		stored := in.small() || fs.a.U64(d+pram.Off(8*b)) != 0
		if stored == data {
			return max(off, int64(b*BlockSize))
		}
	}
	if data {
		return int64(maxMemFileSize) << 1 // none: past any arena file's size
	}
	return max(off, int64(limit*BlockSize))
}
