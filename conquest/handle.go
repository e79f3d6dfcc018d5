package conquest

import (
	"sync"
	"time"

	"conquest/diskstore"
)

// volatile is the per-mount state that does not survive a restart: kernel
// lookup references, open counts, open handles (with their readahead state)
// and the large files written since their last close. After a crash nothing
// is open, which is why Open frees every orphan.
type volatile struct {
	mu      sync.Mutex // taken after FS.mu, or alone; never held across a Tx
	refs    map[Ino]uint64
	opens   map[Ino]uint32
	writers map[Ino]uint32 // handles open for writing (O_WRONLY, O_RDWR), by inode
	rdwr    map[Ino]uint32 // handles open O_RDWR (which a shared writable mapping needs), by inode
	handles map[Handle]*openFile
	dirty   map[Ino]bool // disk files to flush and trim at the last close
	next    Handle

	// read holds the inodes a Read was served of since the kernel's
	// references to them began (ReadSinceLookup); the forget of the last
	// reference clears it, under this lock, so a lookup after it starts
	// afresh.
	read map[Ino]bool

	// unlinked holds the inodes whose last link went while they were in
	// use (dropLocked), and forgetDue those of them whose last handle
	// has been closed while the kernel still references them, with the
	// time of that close: the kernel frees them with a FORGET it queues
	// only when the daemon answers that RELEASE (see ForgetDue).
	unlinked  map[Ino]bool
	forgetDue map[Ino]time.Time
}

type openFile struct {
	ino   Ino
	flags uint32
	dir   bool
	ra    *diskstore.Readahead // created by the first read of a disk file
}

func (v *volatile) init() {
	v.refs = make(map[Ino]uint64)
	v.opens = make(map[Ino]uint32)
	v.writers = make(map[Ino]uint32)
	v.rdwr = make(map[Ino]uint32)
	v.handles = make(map[Handle]*openFile)
	v.dirty = make(map[Ino]bool)
	v.read = make(map[Ino]bool)
	v.unlinked = make(map[Ino]bool)
	v.forgetDue = make(map[Ino]time.Time)
}

func (v *volatile) reset() {
	v.mu.Lock()
	v.init()
	v.mu.Unlock()
}

// ref adds one kernel reference.
func (v *volatile) ref(ino Ino) {
	v.mu.Lock()
	v.refs[ino]++
	v.mu.Unlock()
}

// open records an open file and returns its handle.
func (v *volatile) open(ino Ino, flags uint32, dir bool) Handle {
	v.mu.Lock()
	defer v.mu.Unlock()
	v.next++
	h := v.next
	v.handles[h] = &openFile{ino: ino, flags: flags, dir: dir}
	v.opens[ino]++
	delete(v.forgetDue, ino) // open again (through /proc/PID/fd)
	if !dir && flags&O_ACCMODE != 0 {
		v.writers[ino]++
	}
	if !dir && flags&O_ACCMODE == O_RDWR {
		v.rdwr[ino]++
	}
	return h
}

// handle returns the open file for h, if h is open on ino.
func (v *volatile) handle(ino Ino, h Handle) (openFile, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.handles[h]
	if !ok || f.ino != ino {
		return openFile{}, false
	}
	return *f, true
}

// noAtime reports whether reads through h leave ino's atime alone: h is
// open on ino with O_NOATIME, or write-only. No read(2) goes through a
// write-only handle; what does is the kernel's own: with the writeback
// cache, a write of part of a page it has not cached reads that page
// first through the writer's handle, and `echo >> f` does not read f.
func (v *volatile) noAtime(ino Ino, h Handle) bool {
	f, ok := v.handle(ino, h)
	return ok && (f.flags&O_NOATIME != 0 || f.flags&O_ACCMODE == O_WRONLY)
}

// readahead returns the readahead state of handle h on ino, creating it;
// nil if h is not open on ino.
func (v *volatile) readahead(ino Ino, h Handle, ds *diskstore.Store) *diskstore.Readahead {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.handles[h]
	if !ok || f.ino != ino || f.dir {
		return nil
	}
	if f.ra == nil {
		f.ra = ds.NewReadahead()
	}
	return f.ra
}

