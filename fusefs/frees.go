package fusefs

import (
	"runtime"
	"sync"
	"time"
)

// STATFS and the requests that free inodes.
//
// close(2) sends RELEASE in the background and returns, and the kernel
// queues the FORGET that drops its last reference to an unlinked file while
// the daemon answers that RELEASE (or, if the RELEASE came first, while it
// serves the UNLINK). A statfs right after close and unlink can therefore
// overtake the request that frees the file and not yet show its space free,
// where ext4 frees it before unlink returns. So STATFS waits for the
// RELEASEs and FORGETs that started before it, and, if one ended or was in
// progress just before it arrived, also for those that start within
// freeQuiet of its arrival or of the end of one it waited for (the FORGET
// that an answered RELEASE queues). It waits for no others, so a statfs
// among other processes' endless creates and deletes still answers soon
// after the frees it found in progress end; and
// when nothing was freed recently, as on a mount that only reads or writes,
// it answers at once.
//
// A FORGET queued before the STATFS is read before it (the kernel hands out
// FORGETs first), possibly by another reader that has not registered it
// yet: with one P that reader waits for the P the STATFS holds, so STATFS
// first yields for freeSpin.

const (
	freeWait  = 50 * time.Millisecond // the longest a STATFS waits
	freeQuiet = time.Millisecond      // how long after a free the next is expected
	freeSpin  = 20 * time.Microsecond // yielding to readers before looking
)

// frees tracks the requests being served that may free an inode.
type frees struct {
	mu      sync.Mutex
	next    uint64
	started map[uint64]time.Time // in progress, by ticket
	lastEnd time.Time
	changed chan struct{} // closed (and replaced) when one ends
}

func (f *frees) begin() uint64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started == nil {
		f.started = make(map[uint64]time.Time)
	}
	f.next++
	f.started[f.next] = time.Now()
	return f.next
}

func (f *frees) end(ticket uint64) {
	f.mu.Lock()
	defer f.mu.Unlock()
	delete(f.started, ticket)
	f.lastEnd = time.Now()
	if f.changed != nil {
		close(f.changed)
		f.changed = nil
	}
}

// inProgress returns the tickets of the frees in progress, and whether a
// free ended within freeQuiet before now.
func (f *frees) inProgress(now time.Time) (tickets []uint64, recent bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for id := range f.started {
		tickets = append(tickets, id)
	}
	return tickets, !f.lastEnd.IsZero() && now.Sub(f.lastEnd) < freeQuiet
}

// ended removes from tickets those that have ended and returns what is
// left and, if any had ended, the time the last free ended.
func (f *frees) ended(tickets []uint64) ([]uint64, time.Time) {
	f.mu.Lock()
	defer f.mu.Unlock()
	left := tickets[:0]
	for _, id := range tickets {
		if _, ok := f.started[id]; ok {
			left = append(left, id)
		}
	}
	if len(left) == len(tickets) {
		return left, time.Time{}
	}
	return left, f.lastEnd
}

// startedBefore reports whether a free that started before t is still in
// progress, and if so returns a channel closed when the next one ends.
func (f *frees) startedBefore(t time.Time) (bool, <-chan struct{}) {
	f.mu.Lock()
	defer f.mu.Unlock()
	for _, s := range f.started {
		if s.Before(t) {
			if f.changed == nil {
				f.changed = make(chan struct{})
			}
			return true, f.changed
		}
	}
	return false, nil
}

// await returns once the frees STATFS must wait for (see above) have
// ended, or after freeWait (timedOut). It reports whether it had to wait.
func (f *frees) await() (waited, timedOut bool) {
	for start := time.Now(); time.Since(start) < freeSpin; {
		runtime.Gosched()
	}
	now := time.Now()
	first, recent := f.inProgress(now)
	cutoff := now
	if recent || len(first) > 0 {
		cutoff = now.Add(freeQuiet)
	}
	deadline := time.NewTimer(freeWait)
	defer deadline.Stop()
	for {
		// The end of a free that was in progress when STATFS arrived
		// may queue another (a RELEASE its FORGET): wait for what
		// starts within freeQuiet of it too.
		var last time.Time
		if first, last = f.ended(first); !last.IsZero() && last.Add(freeQuiet).After(cutoff) {
			cutoff = last.Add(freeQuiet)
		}
		busy, changed := f.startedBefore(cutoff)
		wait := time.Until(cutoff)
		if !busy && wait <= 0 {
			return waited, false
		}
		waited = true
		if wait <= 0 {
			wait = freeWait // only changed or the deadline can end this round
		}
		quiet := time.NewTimer(wait)
		select {
		case <-changed: // nil (blocks) when none is busy
		case <-quiet.C:
		case <-deadline.C:
			timedOut = true
		}
		quiet.Stop()
		if timedOut {
			return waited, true
		}
	}
}
