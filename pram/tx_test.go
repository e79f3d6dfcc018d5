package pram

import (
	"bytes"
	"encoding/binary"
	"errors"
	"os"
	"testing"
	"time"
)

func TestTxCommit(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	h := a.Geometry().HeapOff
	tx := a.Begin()
	if !tx.Active() || tx.Arena() != a || tx.Used() != 0 || tx.Room() != a.Geometry().JournalLen-journalHeader {
		t.Fatalf("fresh tx: active %v used %d room %d", tx.Active(), tx.Used(), tx.Room())
	}
	tx.Set64(h, 1)
	tx.SetOff(h+8, 2)
	tx.Set32(h+16, 3)
	tx.Set16(h+20, 4)
	tx.Set8(h+22, 5)
	tx.SetBytes(h+24, []byte("abc"))
	tx.Zero(h+24, 1)
	tx.Set64(RootOff(3), 6)
	if tx.Used() != 8*24 || a.U64(a.Geometry().JournalOff) != tx.Used() {
		t.Errorf("journal length word %d, Used %d", a.U64(a.Geometry().JournalOff), tx.Used())
	}
	tx.Commit()
	if tx.Active() || a.U64(a.Geometry().JournalOff) != 0 {
		t.Error("Commit left the journal non-empty")
	}
	if a.U64(h) != 1 || a.U64(h+8) != 2 || a.U32(h+16) != 3 || a.U16(h+20) != 4 || a.U8(h+22) != 5 ||
		!bytes.Equal(a.Bytes(h+24, 3), []byte("\x00bc")) || a.Root(3) != 6 {
		t.Error("committed values missing")
	}
	if err := mustPanic(t, func() { tx.Set64(h, 9) }); err != nil || a.U64(h) != 1 {
		t.Error("use of a committed Tx did not panic before changing anything")
	}
}

func TestTxAbort(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	h := a.Geometry().HeapOff
	copy(a.Bytes(h, 64), bytes.Repeat([]byte{0x5a}, 64))
	before := append([]byte(nil), a.Bytes(h, 64)...)
	root := a.Root(7)
	tx := a.Begin()
	tx.Set64(h, 1)
	tx.Set64(h, 2) // the same word twice: the oldest value must win
	tx.SetBytes(h+3, []byte("overlapping"))
	tx.Touch(h+32, 16)
	copy(a.Bytes(h+32, 16), "unlogged scribble") // allowed after Touch
	tx.Zero(h+48, 16)
	tx.Set64(RootOff(7), 77)
	tx.Abort()
	if !bytes.Equal(before, a.Bytes(h, 64)) || a.Root(7) != root {
		t.Errorf("Abort left\n%x\nwant\n%x", a.Bytes(h, 64), before)
	}
	if a.U64(a.Geometry().JournalOff) != 0 {
		t.Error("Abort left the journal non-empty")
	}
	// An empty transaction aborts and commits cleanly.
	a.Begin().Abort()
	a.Begin().Commit()
}

// TestTxMove: Move shifts overlapping ranges both ways, as copy does, and
// Abort restores the bytes it overwrote.
func TestTxMove(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	h := a.Geometry().HeapOff
	copy(a.Bytes(h, 16), "0123456789abcdef")
	before := append([]byte(nil), a.View(h, 16)...)
	tx := a.Begin()
	tx.Move(h+4, h, 8) // right by 4: 0123 01234567 cdef
	if got := string(a.View(h, 16)); got != "012301234567cdef" {
		t.Fatalf("right shift: %q", got)
	}
	tx.Move(h, h+2, 10) // left by 2: 2301234567 67cdef
	if got := string(a.View(h, 16)); got != "230123456767cdef" {
		t.Fatalf("left shift: %q", got)
	}
	tx.Move(h, h, 0)
	tx.Abort()
	if got := a.View(h, 16); !bytes.Equal(got, before) {
		t.Errorf("Abort left %q, want %q", got, before)
	}
	tx = a.Begin()
	tx.Move(h+8, h, 8)
	tx.Commit()
	if got := string(a.View(h, 16)); got != "0123456701234567" {
		t.Errorf("committed move: %q", got)
	}
}

