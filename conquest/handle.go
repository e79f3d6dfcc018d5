package conquest

import "sync"

// volatile is the per-mount state that does not survive a restart: kernel
// lookup references, open counts and open handles. After a crash nothing is
// open, which is why Open frees every orphan.
type volatile struct {
	mu      sync.Mutex // taken after FS.mu, or alone; never held across a Tx
	refs    map[Ino]uint64
	opens   map[Ino]uint32
	handles map[Handle]openFile
	next    Handle
}

type openFile struct {
	ino   Ino
	flags uint32
	dir   bool
}

func (v *volatile) init() {
	v.refs = make(map[Ino]uint64)
	v.opens = make(map[Ino]uint32)
	v.handles = make(map[Handle]openFile)
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
	v.handles[h] = openFile{ino: ino, flags: flags, dir: dir}
	v.opens[ino]++
	return h
}

// handle returns the open file for h, if h is open on ino.
func (v *volatile) handle(ino Ino, h Handle) (openFile, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.handles[h]
	return f, ok && f.ino == ino
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
	} else {
		v.refs[ino] = r - n
		return false
	}
	return v.opens[ino] == 0
}

// release closes handle h and reports whether its inode is now unused.
func (v *volatile) release(ino Ino, h Handle) (Ino, bool) {
	v.mu.Lock()
	defer v.mu.Unlock()
	f, ok := v.handles[h]
	if !ok {
		return ino, false
	}
	delete(v.handles, h)
	ino = f.ino
	if v.opens[ino] <= 1 {
		delete(v.opens, ino)
		return ino, v.refs[ino] == 0
	}
	v.opens[ino]--
	return ino, false
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
	if flags&O_TRUNC != 0 && flags&O_ACCMODE != 0 {
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
		if in.nlink() == 0 && !fs.vol.inUse(ino) {
			return ErrStale
		}
		h = fs.vol.open(ino, flags, false)
		return nil
	})
	return h, err
}

// Release closes a handle from Open or Create. The last close of an unlinked
// file with no kernel references frees it.
func (fs *FS) Release(ino Ino, h Handle) {
	if ino, unused := fs.vol.release(ino, h); unused {
		fs.reapIfUnused(ino)
	}
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
