package conquest

import (
	"slices"

	"conquest/pram"
)

// Moving a file that crossed the large-file threshold at the disk commit
// rather than at the write that crossed it.
//
// A move to the disk (toDiskLocked) is one transaction: the file's data is
// written to new disk blocks, the device is synced, and only then does the
// arena point at the blocks and free its copy, so that a crash finds the
// old copy or the new one. Made at the write that crosses the threshold,
// that device sync stalled the writer on every such file (8.4 ms of the
// 18 ms that a 1.01 MB file written in 8 KiB requests and fsynced took on
// the VM's disk in session 26; ext4's whole fsync took 9 ms), and a second
// sync followed at the file's fsync.
//
// So while the periodic disk commit runs (Options.DiskCommit, as on every
// mount), a write that makes an arena file cross the threshold leaves it
// in the arena as long as it ends within moveCap, and queues it
// (fs.moving). Until it moves the file is an ordinary arena file that is
// larger than the threshold: it is read and written there, and its fsync
// makes it durable as the arena makes every small file durable (no device
// sync). Each tick moves the queued files, several per transaction with
// one device sync per batch (moveBatchLocked), and Close moves the rest.
// A write past moveCap, a spill (spill.go), and a truncate or fallocate
// across the threshold move a file at once, as before; so does every
// write without the periodic commit (Options.DiskCommit 0, as in most core
// tests). A crash forgets the queue: a file left in the arena above the
// threshold is consistent, and is queued again at its next write.
//
// The price is arena space: at most moveCap per queued file for at most
// one commit interval, and the spill reserve still holds (a write that
// would take it moves the file at once).

const (
	// moveSlack is how far past the threshold a queued file may grow in
	// the arena (at most the threshold itself): a file that keeps growing
	// moves at once there, in one sync, as every large file used to at the
	// threshold.
	moveSlack = 4 << 20
	// moveBatch bounds the bytes one transaction of the tick moves, and so
	// how long it holds fs.mu across a device sync (about 0.1 s for 8 MiB
	// on a disk that writes 70 MiB/s): eight 1 MiB files share a sync.
	moveBatch = 8 << 20
)

// moveCap is the size up to which a file that crossed the threshold may
// wait in the arena for the disk commit: twice the default threshold.
func (fs *FS) moveCap() uint64 { return fs.threshold + min(fs.threshold, moveSlack) }

// moveNow reports whether an arena file about to hold data up to end must
// move to the disk now: it crosses the threshold (or is above it already)
// and either no periodic commit runs or end is past moveCap. A file that
// may wait is queued for the commit.
// Preconditions: fs.mu held exclusively.
func (fs *FS) moveNow(in inode, end uint64) bool {
	if !fs.wantDisk(in, max(end, in.size())) {
		return false
	}
	if fs.commit.stop == nil || end > fs.moveCap() {
		return true
	}
	if fs.moving == nil {
		fs.moving = make(map[Ino]struct{})
	}
	// Kept if tx rolls back: the commit checks each file again.
	fs.moving[in.ino] = struct{}{}
	return false
}

// moveQueued moves the queued files to the disk (the tick), one batch per
// hold of fs.mu. A failed batch is logged and the files stay in the arena
// until their next write queues them again.
func (fs *FS) moveQueued() {
	for {
		fs.mu.Lock()
		more := fs.moveBatchLogged()
		fs.mu.Unlock()
		if !more {
			return
		}
	}
}

// moveAllLocked moves every queued file (Close).
// Preconditions: fs.mu held exclusively.
func (fs *FS) moveAllLocked() {
	for fs.moveBatchLogged() {
	}
}

// moveBatchLogged is moveBatchLocked with its error logged (once while it
// repeats: a full disk fails every tick the same way); more reports files
// left to move.
func (fs *FS) moveBatchLogged() (more bool) {
	more, err := fs.moveBatchLocked()
	if err == nil {
		fs.moveErr = ""
		return more
	}
	if msg := err.Error(); msg != fs.moveErr {
		fs.moveErr = msg
		fs.logf("%s: moving files above the large-file threshold to the disk: %v", fs.diskPath, err)
	}
	return false
}

// moveBatchLocked moves queued files to the disk in one transaction, until
// moveBatch bytes or the journal's room, and syncs the device once before
// the transaction commits (the ordering point of toDiskLocked). Files that
// no longer need it (deleted, unlinked and still open, moved, cut below the
// threshold) leave the queue; when the batch fails, every file does, and
// the error is returned.
// Preconditions: fs.mu held exclusively.
func (fs *FS) moveBatchLocked() (more bool, err error) {
	if fs.closed || fs.ds == nil || len(fs.moving) == 0 {
		return false, nil
	}
	queued := make([]Ino, 0, len(fs.moving))
	for ino := range fs.moving {
		queued = append(queued, ino)
	}
	slices.Sort(queued)
	var done, shrink []Ino
	err = fs.update(func(tx *pram.Tx) error {
		done, shrink, more = done[:0], shrink[:0], false
		var bytes uint64
		var segs []pram.Off
		for _, ino := range queued {
			in, err := fs.inode(ino)
			if err != nil || !in.isReg() || in.nlink() == 0 || !fs.wantDisk(in, in.size()) {
				done = append(done, ino)
				continue
			}
			if len(segs) > 0 && (bytes+in.size() > moveBatch || fs.journalLow(tx)) {
				more = true
				break
			}
			// Fitted: a closed file gets no close to trim it, and the
			// batch's frees are not reused before it commits.
			left, err := fs.toDiskUnsyncedLocked(tx, in, true)
			if err != nil {
				return err
			}
			done = append(done, ino)
			if left {
				shrink = append(shrink, ino)
			}
			bytes += in.size()
			segs = append(segs, in.seg())
		}
		return fs.ds.FlushFiles(tx, segs)
	})
	if err != nil {
		// The files stay in the arena, and a later write queues them
		// again: a failing disk is not retried every tick.
		clear(fs.moving)
		return false, err
	}
	for _, ino := range done {
		delete(fs.moving, ino)
	}
	for _, ino := range shrink {
		if err := fs.finishShrinkLocked(ino); err != nil {
			return false, err
		}
	}
	return more, nil
}
