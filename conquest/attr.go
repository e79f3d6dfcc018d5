package conquest

import (
	"conquest/pram"
)

// GetAttr returns the inode's attributes.
func (fs *FS) GetAttr(ino Ino) (Attr, error) {
	var at Attr
	err := fs.read(func() error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		at = in.attr()
		return nil
	})
	return at, err
}

// SetAttr applies chmod, chown, truncate and utimens as in.Valid says, in
// one transaction: a large truncate frees the rest in further ones, whose
// failure no longer undoes or fails the truncate (finishCutAfter; its one
// device write, the new last block's tail, comes first). Any
// change sets ctime to now unless SetCtime gives it. SetSize sets mtime
// too, even to the same size (as ext4). SetKeepTimes turns both off for a
// regular file: its mtime and ctime change only as SetMtime and SetCtime
// give them (the kernel's writeback cache keeps a regular file's times
// itself and sends them when they change; a truncate(2) to the size the
// file already has changes neither there). Permission checks are the
// kernel's (default_permissions).
func (fs *FS) SetAttr(ino Ino, in SetAttr, c Cred) (Attr, error) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return Attr{}, ErrIO
	}
	if in.Valid&SetSize != 0 {
		if err := fs.finishCutLocked(ino); err != nil {
			return Attr{}, err
		}
	}
	now := fs.now()
	more := false
	var at Attr
	err := fs.update(func(tx *pram.Tx) error {
		n, err := fs.inode(ino)
		if err != nil {
			return err
		}
		changed := in.Valid&SetTouch != 0
		keep := in.Valid&SetKeepTimes != 0 && n.typ() == S_IFREG
		if in.Valid&SetSize != 0 {
			switch n.typ() {
			case S_IFREG:
			case S_IFDIR:
				return ErrIsDir
			default:
				return ErrInvalid
			}
			// As ext4: mtime and ctime change even when the size does
			// not. The kernel sends open(O_TRUNC) of an empty file as this
			// same request, and POSIX wants its times marked.
			if !keep {
				n.setTime(tx, iMtime, now)
			}
			changed = true
			if more, err = fs.setSizeLocked(tx, n, in.Size); err != nil {
				return err
			}
		}
		if in.Valid&SetMode != 0 {
			n.set32(tx, iMode, n.typ()|in.Mode&0o7777)
			changed = true
		}
		if in.Valid&SetUID != 0 {
			n.set32(tx, iUid, in.Uid)
			changed = true
		}
		if in.Valid&SetGID != 0 {
			n.set32(tx, iGid, in.Gid)
			changed = true
		}
		if in.Valid&SetKillSUIDGID != 0 {
			if err := fs.killPrivLocked(tx, n, true); err != nil {
				return err
			}
			changed = true
		}
		switch {
		case in.Valid&SetAtimeNow != 0:
			n.setTime(tx, iAtime, now)
			changed = true
		case in.Valid&SetAtime != 0:
			n.setTime(tx, iAtime, normTime(in.Atime))
			changed = true
		}
		switch {
		case in.Valid&SetMtimeNow != 0:
			n.setTime(tx, iMtime, now)
			changed = true
		case in.Valid&SetMtime != 0:
			n.setTime(tx, iMtime, normTime(in.Mtime))
			changed = true
		}
		if in.Valid&SetCtime != 0 {
			n.setTime(tx, iCtime, normTime(in.Ctime))
		} else if changed && !keep {
			n.setTime(tx, iCtime, now)
		}
		at = n.attr()
		return nil
	})
	if err == nil && more {
		fs.finishCutAfter(ino)
		err = fs.update(func(tx *pram.Tx) error {
			n, err := fs.inode(ino)
			at = n.attr()
			return err
		})
	}
	return at, err
}

// normTime keeps nanoseconds in range.
func normTime(t Timespec) Timespec {
	if t.Nsec >= 1e9 {
		t.Sec += int64(t.Nsec / 1e9)
		t.Nsec %= 1e9
	}
	return t
}

// SetNoAtime switches atime updates off or back on (relatime) while the
// file system is open: a remount that makes the mount read-only or noatime
// says so through the adapter (fusefs, NoAtimeXattr).
func (fs *FS) SetNoAtime(on bool) { fs.noAtime.Store(on || fs.readOnly) }

// atimeDue applies the relatime rule: update atime if it is not later than
// mtime or ctime, or is at least 24 hours old.
// Preconditions: fs.mu held (shared is enough).
func (fs *FS) atimeDue(in inode) bool {
	if fs.noAtime.Load() {
		return false
	}
	at := in.time(iAtime)
	if !at.after(in.time(iMtime)) || !at.after(in.time(iCtime)) {
		return true
	}
	return fs.now().Sec-at.Sec >= 24*3600
}

func (t Timespec) after(u Timespec) bool {
	return t.Sec > u.Sec || t.Sec == u.Sec && t.Nsec > u.Nsec
}

// touchAtime sets atime to now after a read, if still due (it takes the
// exclusive lock, so it rechecks). Failures only lose the atime update.
func (fs *FS) touchAtime(ino Ino) {
	fs.mu.Lock()
	defer fs.mu.Unlock()
	if fs.closed {
		return
	}
	now := fs.now()
	_ = fs.update(func(tx *pram.Tx) error {
		in, err := fs.inode(ino)
		if err != nil || !fs.atimeDue(in) {
			return err
		}
		in.setTime(tx, iAtime, now)
		return nil
	})
}