// markDirty notes that a disk file has data to flush or preallocation to
// trim at its last close.
func (v *volatile) markDirty(ino Ino) {
	v.mu.Lock()
	v.dirty[ino] = true
	v.mu.Unlock()
}

// takeDirty returns and forgets the dirty set.
func (v *volatile) takeDirty() map[Ino]bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	d := v.dirty
	v.dirty = make(map[Ino]bool)
	return d
}

// noteRead records, before a Read of ino reads its data, that the kernel
// (which references ino) may cache what the read returns.
func (v *volatile) noteRead(ino Ino) {
	v.mu.Lock()
	if v.refs[ino] > 0 && !v.read[ino] {
		v.read[ino] = true
	}
	v.mu.Unlock()
}

// ReadSinceLookup reports whether a Read of ino was served since the
// kernel's references to it began (its first LOOKUP or create after it had
// none): whether the kernel may hold pages of ino that it read. The FORGET
// of the last reference ends it; the kernel has dropped the inode, and its
// pages, by then.
func (fs *FS) ReadSinceLookup(ino Ino) bool {
	v := &fs.vol
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.read[ino]
}

// inUse reports whether the kernel still references ino or has it open.
func (v *volatile) inUse(ino Ino) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.refs[ino] > 0 || v.opens[ino] > 0
}

// forget drops n kernel references and reports whether ino is now unused.
func (v *volatile) forget(ino Ino, n uint64) bool {
	v.mu.Lock()
	defer v.mu.Unlock()
	r, ok := v.refs[ino]
	if !ok {
		return false
	}
	if n >= r {
		delete(v.refs, ino)
		delete(v.read, ino)
	} else {
		v.refs[ino] = r - n
		return false
	}
	delete(v.forgetDue, ino)
	if v.opens[ino] != 0 {
		return false
	}
	delete(v.unlinked, ino)
	return true
}

// markUnlinked notes that ino lost its last link while in use.
func (v *volatile) markUnlinked(ino Ino) {
	v.mu.Lock()
	v.unlinked[ino] = true
	v.mu.Unlock()
}

// release closes handle h. It reports the inode, whether it is now unused
// (no reference, not open), whether it was written since its last close
// and this was its last handle (flush and trim it), and the handle's
// readahead state to close.
func (v *volatile) release(ino Ino, h Handle) (_ Ino, unused, flush bool, ra *diskstore.Readahead) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.handles[h]
	if !ok {
		return ino, false, false, nil
	}
	delete(v.handles, h)
	ino, ra = f.ino, f.ra
	if !f.dir && f.flags&O_ACCMODE != 0 {
		decCount(v.writers, ino)
	}
	if !f.dir && f.flags&O_ACCMODE == O_RDWR {
		decCount(v.rdwr, ino)
	}
	if v.opens[ino] <= 1 {
		delete(v.opens, ino)
		flush = v.dirty[ino]
		delete(v.dirty, ino)
		switch {
		case v.refs[ino] == 0:
			delete(v.unlinked, ino)
		case v.unlinked[ino]:
			v.forgetDue[ino] = time.Now()
		}
		return ino, v.refs[ino] == 0, flush, ra
	}
	v.opens[ino]--
	return ino, false, false, ra
}

// OpenForWrite reports whether ino has a handle open for writing other
// than except (0: none excepted). The FUSE adapter asks it before it drops
// a page of ino's from the kernel's cache: in write-through mode the
// kernel copies a write into its cached pages before the WRITE reaches
// the core, so a page dropped in between and read back from the core
// would hold the data from before that write, and keep it after the
// write returns.
func (fs *FS) OpenForWrite(ino Ino, except Handle) bool {
	v := &fs.vol
	v.mu.Lock()
	defer v.mu.Unlock()
	n := v.writers[ino]
	if f, ok := v.handles[except]; ok && f.ino == ino && !f.dir && f.flags&O_ACCMODE != 0 {
		n--
	}
	return n > 0
}

// decCount takes one from ino's count in m, dropping the entry at zero.
func decCount(m map[Ino]uint32, ino Ino) {
	if m[ino] <= 1 {
		delete(m, ino)
	} else {
		m[ino]--
	}
}

