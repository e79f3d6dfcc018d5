package pram

import (
	"encoding/binary"
	"fmt"
)

// Tx is an undo-logged transaction: the unit of crash atomicity.
//
// Every store a Tx makes is preceded by an undo record holding the bytes it
// replaces. A record becomes part of the journal when the journal's length
// word, stored with one 8-byte store, grows to cover it; only then is the
// target changed. Commit empties the journal with one 8-byte store. If the
// process dies in between, the next Open applies the records in reverse and
// the arena is exactly as it was before the transaction. Because a process
// crash (kill -9) leaves a shared mapping's stores in the page cache in
// program order, no flush is needed between these steps for that kind of
// crash; see Persist for power loss.
//
// Memory that the transaction allocated itself (fresh file data) may be
// written through Arena.Bytes without logging: if the transaction is rolled
// back that memory is free again and its contents do not matter. Allocators
// must log (Touch) any of their own bookkeeping that lives inside a block
// they hand out, so that rollback restores it.
//
// Only one Tx is open at a time; Begin blocks until the previous one ends.
type Tx struct {
	a      *Arena
	active bool
	used   uint64 // bytes of undo records, mirrors the journal length word
	seq    uint64 // number of this transaction since Open (1, 2, ...)
}

// Begin opens the arena's transaction. The caller must Commit or Abort it.
// A shadowed arena with too many pages waiting for a checkpoint makes one
// first (backpressure).
func (a *Arena) Begin() *Tx {
	a.backpressure()
	a.txMu.Lock()
	a.txSeq++
	a.tx = Tx{a: a, active: true, seq: a.txSeq}
	return &a.tx
}

// Seq identifies the transaction among those begun on this open arena: the
// first is 1 and each Begin adds one. Begin reuses one Tx value, so layers
// that keep per-transaction state (an allocator tracking what this
// transaction freed) compare Seq, not the *Tx pointer.
func (tx *Tx) Seq() uint64 { return tx.seq }

// Arena is the arena this transaction changes.
func (tx *Tx) Arena() *Arena { return tx.a }

// Used is the number of journal bytes this transaction has recorded.
func (tx *Tx) Used() uint64 { return tx.used }

// Room is the number of journal bytes still free for undo records.
func (tx *Tx) Room() uint64 { return tx.a.geo.JournalLen - journalHeader - tx.used }

func (tx *Tx) mustActive() {
	if !tx.active {
		panic("pram: use of a finished transaction")
	}
}

// Touch records the current contents of [off, off+n) so that a rollback
// restores them, without changing them. It panics with ErrTxFull (wrapped)
// if the journal cannot hold the record, before recording anything.
func (tx *Tx) Touch(off Off, n uint64) {
	tx.mustActive()
	if n == 0 {
		return
	}
	a := tx.a
	if a.storeHook != nil {
		a.storeHook()
	}
	if !a.InRange(off, n) || (off < offState) || (off < a.geo.HeapOff && off >= PageSize) ||
		(off < PageSize && uint64(off)+n > PageSize) {
		panic(fmt.Errorf("%w: journaled store to [%d, +%d)", ErrOutOfRange, off, n))
	}
	rec := 16 + (n+7)&^7
	if rec > tx.Room() {
		panic(fmt.Errorf("%w: %d bytes recorded, %d more needed, journal holds %d",
			ErrTxFull, tx.used, rec, a.geo.JournalLen-journalHeader))
	}
	base := uint64(a.geo.JournalOff) + journalHeader + tx.used
	le := binary.LittleEndian
	le.PutUint64(a.m[base:], uint64(off))
	le.PutUint64(a.m[base+8:], n)
	copy(a.m[base+16:base+16+n], a.m[off:uint64(off)+n])
	tx.used += rec
	store64(a.m[a.geo.JournalOff:], tx.used) // publish the record
	// Mark the record, the length word and the target (which the caller
	// changes next) for the next checkpoint: none runs during a Tx.
	a.mark(Off(base), rec)
	a.mark(a.geo.JournalOff, 8)
	a.mark(off, n)
}

// Set64 stores an 8-byte word (8-aligned) at off.
func (tx *Tx) Set64(off Off, v uint64) {
	tx.Touch(off, 8)
	store64(tx.a.word8(off), v)
}

// SetOff stores an offset at off.
func (tx *Tx) SetOff(off Off, v Off) { tx.Set64(off, uint64(v)) }

// Set32 stores a little-endian uint32 at off.
func (tx *Tx) Set32(off Off, v uint32) {
	tx.Touch(off, 4)
	binary.LittleEndian.PutUint32(tx.a.Bytes(off, 4), v)
}

