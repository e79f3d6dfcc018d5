package conquest

import (
	"errors"
	"fmt"

	"conquest/diskstore"
	"conquest/pram"
)

// Regular-file operations. The byte storage itself is behind the mem*
// functions of file_mem.go.

// writeChunk bounds the data one write transaction stores (journal use).
const writeChunk = 1 << 20

// maxFileSize is the largest regular file of a file system without a disk
// (with one, diskstore.MaxFileSize; see FS.maxSize).
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

// sizeSane refuses (ErrIO) a file whose size is past what its storage can
// hold: damage (fsck repairs it), which would otherwise read as exabytes of
// zeros. The first refusals are logged.
// Preconditions: fs.mu held (shared is enough).
func (fs *FS) sizeSane(in inode) error {
	limit := uint64(maxMemFileSize)
	if in.onDisk() {
		limit = diskstore.MaxFileSize
	}
	if size := fs.fileSize(in); size > limit {
		if fs.badSize.Add(1) <= 20 {
			fs.logf("inode %d: size %d is past the %d bytes its storage can hold: damaged, refusing to read it (run conquest fsck)", in.ino, size, limit)
		}
		return ErrIO
	}
	return nil
}

// Read reads up to len(dst) bytes at off. It is short only at end of file.
// Holes read as zeros. atime is updated by the relatime rule, unless h
// was opened with O_NOATIME or write-only. A file whose size is past what
// its storage can hold (damage) fails with ErrIO (sizeSane).
func (fs *FS) Read(ino Ino, h Handle, off int64, dst []byte) (n int, err error) {
	if off < 0 {
		return 0, ErrInvalid
	}
	atime := false
	fs.vol.noteRead(ino) // before the data is read (ReadSinceLookup)
	err = fs.read(func() error {
		in, err := fs.regInode(ino)
		if err != nil {
			return err
		}
		if err := fs.sizeSane(in); err != nil {
			return err
		}
		if size := fs.fileSize(in); uint64(off) < size {
			n = int(min(uint64(len(dst)), size-uint64(off)))
			if in.onDisk() {
				if err := fs.readDisk(in, h, uint64(off), dst[:n]); err != nil {
					n = 0
					return err
				}
			} else {
				fs.memRead(in, uint64(off), dst[:n])
			}
		}
		atime = fs.atimeDue(in)
		return nil
	})
	if err != nil {
		return 0, err
	}
	if atime && !fs.vol.noAtime(ino, h) {
		fs.touchAtime(ino)
	}
	return n, nil
}

// Write stores src at off (at the end of file if h was opened O_APPEND;
// fusefs opens no handle O_APPEND, since the kernel places those writes
// itself and writes cached pages back through any handle) and returns the
// bytes written. killPriv clears S_ISUID, and S_ISGID if the
// group-execute bit is set, and removes security.capability (what the
// kernel's FUSE_WRITE_KILL_SUIDGID asks of a server that negotiated
// FUSE_HANDLE_KILLPRIV_V2). A write to a file in the arena commits per
// chunk of up to 1 MiB; a write to a large file is one transaction unless
// the journal runs low. A failure after the first transaction returns the
// bytes written so far with the error that stopped the write (as
// io.Writer: fewer bytes than len(src) only with an error; at the maximum
// file size, ErrFileTooBig). A write whose end crosses the large-file threshold
// moves the file to disk first, in the same transaction; so does one that
// needs arena storage the arena cannot spare (spill.go).
func (fs *FS) Write(ino Ino, h Handle, off int64, src []byte, killPriv bool) (int, error) {
	return fs.writeData(ino, h, off, src, killOf(killPriv), true)
}

// Kill is what a write removes from its file besides storing its data.
type Kill uint8

const (
	// KillSUIDGID clears S_ISUID, and S_ISGID when group-exec is set: what
	// FUSE_WRITE_KILL_SUIDGID asks for a writer without CAP_FSETID, which
	// the kernel sends with KillCaps's removal (Write's killPriv is both).
	KillSUIDGID Kill = 1 << iota
	// KillCaps removes security.capability: what the kernel's
	// file_remove_privs does before any write, by any caller, into its page
	// cache. A write that bypasses the page cache (a FOPEN_DIRECT_IO
	// handle) skips that, so its server removes the capability itself.
	KillCaps
)

// killOf is the Kill of Write's killPriv.
func killOf(killPriv bool) Kill {
	if killPriv {
		return KillSUIDGID | KillCaps
	}
	return 0
}