// OpenReadWrite reports whether ino has a handle open for reading and
// writing (O_RDWR). Only through such a handle can a process map the file
// shared and writable (mmap wants read access), and only such a mapping
// holds data in the kernel's page cache that the core has not seen, in
// write-through mode: a write(2) reaches the core before it returns. The
// mapping keeps its handle open until it is unmapped, and the unmap writes
// the dirty pages back before the handle's release reaches the core.
func (fs *FS) OpenReadWrite(ino Ino) bool {
	v := &fs.vol
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.rdwr[ino] > 0
}

// ForgetDue reports whether the last handle of an unlinked inode that the
// kernel still references was closed within window before now. The kernel
// then frees the inode with a FORGET that it queues only when the daemon
// answers that close's RELEASE, so a STATFS (or anything else) can be read
// before it: the FUSE adapter's STATFS waits for such FORGETs, as ext4
// shows a file's space free once close and unlink have returned. Entries
// older than window are dropped: an unlinked directory that a process
// keeps as its working directory is referenced until the process leaves
// it. (A link count restored by a Tx that then aborted can leave an entry
// for a linked inode; it only makes a STATFS wait window once.)
func (fs *FS) ForgetDue(window time.Duration) bool {
	v := &fs.vol
	v.mu.Lock()
	defer v.mu.Unlock()
	due := false
	for ino, t := range v.forgetDue {
		if time.Since(t) < window {
			due = true
		} else {
			delete(v.forgetDue, ino)
		}
	}
	return due
}

// Forget drops n kernel references to ino (FUSE FORGET). When an unlinked
// inode loses its last reference and is not open, it is freed.
func (fs *FS) Forget(ino Ino, n uint64) {
	if ino == RootIno || !fs.vol.forget(ino, n) {
		return
	}
	fs.reapIfUnused(ino)
}

// Open opens a regular file (or any non-directory the kernel asks for) and
// returns a handle. O_TRUNC truncates to zero, as with atomic_o_trunc.
func (fs *FS) Open(ino Ino, flags uint32) (Handle, error) {
	if flags&O_TRUNC != 0 && flags&O_ACCMODE != 0 && !fs.readOnly {
		err := fs.truncateOp(ino)
		if err != nil {
			return 0, err
		}
	}
	var h Handle
	err := fs.read(func() error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		if in.isDir() && flags&O_ACCMODE != 0 {
			return ErrIsDir
		}
		if fs.readOnly && flags&O_ACCMODE != 0 {
			return ErrReadOnly
		}
		if in.nlink() == 0 && !fs.vol.inUse(ino) {
			return ErrStale
		}
		if in.isReg() && fs.wantDisk(in, in.size()) {
			fs.findMove(ino) // above the threshold and still in the arena
		}
		h = fs.vol.open(ino, flags, false)
		return nil
	})
	return h, err
}

// Release closes a handle from Open or Create. The last close of an unlinked
// file with no kernel references frees it.
// A large file written through any handle is flushed to disk and its
// preallocation trimmed at its last close (errors are logged; the data
// stays buffered for fsync or unmount); trimmed reports that this close
// did so, which changes the file's st_blocks.
func (fs *FS) Release(ino Ino, h Handle) (trimmed bool) {
	ino, unused, flush, ra := fs.vol.release(ino, h)
	if ra != nil {
		ra.Close()
	}
	if fs.readOnly {
		return false // nothing was written, nothing can be freed
	}
	if flush {
		fs.releaseDisk(ino)
	}
	if unused {
		fs.reapIfUnused(ino)
	}
	return flush
}

// OpenDir opens a directory for ReadDir.
func (fs *FS) OpenDir(ino Ino) (Handle, error) {
	var h Handle
	err := fs.read(func() error {
		if _, err := fs.dirInode(ino); err != nil {
			return err
		}
		h = fs.vol.open(ino, 0, true)
		return nil
	})
	return h, err
}

// ReleaseDir closes a handle from OpenDir.
func (fs *FS) ReleaseDir(ino Ino, h Handle) { fs.Release(ino, h) }
