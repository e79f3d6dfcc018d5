package conquest

import (
	"fmt"

	"conquest/pram"
)

// Regular-file operations. The byte storage itself is behind the mem*
// functions of file_mem.go.

// writeChunk bounds the data one write transaction stores (journal use).
const writeChunk = 1 << 20

// maxFileSize is the largest regular file.
const maxFileSize = maxMemFileSize

// regInode is inode(ino) that must be a regular file.
func (fs *FS) regInode(ino Ino) (inode, error) {
	in, err := fs.inode(ino)
	if err != nil {
		return in, err
	}
	switch in.typ() {
	case S_IFREG:
		return in, nil
	case S_IFDIR:
		return in, ErrIsDir
	}
	return in, ErrInvalid
}

// Read reads up to len(dst) bytes at off. It is short only at end of file.
// Holes read as zeros. atime is updated by the relatime rule.
func (fs *FS) Read(ino Ino, h Handle, off int64, dst []byte) (n int, err error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	atime := false
	err = fs.read(func() error {
		in, err := fs.regInode(ino)
		if err != nil {
			return err
		}
		if size := in.size(); uint64(off) < size {
			n = int(min(uint64(len(dst)), size-uint64(off)))
			fs.memRead(in, uint64(off), dst[:n])
		}
		atime = fs.atimeDue(in)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if atime {
		fs.touchAtime(ino)
	}
	return n, nil
}

// Write stores src at off (at the end of file if h was opened O_APPEND) and
// returns the bytes written. killPriv clears S_ISUID, and S_ISGID if the
// group-execute bit is set. Each chunk of up to 1 MiB is one transaction;
// a failure after the first chunk returns the bytes written so far.
func (fs *FS) Write(ino Ino, h Handle, off int64, src []byte, killPriv bool) (int, error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	appendMode := false
	if f, ok := fs.vol.handle(ino, h); ok && f.flags&O_APPEND != 0 {
		appendMode = true
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return 0, ErrIO
	}
	now := fs.now()
	total := 0
	for {
		chunk := src[total:]
		if len(chunk) > writeChunk {
			chunk = chunk[:writeChunk]
		}
		wrote := 0
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.regInode(ino)
			if err != nil {
				return err
			}
			if len(chunk) == 0 {
				return nil
			}
			o := uint64(off) + uint64(total)
			if appendMode {
				o = in.size()
			}
			if o >= maxFileSize {
				return ErrFileTooBig
			}
			c := chunk[:min(uint64(len(chunk)), maxFileSize-o)]
			end := o + uint64(len(c))
			reached, err := fs.memReserve(tx, in, o, end, true)
			if err != nil {
				return err
			}
			if reached <= o {
				return fmt.Errorf("%w: no progress reserving blocks", ErrIO) // memReserve always makes some
			}
			c = c[:reached-o]
			end = reached
			if size := in.size(); o > size {
				fs.memZero(in, size, o)
			}
			fs.memCopyIn(in, o, c)
			if end > in.size() {
				in.set64(tx, iSize, end)
			}
			in.touchMC(tx, now)
			if killPriv {
				fs.killPrivLocked(tx, in)
			}
			wrote = len(c)
			return nil
		})
		if err != nil {
			if total > 0 {
				return total, nil
			}
			return 0, err
		}
		total += wrote
		if total >= len(src) || wrote == 0 {
			return total, nil
		}
	}
}

// killPrivLocked clears S_ISUID, and S_ISGID when group-exec is set.
func (fs *FS) killPrivLocked(tx *pram.Tx, in inode) {
	m := in.mode()
	nm := m &^ S_ISUID
	if m&0o010 != 0 {
		nm &^= S_ISGID
	}
	in.set32(tx, iMode, nm)
}

// setSizeLocked changes a regular file's size in tx: growing zeroes the
// storage past the old size, shrinking frees whole blocks past the new one.
// If more blocks remain than one Tx may free, the inode goes on the orphan
// list (so a crash finishes the job at the next Open) and more is true:
// the caller commits and calls finishShrinkLocked.
func (fs *FS) setSizeLocked(tx *pram.Tx, in inode, size uint64) (more bool, err error) {
	old := in.size()
	if size > maxFileSize {
		return false, ErrFileTooBig
	}
	if size == old {
		return false, nil
	}
	if size > old {
		fs.memZero(in, old, size)
		in.set64(tx, iSize, size)
		return false, nil
	}
	in.set64(tx, iSize, size)
	more, err = fs.memShrink(tx, in, size)
	if err != nil || !more {
		return false, err
	}
	fs.orphanAdd(tx, in)
	return true, nil
}