// TestTxStoreRanges: journaled stores to the superblock's static part, the
// journal itself, or across the superblock page panic before changing
// anything.
func TestTxStoreRanges(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	g := a.Geometry()
	tx := a.Begin()
	defer tx.Abort()
	for name, f := range map[string]func(){
		"static superblock": func() { tx.Set64(offSize, 1) },
		"magic":             func() { tx.Set8(0, 1) },
		"journal":           func() { tx.Set64(g.JournalOff+64, 1) },
		"journal header":    func() { tx.Set64(g.JournalOff, 1) },
		"across page 0":     func() { tx.Touch(PageSize-8, 16) },
		"past the end":      func() { tx.Set64(Off(g.Size), 1) },
	} {
		used := tx.Used()
		if err := mustPanic(t, f); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("%s: panicked with %v, want ErrOutOfRange", name, err)
		}
		if tx.Used() != used {
			t.Errorf("%s: refused store was logged", name)
		}
	}
	if a.Geometry() != g || a.U64(g.JournalOff+64) != 0 {
		t.Error("refused stores changed the arena")
	}
	tx.Touch(g.HeapOff, 0) // no-op
}

// TestTxFull: a store that does not fit in the journal panics with
// ErrTxFull before changing anything; Abort then restores everything.
func TestTxFull(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	h := a.Geometry().HeapOff
	tx := a.Begin()
	n := uint64(0)
	for tx.Room() >= 16+8 {
		tx.Set64(h+Off(8*(n%4096)), n+1)
		n++
	}
	used := tx.Used()
	snapshot := append([]byte(nil), a.Bytes(h, 8*4096)...)
	err := mustPanic(t, func() { tx.Set64(h+8, 12345) })
	if !errors.Is(err, ErrTxFull) {
		t.Fatalf("panicked with %v, want ErrTxFull", err)
	}
	if tx.Used() != used || !bytes.Equal(snapshot, a.Bytes(h, 8*4096)) {
		t.Fatal("the refused store changed the arena or the journal")
	}
	if err := mustPanic(t, func() { tx.SetBytes(h, make([]byte, 1<<20)) }); !errors.Is(err, ErrTxFull) {
		t.Fatalf("large SetBytes panicked with %v", err)
	}
	tx.Abort()
	if !bytes.Equal(a.Bytes(h, 8*4096), make([]byte, 8*4096)) {
		t.Fatal("Abort after ErrTxFull did not restore the arena")
	}
}

