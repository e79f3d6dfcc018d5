package diskstore

import "conquest/pram"

// The periodic disk commit (DurableOnProcessCrash).
//
// Write syncs the device every Options.SyncBytes, and fsync syncs it at
// once; between the two, nothing did. A writer that stopped short of
// SyncBytes and never called fsync left its blocks unsynced for as long as
// the mount stayed idle: the arena already pointed at them (and a periodic
// checkpoint of a shadowed arena made that durable), so a power loss minutes
// later still brought them back as zeros or as their old contents, and
// copy-on-write's old blocks stayed in quarantine, counted as neither used
// nor free. ext4 writes a file's ordered data with every journal commit
// (5 s by default); the core calls Tick as often (its Options.DiskCommit),
// which starts a background sync (bgsync.go) of what was written since the
// last one and, at the next tick, applies it: the records it covered become
// stale and the quarantine it ended is freed. Nobody waits for the device
// in a tick: it runs under the core's write lock only for the bookkeeping.

// TickPending reports whether Tick has anything to do: blocks written since
// the last sync, a sync in flight to settle, stale records or quarantine to
// free. Callers hold the core's lock, shared at least.
func (s *Store) TickPending() bool {
	if !s.background() {
		return false
	}
	s.mu.Lock()
	pending := s.unsynced > 0 || s.needTidy
	s.mu.Unlock()
	return pending || s.bg != nil || s.quarantined() > 0
}

// Tick applies a background sync that has completed, frees what it made
// stale (as far as tx's journal allows; the next tick goes on), and starts
// a sync in the background of the blocks written since, if there are any
// and none is in flight. It never waits for the device, except after a
// failed sync whose retry failed too (tickForeground). A sync that failed
// is retried as settle does, and its failure waits for the next fsync.
// Callers hold the core's write lock.
func (s *Store) Tick(tx *pram.Tx) error {
	if !s.background() {
		return nil
	}
	if err := s.settle(false); err != nil {
		return err
	}
	if err := s.tidy(tx); err != nil {
		return err
	}
	if s.inFlight() {
		return nil
	}
	if s.epochWord()&epochStarted != 0 {
		return s.tickForeground(tx)
	}
	s.mu.Lock()
	dirty := s.unsynced > 0
	s.mu.Unlock()
	if dirty || s.quarantined() > 0 {
		s.startSync()
	}
	return nil
}

// tickForeground is Tick after a background sync and its retry both
// failed: the started bit stays set with no sync in flight, and records
// of both tags are live, so a background sync, which ends only the older,
// cannot settle them (bgsync.go). Such a store used to wait for the next
// fsync or SyncBytes of writes, and an idle mount kept what it had
// written unsynced for good. The tick syncs in the foreground instead,
// holding the core's lock while the device works, in this error state
// only; while the device keeps failing, it waits 1, 2, 4 ... up to 64
// ticks between tries. A failure is kept for the next fsync to report, as
// a background one is (a failed fsync(2) may drop the pages it could not
// write, so the sync after it can succeed without them).
func (s *Store) tickForeground(tx *pram.Tx) error {
	if s.tickSkip > 0 {
		s.tickSkip--
		return nil
	}
	if err := s.syncDevice(); err != nil {
		s.tickPause = min(max(2*s.tickPause, 1), maxTickPause)
		s.tickSkip = s.tickPause
		if s.syncErr == nil {
			s.syncErr = err
		}
		return err
	}
	s.tickPause = 0
	return s.tidy(tx)
}

// maxTickPause bounds the ticks tickForeground skips after a failure.
const maxTickPause = 64