// WriteKill is Write with what the write removes spelled out (Kill).
func (fs *FS) WriteKill(ino Ino, h Handle, off int64, src []byte, kill Kill) (int, error) {
	return fs.writeData(ino, h, off, src, kill, true)
}

// WriteKeepTimes is Write without the change of mtime and ctime (ctime
// still changes if killPriv clears a mode bit): for pages whose times
// the caller keeps and sets itself. The kernel's writeback cache is such a
// caller: it owns a regular file's times, and its SETATTR of them may
// reach the daemon before the WRITE of the pages they describe, whose own
// times would then replace the kernel's in the arena (seen after a
// remount: every file made by O_TMPFILE, write and linkat).
func (fs *FS) WriteKeepTimes(ino Ino, h Handle, off int64, src []byte, killPriv bool) (int, error) {
	return fs.writeData(ino, h, off, src, killOf(killPriv), false)
}

func (fs *FS) writeData(ino Ino, h Handle, off int64, src []byte, kill Kill, touch bool) (int, error) {
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
	if err := fs.finishCutLocked(ino); err != nil {
		return 0, err
	}
	now := fs.now()
	total := 0
	pieceCap := 0 // disk blocks per piece of a large file's write; 0: diskWrite's own
	// Bytes of a large file's write one Tx may take: all, until a Tx fails
	// with ErrNoSpace; then half of what it tried, ending on a block
	// boundary, down to what lies in one block, so that a write stores as
	// much as fits, in whole blocks, and returns short, as on ext4 (a 1 MiB
	// FUSE request that did not fit whole failed whole).
	diskLimit := len(src)
	for {
		chunk := src[total:]
		wrote, more, onDisk := 0, false, false
		tried, triedAt := 0, uint64(0) // bytes offered to diskWrite, and where
		err := fs.update(func(tx *pram.Tx) (err error) {
			moved := false
			// A move that overflowed the journal (holdMove), or a write to
			// the disk (diskWriteFull).
			defer overflowAs(&err, func() error {
				if moved {
					return errMoveFull
				}
				if onDisk {
					return errDiskWriteFull
				}
				return nil
			})
			in, err := fs.regInode(ino)
			if err != nil {
				return err
			}
			if len(chunk) == 0 {
				return nil
			}
			o := uint64(off) + uint64(total)
			if appendMode {
				o = fs.fileSize(in)
			}
			if o >= fs.maxSize() {
				return ErrFileTooBig
			}
			// First: it can fail for want of arena space (the xattr blob
			// is rewritten), and the data below is copied into the file's
			// blocks without the journal (doc.go: a write that fails with
			// ErrNoSpace changes nothing).
			if kill&KillSUIDGID != 0 {
				mode := in.mode()
				if err := fs.killPrivLocked(tx, in, kill&KillCaps != 0); err != nil {
					return err
				}
				if !touch && in.mode() != mode {
					in.setTime(tx, iCtime, now)
				}
			} else if kill&KillCaps != 0 {
				dropped, err := fs.dropCapLocked(tx, in)
				if err != nil {
					return err
				}
				if !touch && dropped {
					in.setTime(tx, iCtime, now)
				}
			}
			_, held := fs.moveHeld[ino] // moveNow queues it
			if (fs.moveNow(in, o+uint64(len(chunk))) || fs.spill(in, o, o+min(uint64(len(chunk)), writeChunk))) && !held {
				moved = true
				if more, err = fs.toDiskLocked(tx, in); err != nil {
					return err
				}
			}
			if in.onDisk() {
				onDisk = true
				tried, triedAt = min(len(chunk), diskLimit), o
				if bs := fs.ds.BlockSize(); tried < len(chunk) {
					if end := (o + uint64(tried)) / bs * bs; end > o {
						tried = int(end - o)
					}
				}
				if wrote, err = fs.diskWrite(tx, in, o, appendMode, chunk[:tried], pieceCap); err != nil {
					return err
				}
			} else if wrote, err = fs.memWrite(tx, in, o, chunk); err != nil {
				return err
			}
			if touch {
				in.touchMC(tx, now)
			}
			return nil
		})
		if errors.Is(err, errMoveFull) {
			fs.holdMove(ino)
			continue // the same chunk, in the arena
		}
		if errors.Is(err, errDiskWriteFull) {
			if pieceCap = fs.diskWriteFull(pieceCap); pieceCap > 0 {
				continue // the same chunk, in smaller pieces
			}
			err = ErrIO
		}
		if errors.Is(err, ErrNoSpace) && onDisk && triedAt%fs.ds.BlockSize()+uint64(tried) > fs.ds.BlockSize() {
			diskLimit = max(tried/2, 1)
			continue // the same chunk, less of it
		}
		if err == nil && more {
			fs.finishCutAfter(ino)
		}
		if err != nil {
			return total, err
		}
		total += wrote
		if total >= len(src) {
			return total, nil
		}
		if wrote == 0 {
			return total, fmt.Errorf("%w: a write made no progress", ErrIO)
		}
	}
}