// TestTxOneAtATime: Begin blocks while another Tx is open; Seq counts.
func TestTxOneAtATime(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	tx := a.Begin()
	first := tx.Seq()
	got := make(chan uint64)
	go func() {
		tx2 := a.Begin()
		got <- tx2.Seq()
		tx2.Commit()
	}()
	select {
	case <-got:
		t.Fatal("second Begin did not wait")
	case <-time.After(50 * time.Millisecond):
	}
	tx.Commit()
	select {
	case s := <-got:
		if s != first+1 {
			t.Errorf("Seq %d after %d", s, first)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("second Begin never returned")
	}
	if tx3 := a.Begin(); tx3.Seq() != first+2 {
		t.Errorf("Seq %d, want %d", tx3.Seq(), first+2)
	} else {
		tx3.Abort()
	}
}

// TestCrashRecovery: a Tx interrupted by a crash (Abandon) is rolled back
// by the next Open; one that committed is kept.
func TestCrashRecovery(t *testing.T) {
	a, path := newTestArena(t, 2<<20)
	h := a.Geometry().HeapOff
	tx := a.Begin()
	tx.Set64(h, 111)
	tx.Set64(RootOff(2), 222)
	tx.Commit()
	tx = a.Begin()
	tx.Set64(h, 1)
	tx.SetBytes(h+8, []byte("lost"))
	tx.Set64(RootOff(2), 2)
	tx.Set64(h, 3)
	a.Abandon()

	b, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if !b.WasDirty() || b.Recovered() != 4 {
		t.Errorf("after crash: dirty %v, recovered %d, want true, 4", b.WasDirty(), b.Recovered())
	}
	if b.U64(h) != 111 || b.Root(2) != 222 || !bytes.Equal(b.Bytes(h+8, 4), make([]byte, 4)) {
		t.Errorf("recovery: %d %d %q", b.U64(h), b.Root(2), b.Bytes(h+8, 4))
	}
	if b.U64(b.Geometry().JournalOff) != 0 {
		t.Error("recovery left the journal non-empty")
	}
	// Crash right after a commit: nothing to roll back, still dirty.
	tx = b.Begin()
	tx.Set64(h, 5)
	tx.Commit()
	b.Abandon()
	c, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	if !c.WasDirty() || c.Recovered() != 0 || c.U64(h) != 5 {
		t.Errorf("crash after commit: dirty %v recovered %d value %d", c.WasDirty(), c.Recovered(), c.U64(h))
	}
	// Close with an open Tx aborts it.
	tx = c.Begin()
	tx.Set64(h, 6)
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	d, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer d.Close()
	if d.WasDirty() || d.Recovered() != 0 || d.U64(h) != 5 {
		t.Errorf("Close with an open Tx: dirty %v recovered %d value %d", d.WasDirty(), d.Recovered(), d.U64(h))
	}
}

// TestCrashAtEveryStore stops a Tx at each of its journaled stores in turn
// (SetStoreHook), abandons the arena and checks that Open rolls it back.
func TestCrashAtEveryStore(t *testing.T) {
	type stop struct{}
	for n := 1; ; n++ {
		a, path := newTestArena(t, 2<<20)
		h := a.Geometry().HeapOff
		copy(a.Bytes(h, 256), bytes.Repeat([]byte{7}, 256))
		count := 0
		a.SetStoreHook(func() {
			if count++; count == n {
				panic(stop{})
			}
		})
		done := func() (done bool) {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(stop); !ok {
						panic(r)
					}
				}
			}()
			tx := a.Begin()
			for i := range 10 {
				tx.Set64(h+Off(16*i), uint64(i))
				tx.SetBytes(h+Off(16*i+8), []byte{1, 2, 3})
			}
			tx.Set64(RootOff(9), 99)
			tx.Commit()
			return true
		}()
		a.Abandon()
		b, err := Open(path)
		if err != nil {
			t.Fatal(err)
		}
		if done {
			b.Close()
			if n != 22 {
				t.Fatalf("Tx made %d stores, want 21", n-1)
			}
			return
		}
		if b.Recovered() != n-1 || !bytes.Equal(b.Bytes(h, 256), bytes.Repeat([]byte{7}, 256)) || b.Root(9) != 0 {
			t.Fatalf("crash at store %d: recovered %d, heap %x", n, b.Recovered(), b.Bytes(h, 32))
		}
		b.Close()
	}
}

// TestDamagedJournal: a journal that a crash left behind but that is
// damaged is refused with ErrCorrupt, and nothing is rolled back.
func TestDamagedJournal(t *testing.T) {
	le := binary.LittleEndian
	for name, damage := range map[string]func(j []byte){
		"length not a multiple of 8": func(j []byte) { le.PutUint64(j, le.Uint64(j)+4) },
		"length past the journal":    func(j []byte) { le.PutUint64(j, 1<<40) },
		"record offset out of range": func(j []byte) { le.PutUint64(j[journalHeader:], 1<<40) },
		"record into the journal":    func(j []byte) { le.PutUint64(j[journalHeader:], PageSize+64) },
		"record into static part":    func(j []byte) { le.PutUint64(j[journalHeader:], offSize) },
		"record length zero":         func(j []byte) { le.PutUint64(j[journalHeader+8:], 0) },
		"record length too long":     func(j []byte) { le.PutUint64(j[journalHeader+8:], 4096) },
		"truncated record":           func(j []byte) { le.PutUint64(j, le.Uint64(j)-16) },
	} {
		t.Run(name, func(t *testing.T) {
			f, path := newTestArena(t, 2<<20)
			h := f.Geometry().HeapOff
			tx := f.Begin()
			tx.Set64(h, 1)
			tx.Set64(h+8, 2)
			damage(f.Bytes(f.Geometry().JournalOff, PageSize))
			heap := append([]byte(nil), f.Bytes(h, 16)...)
			f.Abandon()
			if _, err := Open(path); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open = %v, want ErrCorrupt", err)
			}
			// Nothing was rolled back (or changed) by the refused Open.
			g, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(g[h:h+16], heap) {
				t.Errorf("refused Open changed the heap: %x, want %x", g[h:h+16], heap)
			}
		})
	}
}

