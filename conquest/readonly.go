package conquest

// Read-only file systems.
//
// Options.ReadOnly opens images that cannot be written (a read-only file,
// device or file system, an immutable file) for `conquest fsck` without
// --repair, `df`, `stat` and a read-only mount. The arena is mapped
// privately and the disk opened O_RDONLY (pram/readonly.go), so nothing can
// reach either image; above that the core refuses every change before it
// begins: each transaction fails with ErrReadOnly (EROFS), and so does an
// open for writing. Only a file system unmounted cleanly is opened so (its
// recovery would write): there are no orphans to free, no fallocate to
// undo and no unsynced disk blocks to check, and Open skips those steps.
// atime is never updated; fsync and Sync succeed with nothing to do; Close
// writes nothing; the disk commit never runs.

// ReadOnly reports whether the file system was opened with
// Options.ReadOnly.
func (fs *FS) ReadOnly() bool { return fs.readOnly }

// closeReadOnlyLocked is Close for a read-only file system: it releases the
// disk and the arena and writes nothing.
// Preconditions: fs.mu held exclusively, fs not closed.
func (fs *FS) closeReadOnlyLocked() error {
	fs.vol.reset()
	var err error
	if fs.ds != nil {
		err = fs.ds.Close()
	}
	fs.closed = true
	if e := fs.a.Close(); err == nil {
		err = e
	}
	return err
}
