package fusefs

import (
	"sync"
	"time"

	"bazil.org/fuse"
)

// STATFS and the requests that free inodes.
//
// close(2) sends RELEASE in the background and returns. A statfs right
// after close and unlink can therefore overtake the request that frees the
// file and not yet show its space free, where ext4 frees it before unlink
// returns. So STATFS waits for the RELEASEs and FORGETs in progress when it
// arrives. Those the kernel has queued before it are read before it (FORGETs
// go first, the rest in order), and a reader registers each one here before
// the next request is read (Server.readMu), so a STATFS always finds them.
// (Before session 38 the registration came after the read, and STATFS
// yielded 20 µs to readers that might still hold one unregistered; a
// reader descheduled for longer was missed.)
//
// One free is queued after the STATFS: the FORGET of an unlinked file whose
// RELEASE was still being served when it was unlinked, which the kernel
// queues while the daemon answers that RELEASE. So once the frees it found
// have ended, STATFS waits (awaitForgets) for the FORGET of every unlinked
// inode whose last handle was closed within freeWait, which the core knows
// (conquest.FS.ForgetDue). (When the RELEASE came first, the UNLINK itself
// queues the FORGET, ahead of the STATFS.) Before session 39 it only waited
// for frees that started within 1 ms of a RELEASE's end; under load the
// reader can take longer than that to get to the FORGET (session 38 saw 5
// misses in 320 rounds with -race), and session 40 dropped that wait. It
// waits for nothing else: a statfs among other processes' mkdirs and rmdirs
// answers as soon as the frees it found have ended, and on a mount that
// frees nothing it answers at once.
//
// An OPEN whose read would update atime waits in the same way for the
// RELEASEs in progress when it finds the file open for writing (atimeCache,
// file.go): the RELEASE of a writer's close(2) comes before the OPEN of a
// reader that followed that close.

const freeWait = 50 * time.Millisecond // the longest a STATFS waits

// frees tracks the requests being served that may free an inode.
type frees struct {
	mu      sync.Mutex
	next    uint64
	started map[uint64]freeing // in progress, by ticket
	changed chan struct{}      // closed (and replaced) when one ends
}

type freeing struct {
	start   time.Time
	release bool
}

// register registers req if it may free an inode (a RELEASE of a file, a
// FORGET) and returns its ticket for end, or 0. The reader calls it before
// the next request is read.
func (f *frees) register(req fuse.Request) uint64 {
	if frees, release := freesInode(req); frees {
		return f.begin(release)
	}
	return 0
}

func (f *frees) begin(release bool) uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started == nil {
		f.started = make(map[uint64]freeing)
	}
	f.next++
	f.started[f.next] = freeing{time.Now(), release}
	return f.next
}

func (f *frees) end(ticket uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.started, ticket)
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// startedBefore reports whether a free (only a RELEASE, if releases) that
// started before t is still in progress, and if so returns a channel
// closed when the next one ends.
func (f *frees) startedBefore(t time.Time, releases bool) (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, fr := range f.started {
		if fr.start.Before(t) && (fr.release || !releases) {
			if f.changed == nil {
				f.changed = make(chan struct{})
			}
			return true, f.changed
		}
	}
	return false, nil
}

// await returns once the frees in progress when it is called (only the
// RELEASEs, if releases) have ended, or after freeWait (timedOut). It
// reports whether it had to wait.
func (f *frees) await(releases bool) (waited, timedOut bool) {
	now := time.Now()
	busy, changed := f.startedBefore(now, releases)
	if !busy {
		return false, false // the usual case: no timer
	}
	deadline := time.NewTimer(freeWait)
	defer deadline.Stop()
	for busy {
		select {
		case <-changed:
		case <-deadline.C:
			return true, true
		}
		busy, changed = f.startedBefore(now, releases)
	}
	return true, false
}

// awaitForgets returns once no unlinked inode whose last handle was closed
// within freeWait still waits for its FORGET (conquest.FS.ForgetDue), or
// after freeWait; it reports whether it had to wait. That FORGET is the one
// the kernel queues only when the daemon answers the RELEASE, after the
// STATFS may have been read.
func (s *Server) awaitForgets() bool {
	if !s.fs.ForgetDue(freeWait) {
		return false
	}
	deadline := time.NewTimer(freeWait)
	defer deadline.Stop()
	for {
		ended := s.frees.nextEnd()
		if !s.fs.ForgetDue(freeWait) {
			return true
		}
		poll := time.NewTimer(time.Millisecond) // a FORGET not yet registered
		select {
		case <-ended:
		case <-poll.C:
		case <-deadline.C:
			poll.Stop()
			return true
		}
		poll.Stop()
	}
}

// nextEnd returns a channel closed when the next free in progress, or
// the next one to start, ends.
func (f *frees) nextEnd() <-chan struct{} {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.changed == nil {
		f.changed = make(chan struct{})
	}
	return f.changed
}
