package conquest

import (
	"bytes"
	"errors"
	"fmt"
	"slices"

	"conquest/diskstore"
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
// sync). Each tick moves the queued files in batches with one device sync
// each, made without FS.mu (moveBatch), and Close moves the rest.
// A truncate up to moveCap queues the file as such a write does (on a
// full disk it then succeeds, as on ext4, where the move would fail). A
// write or truncate past moveCap, a spill (spill.go), and a fallocate
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
	// moveBatch bounds the bytes one batch of the tick stages (copies out
	// of the arena) before it writes them and syncs the device once,
	// without fs.mu: eight 1 MiB files share a sync.
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

// moveQueued moves the queued files to the disk (the tick), one batch at
// a time (moveBatch), each file taking FS.mu only to be copied and to be
// switched. A failed batch is logged and its files stay in the arena,
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
	tried := make(map[Ino]struct{})
	for fs.moveBatch(false, tried) {
	}
}

// findMove queues ino, an arena file above the threshold that Open found,
// for the next batch, unless it is queued or held already: an open takes
// FS.mu shared, so the file waits in fs.moveFound until a batch takes the
// lock exclusively (stageBatch). Only a crash, which forgets the
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
	tried := make(map[Ino]struct{})
	for fs.moveBatch(true, tried) {
	}
}

// stagedMove is a queued file whose data is staged for the disk
// (diskstore.Stage).
type stagedMove struct {
	ino Ino
	st  *diskstore.Staged
}

// moveBatch moves queued files to the disk, at most moveBatch bytes of
// them (more than that only for a first file larger than it), and reports
// whether files not in tried are left to move. Files it takes join tried,
// so that a file changed during its move is not taken again by the same
// tick (it stays queued for the next).
//
// Made in one transaction with the copy and the device sync inside, the
// batch held FS.mu for up to 66 ms beside full-speed large-file writes
// (session 30): the copy's pwrites stall behind the host's writeback.
// Now the lock is taken for each file apart, and held only to copy its
// data (memory to memory) and later to switch it:
//
//  1. stage (FS.mu): each file's arena data is copied and disk blocks are
//     reserved for it (diskstore.Stage), nothing in the arena changes;
//  2. without FS.mu, the blocks are written and the device synced once
//     (diskstore.WriteStaged): the ordering point of toDiskLocked;
//  3. adopt (FS.mu, one transaction per file): a file whose arena data
//     still equals the staged copy gets a segment list of those blocks
//     (diskstore.Adopt) and its arena data is freed (switchToDiskLocked).
//     A file that changed meanwhile keeps its arena data and stays
//     queued; a stale entry (deleted, unlinked, moved, cut below the
//     threshold) leaves the queue.
//
// A crash before a file's transaction commits leaves it in the arena and
// its staged blocks free. locked: the caller holds FS.mu (Close), so the
// whole batch runs under it. Errors are logged (moveFailed).
func (fs *FS) moveBatch(locked bool, tried map[Ino]struct{}) (more bool) {
	lock, unlock := fs.mu.Lock, fs.mu.Unlock
	if locked {
		lock, unlock = func() {}, func() {}
	}
	batch, more, err := fs.stageBatch(lock, unlock, tried)
	if err == nil && len(batch) > 0 {
		sts := make([]*diskstore.Staged, len(batch))
		for i, m := range batch {
			sts[i] = m.st
		}
		err = fs.ds.WriteStaged(sts)
	}
	if err == nil && fs.stagedHook != nil {
		fs.stagedHook()
	}
	if err != nil {
		lock()
		for _, m := range batch {
			fs.ds.Unstage(m.st)
		}
		fs.moveFailed(err)
		unlock()
		return false
	}
	var moved []Ino // switched to the disk: their st_blocks changed
	defer func() {
		if fn := fs.onMoved.Load(); fn != nil && !locked {
			for _, ino := range moved {
				(*fn)(ino)
			}
		}
	}()
	for i, m := range batch {
		lock()
		ok, err := fs.adoptLocked(m, i+1)
		if ok {
			moved = append(moved, m.ino)
		}
		fs.ds.Unstage(m.st)
		if err != nil && !errors.Is(err, errMoveFull) {
			for _, rest := range batch[i+1:] {
				fs.ds.Unstage(rest.st)
			}
			fs.moveFailed(err)
			unlock()
			return false
		}
		if err != nil {
			fs.moveFailed(err) // logged; the others go on
		} else {
			fs.moveErr = ""
		}
		unlock()
	}
	return more
}

// stageBatch stages the queued files not in tried, in inode order, until
// moveBatch bytes; more reports files left. A stale entry leaves the queue
// here. It fails only when the first file cannot be staged (a full disk).
func (fs *FS) stageBatch(lock, unlock func(), tried map[Ino]struct{}) (batch []stagedMove, more bool, err error) {
	lock()
	if fs.closed || fs.ds == nil || !fs.takeFound() {
		unlock()
		return nil, false, nil
	}
	queued := make([]Ino, 0, len(fs.moving))
	for ino := range fs.moving {
		if _, ok := tried[ino]; !ok {
			queued = append(queued, ino)
		}
	}
	unlock()
	slices.Sort(queued)
	var bytes uint64
	for _, ino := range queued {
		var st *diskstore.Staged
		full := false
		lock()
		err := func() (err error) {
			defer fs.guard(&err) // a damaged arena: ErrIO, as in a transaction
			in, ok := fs.moveCandidate(ino)
			if !ok {
				return nil
			}
			if len(batch) > 0 && bytes+in.size() > moveBatch {
				full = true
				return nil
			}
			st, err = fs.ds.Stage(uint64(ino), in.size(), func(dst []byte) { fs.memRead(in, 0, dst) })
			return err
		}()
		unlock()
		switch {
		case full:
			return batch, true, nil
		case err != nil && len(batch) == 0:
			return nil, false, err
		case err != nil:
			return batch, true, nil
		case st == nil:
			continue // left the queue
		}
		tried[ino] = struct{}{}
		batch = append(batch, stagedMove{ino, st})
		bytes += st.Size()
	}
	return batch, false, nil
}

