package diskstore

import "errors"

// Background syncs (DurableOnProcessCrash).
//
// Write syncs the device every Options.SyncBytes to bound what a power
// failure can lose, the unsynced lists and the quarantine. A sync takes as
// long as the disk needs to write what is dirty, and the writer used to
// wait for it inside its request: a sequential writer through FUSE spent
// more time in those syncs than in everything else it did. Now Write starts
// the sync on a goroutine and goes on; the sync's result is applied by the
// next store call that holds the core's write lock (settle), never by the
// goroutine, which touches nothing but the device.
//
// The epoch word (stats record +32) then has two parts: its low 63 bits
// are the syncs completed, E, and its top bit (epochStarted) says that a
// sync started at E may be in flight. Records and quarantine extents made
// while it is in flight are tagged E+1 (tag); everything tagged E was
// written before the sync started. A record is stale when its tag is below
// E, as before; the sync's completion sets E+1 and clears the bit, which
// makes exactly what it covered stale. A crash or a power failure with the
// bit set leaves both tags live, and Open verifies both.
//
// One case must wait: a write that replaces a block whose record is tagged
// E while the sync is in flight. The record describes the contents at the
// sync before, and the block's current contents become the synced ones only
// when the flight lands; a record made now could describe neither. So
// noteUnsynced waits for the sync (settle(true)), after which the record is
// stale and the block an ordinary synced one; blocks written in place
// (appends) need a record of the current tag, so they take the same path.
// Sequential writes of new data never meet this: it costs a wait per
// SyncBytes at most to a writer that rewrites what it has just written, the
// wait it always had.
//
// A sync that fails in the background is retried at once in the foreground
// (settle): on Linux a failed fsync may already have dropped the dirty pages
// it failed to write, and the next one succeeds, so the failure is also kept
// (syncErr) and reported, once, by the next Flush, Fsync or FlushAll, as a
// failed writeback is reported by fsync(2). Only a sync that returns
// without error ends an epoch. If the retry fails too, the started bit
// stays set with no sync in flight: records of both tags stay live (a
// rewrite keeps either, as they both describe the contents at the last
// completed sync), and the next sync runs in the foreground, which ends
// both (maybeSync, or the periodic tick's tickForeground).
const epochStarted = 1 << 63

// bgSync is a device sync in flight, started when the epoch was epoch.
type bgSync struct {
	epoch uint64
	done  chan error
}

func (s *Store) epochWord() uint64 { return s.a.U64(s.st + stOffEpoch) }

// epoch is the number of device syncs completed: records and quarantine
// extents tagged below it are stale.
func (s *Store) epoch() uint64 { return s.epochWord() &^ epochStarted }

// tag is the epoch of what is recorded now: epoch(), or epoch()+1 while a
// sync started at epoch() may be in flight.
func (s *Store) tag() uint64 {
	w := s.epochWord()
	if w&epochStarted != 0 {
		return w&^epochStarted + 1
	}
	return w
}

// setEpoch stores the epoch word, unlogged (see unsynced.go).
func (s *Store) setEpoch(e uint64, started bool) {
	if started {
		e |= epochStarted
	}
	s.a.PutU64(s.st+stOffEpoch, e)
}

// inFlight reports whether a sync started in the background has not been
// settled yet (callers hold the core's write lock, as for every Tx method).
func (s *Store) inFlight() bool { return s.bg != nil }

// background reports whether Write syncs in the background.
func (s *Store) background() bool {
	return s.durable() && !s.o.ForegroundSync && !s.recoverySkipped
}

// startSync starts a device sync on a goroutine: every record tagged up to
// now becomes stale when it completes (settle). The caller holds the core's
// write lock and has settled any earlier sync.
func (s *Store) startSync() {
	e := s.epoch()
	s.setEpoch(e, true)
	b := &bgSync{epoch: e, done: make(chan error, 1)}
	s.bg = b
	s.mu.Lock()
	s.syncing = s.unsynced
	s.unsynced = 0
	s.mu.Unlock()
	s.bgWG.Add(1)
	go func() {
		// The result is sent even if the sync never returns normally (a
		// test's device ending its goroutine), so that settle cannot wait
		// forever.
		err := errSyncAbandoned
		defer func() {
			b.done <- err
			s.bgWG.Done()
		}()
		if s.o.testSyncBG != nil {
			err = s.o.testSyncBG(s.dev.Sync)
		} else {
			err = s.dev.Sync()
		}
	}()
}

var errSyncAbandoned = errors.New("the background sync ended without a result")

// settle applies the result of the sync in flight if it has completed, or,
// with wait, when it completes. A failed one is retried in the foreground.
func (s *Store) settle(wait bool) error {
	b := s.bg
	if b == nil {
		return nil
	}
	var err error
	if wait {
		if s.o.testWait != nil {
			s.o.testWait(true)
		}
		err = <-b.done
		if s.o.testWait != nil {
			s.o.testWait(false)
		}
	} else {
		select {
		case err = <-b.done:
		default:
			return nil
		}
	}
	s.bg = nil
	s.mu.Lock()
	if err != nil {
		// Not durable: still unsynced, for SyncWritten, Tick and Close
		// (the retry below clears it if it succeeds).
		s.unsynced += s.syncing
	}
	s.syncing = 0
	s.mu.Unlock()
	if err != nil {
		failed := s.ioErr("syncing disk", err)
		s.o.Logf("diskstore: a background sync failed (%v); syncing again, and the next fsync reports it", err)
		if s.syncErr == nil {
			s.syncErr = failed
		}
		// The retry covers everything written so far, both tags.
		return s.syncDevice()
	}
	if s.epoch() == b.epoch {
		s.endEpoch(b.epoch + 1)
	}
	return nil
}

// takeSyncErr returns, once, the failure of a background sync (an ioErr:
// ErrIO, or ErrNoSpace).
func (s *Store) takeSyncErr() error {
	err := s.syncErr
	s.syncErr = nil
	return err
}