// Set16 stores a little-endian uint16 at off.
func (tx *Tx) Set16(off Off, v uint16) {
	tx.Touch(off, 2)
	binary.LittleEndian.PutUint16(tx.a.Bytes(off, 2), v)
}

// Set8 stores a byte at off.
func (tx *Tx) Set8(off Off, v uint8) {
	tx.Touch(off, 1)
	tx.a.Bytes(off, 1)[0] = v
}

// SetBytes copies b to off.
func (tx *Tx) SetBytes(off Off, b []byte) {
	tx.Touch(off, uint64(len(b)))
	copy(tx.a.Bytes(off, uint64(len(b))), b)
}

// Move copies the n bytes at src to dst, journaling dst; the ranges may
// overlap (a shift inside a sorted array).
func (tx *Tx) Move(dst, src Off, n uint64) {
	if n == 0 {
		return
	}
	from := tx.a.View(src, n)
	tx.Touch(dst, n)
	copy(tx.a.Bytes(dst, n), from)
}

// Zero clears [off, off+n).
func (tx *Tx) Zero(off Off, n uint64) {
	tx.Touch(off, n)
	clear(tx.a.Bytes(off, n))
}

// Commit makes the transaction's stores permanent by emptying the journal.
func (tx *Tx) Commit() {
	tx.mustActive()
	if tx.used != 0 {
		store64(tx.a.m[tx.a.geo.JournalOff:], 0)
	}
	tx.end()
}

// Abort rolls back every store of the transaction, newest first.
func (tx *Tx) Abort() {
	tx.mustActive()
	if _, err := tx.a.rollback(tx.used); err != nil {
		panic(err) // our own records: cannot be malformed
	}
	tx.end()
}

func (tx *Tx) end() {
	tx.active = false
	tx.used = 0
	tx.a.txMu.Unlock()
}

// SetStoreHook installs a function called before every journaled store
// (nil removes it). Crash tests use it to stop the process model at an
// arbitrary store: the hook panics, the test abandons the arena without
// Abort, and the next Open must roll the transaction back.
func (a *Arena) SetStoreHook(h func()) { a.storeHook = h }

// Active reports whether the transaction is still open.
func (tx *Tx) Active() bool { return tx.active }

// recover rolls back a transaction interrupted by a crash. It returns the
// number of records applied.
func (a *Arena) recover() (int, error) {
	used := a.U64(a.geo.JournalOff)
	if used == 0 {
		return 0, nil
	}
	if !a.dirty {
		// Close empties the journal before it marks the arena clean, so
		// here the length word itself is damaged, and the records it
		// spans are stale ones that committed transactions left: rolling
		// them back would undo those.
		return 0, fmt.Errorf("%w: journal length %d in an arena that was closed cleanly; %w", ErrCorrupt, used, ErrJournal)
	}
	if used > a.geo.JournalLen-journalHeader || used%8 != 0 {
		return 0, fmt.Errorf("%w: journal length %d; %w", ErrCorrupt, used, ErrJournal)
	}
	return a.rollback(used)
}

// rollback applies the undo records in the first used bytes of the journal in
// reverse order and empties the journal. It validates every record first, so
// a damaged journal changes nothing.
func (a *Arena) rollback(used uint64) (int, error) {
	type rec struct{ off, n, data uint64 }
	var recs []rec
	base := uint64(a.geo.JournalOff) + journalHeader
	le := binary.LittleEndian
	for p := uint64(0); p < used; {
		if used-p < 16 {
			return 0, fmt.Errorf("%w: truncated journal record at %d; %w", ErrCorrupt, p, ErrJournal)
		}
		off, n := le.Uint64(a.m[base+p:]), le.Uint64(a.m[base+p+8:])
		size := 16 + (n+7)&^7
		if n == 0 || n > used || size > used-p || !a.InRange(Off(off), n) ||
			(off < uint64(a.geo.HeapOff) && (off < offState || off+n > PageSize)) {
			return 0, fmt.Errorf("%w: bad journal record at %d: [%d, +%d); %w", ErrCorrupt, p, off, n, ErrJournal)
		}
		recs = append(recs, rec{off, n, base + p + 16})
		p += size
	}
	for i := len(recs) - 1; i >= 0; i-- {
		r := recs[i]
		copy(a.m[r.off:r.off+r.n], a.m[r.data:r.data+r.n])
		a.mark(Off(r.off), r.n)
	}
	store64(a.m[a.geo.JournalOff:], 0)
	a.mark(a.geo.JournalOff, 8)
	return len(recs), nil
}