// moveCandidate returns ino's inode if it still needs to move: a linked
// arena regular file above the threshold (or an unlinked one, for
// moveForSpace). Otherwise ino leaves the queue, as does a file whose size
// is damaged (sizeSane: staging it would allocate that size; an outside
// review's 64 GiB size killed the daemon).
// Preconditions: fs.mu held exclusively.
func (fs *FS) moveCandidate(ino Ino) (inode, bool) {
	in, err := fs.inode(ino)
	if err != nil || !in.isReg() || in.nlink() == 0 && !fs.moveAll || !fs.wantDisk(in, in.size()) ||
		fs.sizeSane(in) != nil {
		delete(fs.moving, ino)
		delete(fs.moveHeld, ino)
		return inode{}, false
	}
	return in, true
}

// adoptLocked switches m's file to its staged blocks, in one transaction,
// if it still needs the move and its data is still what was staged (moved
// reports that it did); n is its place in the batch (moveHook). A file
// whose switch overflows the journal alone stays in the arena, held
// (holdMove: an open does not queue it again, findMove; a write does),
// with errMoveFull.
// Preconditions: fs.mu held exclusively; m.st written (WriteStaged).
func (fs *FS) adoptLocked(m stagedMove, n int) (moved bool, err error) {
	var in inode
	same := false
	err = func() (err error) {
		defer fs.guard(&err) // a damaged arena: ErrIO, as in a transaction
		var ok bool
		if in, ok = fs.moveCandidate(m.ino); ok {
			same = fs.memEqual(in, m.st.Data())
		}
		return nil
	}()
	if err != nil || !same {
		return false, err // gone, or changed: queued still, for the next tick
	}
	shrink := false
	fs.adopting = true // the update below must not start a batch (moveForSpace)
	defer func() { fs.adopting = false }()
	err = fs.update(func(tx *pram.Tx) (err error) {
		defer overflowAs(&err, func() error { return errMoveFull })
		seg, err := fs.ds.Adopt(tx, m.st)
		if err != nil {
			return err
		}
		if err := fs.reserveOnMove(tx, in, seg); err != nil {
			return err
		}
		if fs.moveHook != nil {
			fs.moveHook(m.ino, n)
		}
		shrink, err = fs.switchToDiskLocked(tx, in, seg)
		return err
	})
	if errors.Is(err, errMoveFull) {
		fs.holdMove(m.ino)
		delete(fs.moving, m.ino)
		return false, err
	}
	if err != nil {
		return false, err
	}
	delete(fs.moving, m.ino)
	delete(fs.moveHeld, m.ino)
	if shrink {
		fs.finishCutAfter(m.ino) // the arena blocks it left
	}
	return true, nil
}

// memEqual reports whether an arena file holds exactly data.
// Preconditions: fs.mu held.
func (fs *FS) memEqual(in inode, data []byte) bool {
	if in.size() != uint64(len(data)) {
		return false
	}
	var buf [64 << 10]byte
	for off := 0; off < len(data); off += len(buf) {
		n := min(len(buf), len(data)-off)
		fs.memRead(in, uint64(off), buf[:n])
		if !bytes.Equal(buf[:n], data[off:off+n]) {
			return false
		}
	}
	return true
}

// moveFailed logs a failed move (once while it repeats: a full disk fails
// every tick the same way) and, unless one file overflowed the journal
// alone (errMoveFull: that file has left the queue, and the others go
// on), starts the wait of moveRetryTicks.
// Preconditions: fs.mu held exclusively.
func (fs *FS) moveFailed(err error) {
	if msg := err.Error(); msg != fs.moveErr {
		fs.moveErr = msg
		fs.logf("%s: moving files above the large-file threshold to the disk: %v", fs.diskPath, err)
	}
	if !errors.Is(err, errMoveFull) {
		fs.moveWait = moveRetryTicks
	}
}

// errMoveFull: a move of a file to the disk overflowed the journal (a
// write's: writeData then holds the file in the arena for the commit,
// holdMove; or the commit's own).
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

// SetMovedHook sets fn (nil: none) to be told of each file the periodic
// disk commit has moved to the disk, after the move, from the commit's
// goroutine and without FS.mu held: its data now lives on the disk, so its
// st_blocks changed (the FUSE adapter drops the kernel's cached
// attributes, which would otherwise show the arena's count until they were
// fetched again). fn must not call back into the move. Moves made by Close
// are not told.
func (fs *FS) SetMovedHook(fn func(Ino)) {
	if fn == nil {
		fs.onMoved.Store(nil)
		return
	}
	fs.onMoved.Store(&fn)
}