// finishShrinkLocked frees the remaining blocks past the size, one Tx per
// batch, then takes a linked inode off the orphan list.
// Preconditions: fs.mu held exclusively.
func (fs *FS) finishShrinkLocked(ino Ino) error {
	for {
		more := false
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.inode(ino)
			if err != nil {
				return err
			}
			more, err = fs.memShrink(tx, in, in.size())
			if err != nil || more {
				return err
			}
			if in.nlink() > 0 {
				fs.orphanRemove(tx, in)
			}
			return nil
		})
		if err != nil || !more {
			return err
		}
	}
}

// truncateOp empties a regular file for open(O_TRUNC), marking mtime and
// ctime even if it was already empty, as open(2) does. Other file types
// are left alone (the kernel handles FIFOs and devices itself).
func (fs *FS) truncateOp(ino Ino) error {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return ErrIO
	}
	now := fs.now()
	more := false
	err := fs.update(func(tx *pram.Tx) error {
		in, err := fs.inode(ino)
		if err != nil || !in.isReg() {
			return err
		}
		in.touchMC(tx, now)
		more, err = fs.setSizeLocked(tx, in, 0)
		return err
	})
	if err == nil && more {
		err = fs.finishShrinkLocked(ino)
	}
	return err
}

// Fallocate allocates (mode 0 or FallocKeepSize), punches a hole
// (FallocPunchHole|FallocKeepSize) or zeroes (FallocZeroRange) the range
// [off, off+length). Other modes are ErrNotSupported. Large ranges take
// several transactions; after an error the blocks already allocated stay.
func (fs *FS) Fallocate(ino Ino, off, length int64, mode uint32) error {
	if off < 0 || length <= 0 {
		return ErrInvalid
	}
	if mode&^(FallocKeepSize|FallocPunchHole|FallocZeroRange) != 0 {
		return ErrNotSupported
	}
	punch := mode&FallocPunchHole != 0
	zero := mode&FallocZeroRange != 0
	keep := mode&FallocKeepSize != 0
	if punch && (zero || !keep) {
		return ErrNotSupported
	}
	start, end := uint64(off), uint64(off)+uint64(length)
	if end > maxFileSize || end < start {
		return ErrFileTooBig
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return ErrIO
	}
	now := fs.now()
	for pos := start; ; {
		done := false
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.regInode(ino)
			if err != nil {
				return err
			}
			if punch {
				in.touchMC(tx, now)
				more, err := fs.memPunch(tx, in, start, end)
				done = !more
				return err
			}
			reached, err := fs.memReserve(tx, in, pos, end, false)
			if err != nil {
				return err
			}
			in.setTime(tx, iCtime, now)
			if zero {
				fs.memZero(in, pos, min(reached, in.size()))
				in.setTime(tx, iMtime, now)
			}
			if !keep && reached > in.size() {
				fs.memZero(in, in.size(), reached)
				in.set64(tx, iSize, reached)
				in.setTime(tx, iMtime, now)
			}
			pos = reached
			done = reached >= end
			return nil
		})
		if err != nil || done {
			return err
		}
	}
}

// Fsync makes the file's data and metadata durable. Metadata is already
// committed, so this flushes the arena's dirty pages (msync).
func (fs *FS) Fsync(ino Ino, datasync bool) error {
	err := fs.read(func() error {
		_, err := fs.inode(ino)
		return err
	})
	if err != nil {
		return err
	}
	return fs.syncArena()
}

// FsyncDir is Fsync for a directory.
func (fs *FS) FsyncDir(ino Ino) error { return fs.Fsync(ino, false) }

func (fs *FS) syncArena() error {
	fs.mu.RLock()
	defer fs.mu.RUnlock()
	if fs.closed {
		return ErrIO
	}
	if err := fs.a.Sync(); err != nil {
		fs.logf("%v", err)
		return ErrIO
	}
	return nil
}