// memWrite stores up to one chunk of src at o in an arena file.
func (fs *FS) memWrite(tx *pram.Tx, in inode, o uint64, src []byte) (int, error) {
	c := src[:min(uint64(len(src)), writeChunk, maxMemFileSize-o)]
	end := o + uint64(len(c))
	past := fs.memStoragePast(tx, in, o, &end) // before memReserve adds any
	c = c[:end-o]
	reached, err := fs.memReserve(tx, in, o, end, true)
	if err != nil {
		return 0, err
	}
	if reached <= o {
		return 0, fmt.Errorf("%w: no progress reserving blocks", ErrIO) // memReserve always makes some
	}
	c = c[:reached-o]
	end = reached
	if size := in.size(); o > size {
		fs.memZero(in, size, o)
	}
	fs.memStore(tx, in, o, c, past)
	if end > in.size() {
		in.set64(tx, iSize, end)
	}
	return len(c), nil
}

// killPrivLocked clears S_ISUID, and S_ISGID when group-exec is set (an
// S_ISGID without group-exec marks mandatory locking and stays), as the
// kernel's should_remove_suid. With caps it also removes the
// security.capability attribute, as file_remove_privs does on a write.
func (fs *FS) killPrivLocked(tx *pram.Tx, in inode, caps bool) error {
	m := in.mode()
	nm := m &^ S_ISUID
	if m&0o010 != 0 {
		nm &^= S_ISGID
	}
	in.set32(tx, iMode, nm)
	if !caps {
		return nil
	}
	_, err := fs.dropCapLocked(tx, in)
	return err
}

// dropCapLocked removes in's security.capability attribute, if it has one,
// and reports whether it had.
func (fs *FS) dropCapLocked(tx *pram.Tx, in inode) (bool, error) {
	if in.xattr() == 0 {
		return false, nil
	}
	f, err := fs.findXattr(in, xattrCapability)
	if err != nil || !f.found {
		return false, err
	}
	return true, fs.putXattrs(tx, in, f.entries[:f.start], f.entries[f.end:])
}

// xattrCapability is the file-capabilities attribute a write removes.
const xattrCapability = "security.capability"