// TestJournalLengthInCleanArena: Close empties the journal before it marks
// the arena clean, and Commit leaves the records of committed transactions
// behind the emptied length word. A clean arena whose length word is
// non-zero is damaged there, and the records it spans are stale: Open must
// refuse it (ErrCorrupt, ErrJournal), not roll them back over committed
// data, and DiscardJournal (fsck --repair) must empty the journal and keep
// the data.
func TestJournalLengthInCleanArena(t *testing.T) {
	a, path := newTestArena(t, 2<<20)
	h := a.Geometry().HeapOff
	jo := a.Geometry().JournalOff
	tx := a.Begin()
	tx.Set64(h, 1)
	tx.Commit()
	tx = a.Begin()
	tx.Set64(h, 2) // its record holds the committed 1
	tx.Commit()
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	// One damaged word: the length of the stale record above.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	if err != nil {
		t.Fatal(err)
	}
	var w [8]byte
	binary.LittleEndian.PutUint64(w[:], 24)
	if _, err := f.WriteAt(w[:], int64(jo)); err != nil {
		t.Fatal(err)
	}
	f.Close()

	if b, err := Open(path); err == nil {
		v := b.U64(h)
		b.Close()
		t.Fatalf("Open of a clean arena with a non-empty journal succeeded (heap word %d, want 2)", v)
	} else if !errors.Is(err, ErrCorrupt) || !errors.Is(err, ErrJournal) {
		t.Fatalf("Open = %v, want ErrCorrupt and ErrJournal", err)
	}
	b, err := OpenWith(path, OpenOptions{DiscardJournal: true})
	if err != nil {
		t.Fatalf("OpenWith(DiscardJournal): %v", err)
	}
	if b.U64(h) != 2 || b.Recovered() != 0 || b.U64(jo) != 0 || !errors.Is(b.DiscardedJournal(), ErrJournal) {
		t.Errorf("after discarding: heap word %d (want 2), recovered %d, journal length %d, discarded %v",
			b.U64(h), b.Recovered(), b.U64(jo), b.DiscardedJournal())
	}
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	c, err := Open(path)
	if err != nil {
		t.Fatalf("Open after the journal was discarded: %v", err)
	}
	defer c.Close()
	if c.U64(h) != 2 || c.DiscardedJournal() != nil {
		t.Errorf("reopened: heap word %d, discarded %v", c.U64(h), c.DiscardedJournal())
	}
}

// TestDiscardDamagedJournal: the journal of a crashed arena, damaged, is
// refused by Open (TestDamagedJournal) and emptied by DiscardJournal,
// which rolls nothing back.
func TestDiscardDamagedJournal(t *testing.T) {
	a, path := newTestArena(t, 2<<20)
	h := a.Geometry().HeapOff
	tx := a.Begin()
	tx.Set64(h, 1)
	binary.LittleEndian.PutUint64(a.Bytes(a.Geometry().JournalOff+journalHeader, 8), 1<<40)
	a.Abandon()
	if _, err := Open(path); !errors.Is(err, ErrJournal) {
		t.Fatalf("Open = %v, want ErrJournal", err)
	}
	b, err := OpenWith(path, OpenOptions{DiscardJournal: true})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	if !b.WasDirty() || b.Recovered() != 0 || b.U64(h) != 1 || b.DiscardedJournal() == nil {
		t.Errorf("dirty %v recovered %d heap word %d discarded %v", b.WasDirty(), b.Recovered(), b.U64(h), b.DiscardedJournal())
	}
}
