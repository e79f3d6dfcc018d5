package conquest

import (
	"errors"
	"fmt"
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
// threshold is consistent, and is queued again at its next write or open
// (findMove).
//
// The price is arena space: at most moveCap per queued file for at most
// one commit interval while the disk works (moveRetryTicks after a failed
// batch), and the spill reserve still holds (a write that would take it
// moves the file at once).

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
	// moveRetryTicks is how many ticks of the disk commit pass after a
	// failed batch (a failing or full disk) before the queued files are
	// tried again: a disk that keeps failing is not retried every second,
	// and one that recovers gets the files without a new write.
	moveRetryTicks = 10
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
	if _, held := fs.moveHeld[in.ino]; !held && (fs.commit.stop == nil || end > fs.moveCap()) {
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
// hold of fs.mu. A failed batch is logged and its files stay in the arena,
// queued: the ticks leave them alone for moveRetryTicks, then try again.
func (fs *FS) moveQueued() {
	fs.mu.Lock()
	wait := fs.moveWait > 0
	if wait {
		fs.moveWait--
	}
	fs.mu.Unlock()
	if wait {
		return
	}
	for {
		fs.mu.Lock()
		more := fs.moveBatchLogged()
		fs.mu.Unlock()
		if !more {
			return
		}
	}
}

// findMove queues ino, an arena file above the threshold that Open found,
// for the next batch, unless it is queued or held already: an open takes
// FS.mu shared, so the file waits in fs.moveFound until a batch takes the
// lock exclusively (moveBatchLocked). Only a crash, which forgets the
// queue, leaves such a file unqueued (and unheld).
// Preconditions: fs.mu held (shared is enough).
func (fs *FS) findMove(ino Ino) {
	if fs.commit.stop == nil {
		return // nothing would move it: a write moves it at once
	}
	if _, queued := fs.moving[ino]; queued {
		return
	}
	if _, held := fs.moveHeld[ino]; held {
		return
	}
	fs.moveFound.Lock()
	defer fs.moveFound.Unlock()
	if fs.moveFound.inos == nil {
		fs.moveFound.inos = make(map[Ino]struct{})
	}
	fs.moveFound.inos[ino] = struct{}{}
}

// takeFound adds the files that opens found to the queue, and reports
// whether anything is queued.
// Preconditions: fs.mu held exclusively.
func (fs *FS) takeFound() bool {
	fs.moveFound.Lock()
	defer fs.moveFound.Unlock()
	if len(fs.moveFound.inos) > 0 && fs.moving == nil {
		fs.moving = make(map[Ino]struct{})
	}
	for ino := range fs.moveFound.inos {
		fs.moving[ino] = struct{}{}
	}
	clear(fs.moveFound.inos)
	return len(fs.moving) > 0
}

// foundAny reports whether an open found a file to queue.
func (fs *FS) foundAny() bool {
	fs.moveFound.Lock()
	defer fs.moveFound.Unlock()
	return len(fs.moveFound.inos) > 0
}

// moveAllLocked moves every queued file (Close), once: a failed batch ends
// it, whatever moveWait says.
// Preconditions: fs.mu held exclusively.
func (fs *FS) moveAllLocked() {
	for fs.moveBatchLogged() {
	}
}

// moveBatchLogged is moveBatchLocked with its error logged (once while it
// repeats: a full disk fails every tick the same way); more reports files
// left to move. A failed batch starts the wait of moveRetryTicks, unless
// it failed because one file overflows the journal alone (errMoveFull):
// that file has left the queue, and the others go on.
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
	if !more && !errors.Is(err, errMoveFull) {
		fs.moveWait = moveRetryTicks
	}
	return more
}

// moveFits reports whether tx has journal room to move one more file of
// size bytes: twice what the files moved so far (bytes of them, since the
// room was room0) took per byte, and the journal's reserve. The journal a
// file takes grows with the extents it maps, so with the fragmentation of
// the free space (on a fragmented disk a 400 KiB file in 4 KiB blocks took
// 55 KiB, the third of a fixed 32 KiB reserve overflowed a 256 KiB
// journal); the first file of a batch is moved alone, as at a write.
func (fs *FS) moveFits(tx *pram.Tx, room0, bytes, size uint64) bool {
	room := tx.Room()
	need := min(journalReserve, fs.a.Geometry().JournalLen/4)
	if bytes > 0 && room0 > room {
		need += (room0 - room) * 2 * size / bytes
	}
	return room >= need
}

// moveBatchLocked moves queued files to the disk in one transaction, until
// moveBatch bytes or the journal's room (moveFits), and syncs the device
// once before the transaction commits (the ordering point of
// toDiskLocked). Files that no longer need it (deleted, unlinked and still
// open, moved, cut below the threshold) leave the queue; when the batch
// fails, the files stay queued and the error is returned, except that a
// file whose move alone overflows the journal leaves the queue with
// errMoveFull (more then reports the others).
//
// What a move takes of the journal cannot be known in advance: it grows
// with the extents the file maps and with the leaves of the free map and
// the segment list that each insertion shifts (a 400 KiB file in 4 KiB
// blocks on a fragmented disk took 17 KiB to more than 160 KiB). A batch
// that overflows the journal is rolled back and tried again with half as
// many files; a single file that overflows it fails with errMoveFull and
// stays in the arena, held (as at a write: holdMove), until a write
// queues it again.
// Preconditions: fs.mu held exclusively.
func (fs *FS) moveBatchLocked() (more bool, err error) {
	if fs.closed || fs.ds == nil || !fs.takeFound() {
		return false, nil
	}
	queued := make([]Ino, 0, len(fs.moving))
	for ino := range fs.moving {
		queued = append(queued, ino)
	}
	slices.Sort(queued)
	var b moveBatchResult
	for limit := len(queued); ; {
		err = fs.update(func(tx *pram.Tx) (err error) {
			b = moveBatchResult{}
			defer overflowAs(&err, func() error {
				if b.tried <= 1 {
					return errMoveFull // one file: it stays in the arena
				}
				return errBatchFull
			})
			return fs.moveBatchTx(tx, queued, limit, &b)
		})
		if errors.Is(err, errBatchFull) {
			limit = max(b.tried/2, 1)
			continue
		}
		break
	}
	if errors.Is(err, errMoveFull) && b.first != 0 {
		// b.first alone overflowed the journal: it stays in the arena,
		// held (an open does not queue it again, findMove; a write
		// does), and does not stop the others.
		fs.holdMove(b.first)
		delete(fs.moving, b.first)
		return len(fs.moving) > 0, err
	}
	if err != nil {
		return false, err
	}
	for _, ino := range b.done {
		delete(fs.moving, ino)
		delete(fs.moveHeld, ino)
	}
	for _, ino := range b.shrink {
		if err := fs.finishShrinkLocked(ino); err != nil {
			return false, err
		}
	}
	return b.more, nil
}

// moveBatchResult is what one try of a batch's transaction did: tried
// counts the files copied; done holds the files that leave the queue,
// shrink those with arena data left to free after the commit, and more
// reports files left for another batch.
type moveBatchResult struct {
	tried        int
	first        Ino // the first file copied
	done, shrink []Ino
	more         bool
}

// errMoveFull: a write's move of its file to the disk overflowed the journal
// (writeData then holds the file in the arena for the commit: holdMove).
var errMoveFull = fmt.Errorf("%w: a move to the disk overflowed the journal", ErrBusy)

// holdMove keeps an arena file whose move at a write overflowed the journal
// (free space cut into single blocks and a small arena: every block its own
// extent) from moving at its writes: the write goes on in the arena, and
// the file is queued for the commit, which moves it alone if it can (the
// same failure is logged once) and otherwise leaves it in the arena, as a
// failed batch does. Before, the writer got EIO.
// Preconditions: fs.mu held exclusively.
func (fs *FS) holdMove(ino Ino) {
	if fs.moveHeld == nil {
		fs.moveHeld = make(map[Ino]struct{})
	}
	fs.moveHeld[ino] = struct{}{}
	if fs.moving == nil {
		fs.moving = make(map[Ino]struct{})
	}
	fs.moving[ino] = struct{}{}
}

// overflowAs, deferred in an update's function, turns a journal overflow
// there (a pram.ErrTxFull panic) into the error as returns, which update
// rolls back like any other; another panic, or an overflow for which as
// returns nil, goes on (update logs it as damage: ErrIO).
func overflowAs(err *error, as func() error) {
	r := recover()
	if r == nil {
		return
	}
	if e, ok := r.(error); ok && errors.Is(e, pram.ErrTxFull) {
		if to := as(); to != nil {
			*err = to
			return
		}
	}
	panic(r)
}

// errBatchFull: a batch of moves overflowed the journal (moveBatchLocked
// retries with fewer files). It wraps a sentinel that mapErr passes on.
var errBatchFull = fmt.Errorf("%w: a batch of moves overflowed the journal", ErrBusy)

// moveBatchTx is the transaction of moveBatchLocked: it copies at most
// limit of the queued files to the disk, then switches them all (every
// copy before any free: switchToDiskLocked), then syncs the device; b
// records what it did.
func (fs *FS) moveBatchTx(tx *pram.Tx, queued []Ino, limit int, b *moveBatchResult) error {
	var bytes uint64
	var segs []pram.Off
	var ins []inode
	room0 := tx.Room()
	for _, ino := range queued {
		in, err := fs.inode(ino)
		if err != nil || !in.isReg() || in.nlink() == 0 || !fs.wantDisk(in, in.size()) {
			b.done = append(b.done, ino)
			continue
		}
		if len(segs) > 0 && (len(segs) >= limit || bytes+in.size() > moveBatch || !fs.moveFits(tx, room0, bytes, in.size())) {
			b.more = true
			break
		}
		b.tried++
		if b.tried == 1 {
			b.first = ino
		}
		// Fitted: a closed file gets no close to trim it, and the
		// batch's frees are not reused before it commits.
		seg, err := fs.diskCopyLocked(tx, in, true)
		if err != nil {
			return err
		}
		if fs.moveHook != nil {
			fs.moveHook(ino, b.tried)
		}
		b.done = append(b.done, ino)
		ins = append(ins, in)
		bytes += in.size()
		segs = append(segs, seg)
	}
	for i, in := range ins {
		left, err := fs.switchToDiskLocked(tx, in, segs[i])
		if err != nil {
			return err
		}
		if left {
			b.shrink = append(b.shrink, in.ino)
		}
	}
	return fs.ds.FlushFiles(tx, segs)
}