// setSizeLocked changes a regular file's size in tx: growing zeroes the
// storage past the old size, shrinking frees whole blocks past the new one.
// If more blocks remain than one Tx may free, the inode goes on the orphan
// list (so a crash finishes the job at the next Open) and more is true:
// the caller commits and calls finishShrinkLocked. Growing past the
// large-file threshold moves the file to disk, at once or at the disk
// commit (moveNow); a large file cut to half the threshold or less moves
// back into the arena.
func (fs *FS) setSizeLocked(tx *pram.Tx, in inode, size uint64) (more bool, err error) {
	old := fs.fileSize(in)
	if size > fs.maxSize() {
		return false, ErrFileTooBig
	}
	if size == old {
		if in.onDisk() && in.u64(iKeepEnd) > size {
			// A truncate to the same size frees what KEEP_SIZE reserved
			// past the end, as on ext4 (a grow keeps it: diskSetSize).
			return fs.diskSetSize(tx, in, size)
		}
		return false, nil
	}
	// Past moveCap the file moves now even if held (moveNow keeps a held
	// file in the arena whatever its size; an arena file cannot hold more
	// than maxMemFileSize: found by a review).
	if size > old && (fs.moveNow(in, size) || fs.wantDisk(in, size) && size > fs.moveCap()) {
		if more, err = fs.toDiskLocked(tx, in); err != nil {
			return false, err
		}
	}
	if !in.onDisk() && size > maxMemFileSize {
		return false, ErrFileTooBig
	}
	if in.onDisk() {
		m, err := fs.diskSetSize(tx, in, size)
		return more || m, err
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

// finishShrinkLocked frees the remaining blocks past the size (for a file
// moved to disk: all its arena blocks; for a large file cut short: its disk
// data past the size), one Tx per batch, then takes a linked inode off the
// orphan list.
// Preconditions: fs.mu held exclusively.
func (fs *FS) finishShrinkLocked(ino Ino) error {
	for {
		more := false
		err := fs.update(func(tx *pram.Tx) error {
			if fs.cutHook != nil {
				if err := fs.cutHook(ino); err != nil {
					return err
				}
			}
			in, err := fs.inode(ino)
			if err != nil {
				return err
			}
			keep := in.size()
			if in.onDisk() {
				keep = 0 // arena blocks left by the move to disk
			}
			more, err = fs.memShrink(tx, in, keep)
			if err != nil || more {
				return err
			}
			if in.onDisk() && in.u64(iDiskCur) != 0 {
				if more, err = fs.diskShrinkStep(tx, in); err != nil || more {
					return err
				}
			}
			if in.nlink() > 0 {
				fs.orphanRemove(tx, in)
			}
			return nil
		})
		if err != nil {
			return err
		}
		if !more {
			delete(fs.cutsLeft, ino) // finished, by whichever caller
			return nil
		}
	}
}

// finishCutLocked finishes the cut of a file that an error stopped after
// its size was published (finishShrinkLocked's later steps: storage past
// the size still held, the inode on the orphan list with links), before
// anything else changes the file: a write or a grow past the size must not
// meet that storage. Open does it after a crash.
// Preconditions: fs.mu held exclusively.
func (fs *FS) finishCutLocked(ino Ino) error {
	in, err := fs.inode(ino)
	if err != nil || !in.isReg() || in.nlink() == 0 || in.flags()&flagOrphan == 0 {
		delete(fs.cutsLeft, ino)
		return nil // the caller's own lookup reports a bad inode
	}
	return fs.finishShrinkLocked(ino)
}

// finishCutAfter runs finishShrinkLocked for a change already published
// (a truncate's new size, a write that moved its file): its failure only
// leaves storage past the size to free, which finishCutLocked retries at
// the file's next change and Open at the next mount, so it is logged, not
// returned (the caller would report a change that was made as failed, and
// the kernel would keep the file's old size).
// Preconditions: fs.mu held exclusively.
func (fs *FS) finishCutAfter(ino Ino) {
	if err := fs.finishShrinkLocked(ino); err != nil {
		fs.logf("%s: inode %d: freeing its storage past its size: %v (tried again at its next change, and at mount)",
			fs.a.Path(), ino, err)
		if fs.cutsLeft == nil {
			fs.cutsLeft = make(map[Ino]struct{})
		}
		fs.cutsLeft[ino] = struct{}{}
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
	if err := fs.finishCutLocked(ino); err != nil {
		return err
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
		fs.finishCutAfter(ino)
	}
	return err
}

// Fallocate allocates (mode 0 or FallocKeepSize), punches a hole
// (FallocPunchHole|FallocKeepSize) or zeroes (FallocZeroRange) the range
// [off, off+length). Other modes are ErrNotSupported. Large ranges take
// several transactions; after an error the blocks already allocated inside
// the file stay, what the steps reserved past the end is given back
// (falloc_pending.go, which Open also runs after a crash), and the size
// is as before (ext4 extends it over what was
// allocated, but the kernel's FUSE module keeps its cached size after a
// failed FALLOCATE, so a size changed then would go unseen, for good with
// the writeback cache).
func (fs *FS) Fallocate(ino Ino, off, length int64, mode uint32) error {
	return fs.fallocate(ino, off, length, mode, true)
}

// FallocateKeepTimes is Fallocate without the change of mtime and ctime,
// for a caller that keeps a file's times and sets them itself: the kernel's
// writeback cache, which stamps them before its FALLOCATE (file_modified)
// and keeps its own values whatever the daemon reports, sending them later
// with a SETATTR, or never when its clock has not moved since the last
// stamp. The daemon's own stamp would then replace the kernel's at the next
// lookup (seen after a remount: 22 of 60 files written, fsync'd and then
// fallocated).
func (fs *FS) FallocateKeepTimes(ino Ino, off, length int64, mode uint32) error {
	return fs.fallocate(ino, off, length, mode, false)
}

func (fs *FS) fallocate(ino Ino, off, length int64, mode uint32, touch bool) error {
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
	if end > fs.maxSize() || end < start {
		return ErrFileTooBig
	}
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return ErrIO
	}
	now := fs.now()
	if fs.fallocPending() {
		// Left by a fallocate whose give-back failed: retry it first.
		if err := fs.undoFallocLocked(); err != nil {
			fs.logf("%v", err)
		}
	}
	if err := fs.finishCutLocked(ino); err != nil {
		return err
	}
	noted := false // this fallocate is recorded (falloc_pending.go)
	for pos := start; ; {
		done, moreFree := false, false
		err := fs.update(func(tx *pram.Tx) error {
			in, err := fs.regInode(ino)
			if err != nil {
				return err
			}
			if pos == start && !punch && !keep && end > fs.fileSize(in) && !fs.fallocPending() {
				// The first step of a fallocate that extends the file:
				// record it, so that what its steps reserve past the
				// size is given back if it never finishes.
				fs.noteFallocLocked(tx, in, start, end)
				noted = true
			}
			defer func() {
				if done && noted {
					clearFalloc(tx) // rolled back with the rest if the Tx fails
				}
			}()
			if !punch && (fs.wantDisk(in, end) || fs.spill(in, pos, end)) {
				// Reserving past the threshold, or more than the arena
				// can spare (spill.go): the file goes to disk (any arena
				// remainder is freed by the next Txs).
				if moreFree, err = fs.toDiskLocked(tx, in); err != nil || moreFree {
					return err // continued after finishShrinkLocked
				}
			}
			if in.onDisk() {
				reached, err := fs.diskFallocate(tx, in, start, pos, end, punch, zero, keep)
				pos, done = reached, reached >= end
				if touch {
					in.touchMC(tx, now) // every mode, as ext4 (file_modified)
				}
				return err
			}
			if punch {
				if touch {
					in.touchMC(tx, now)
				}
				more, err := fs.memPunch(tx, in, start, end)
				done = !more
				return err
			}
			reached, err := fs.memReserve(tx, in, pos, end, false)
			if err != nil {
				return err
			}
			// Its move to the disk must keep the space (reserveOnMove).
			in.set32(tx, iFlags, in.flags()|flagReserved)
			if touch {
				in.touchMC(tx, now) // every mode, as ext4 (file_modified)
			}
			if zero {
				fs.memZero(in, pos, min(reached, in.size()))
			}
			pos = reached
			done = reached >= end
			if !keep && done && end > in.size() {
				// The last step: the size changes only here, so that a
				// crash leaves it as before or after (what earlier steps
				// reserved past it stays, as KEEP_SIZE's does).
				fs.memZero(in, in.size(), end)
				in.set64(tx, iSize, end)
			}
			return nil
		})
		if err == nil && moreFree {
			fs.finishCutAfter(ino)
		}
		if err != nil && noted && fs.fallocPending() {
			// A step failed (ENOSPC) after others reserved space past the
			// end, which the size was to cover (it changes in the last
			// step only): give that back. If that fails too, the record
			// stays for the next fallocate or Open to retry.
			if uerr := fs.undoFallocLocked(); uerr != nil {
				fs.logf("%v", uerr)
			}
		}
		if err != nil || done {
			return err
		}
	}
}

// Fsync makes the file's data and metadata durable. Metadata is already
// committed, so this flushes the arena's dirty pages (msync).
//
// For a large file the order is the ordering point of the disk path: its
// gathered data is written and the disk synced, then its size and segment
// list are committed, then the arena is persisted.
func (fs *FS) Fsync(ino Ino, datasync bool) error {
	if fs.readOnly {
		return nil // nothing to sync, as on a read-only ext4
	}
	disk, diskDirty := false, false
	err := fs.read(func() error {
		in, err := fs.inode(ino)
		disk = err == nil && in.isReg() && in.onDisk()
		diskDirty = fs.ds != nil && fs.ds.SyncPending()
		return err
	})
	if err != nil {
		return err
	}
	if disk {
		return fs.fsyncDisk(ino)
	}
	if diskDirty {
		// Large files' blocks written since the last device sync are in
		// the arena already: the checkpoint must not make them durable
		// before their data is. (Without them, as in a small-file
		// workload, no exclusive lock or transaction is taken.)
		if err := fs.syncDisk(); err != nil {
			return err
		}
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
