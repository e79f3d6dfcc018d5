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
// and none is in flight. It never waits for the device. A sync that failed
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
	if s.inFlight() || s.epochWord()&epochStarted != 0 {
		// In flight; or a failed sync whose retry failed too, which the
		// next write or fsync syncs in the foreground (maybeSync).
		return nil
	}
	s.mu.Lock()
	dirty := s.unsynced > 0
	s.mu.Unlock()
	if dirty || s.quarantined() > 0 {
		s.startSync()
	}
	return nil
}
