package alloc

import (
	"bytes"
	"errors"
	"testing"

	"conquest/pram"
)

// committed sets up a heap with a committed mix of objects, filled.
func committed(t *testing.T, size uint64) (*pram.Arena, *Heap, string, *model) {
	a, h, path := newArena(t, size)
	m := newModel()
	for i, n := range []uint64{16, 16, 16, 100, 256, 256, 1000, 1024, 2048, 3000, 8192, 40000, 300000} {
		off := mustAlloc(t, h, n)
		o := obj{n: n, size: ClassSize(n), fill: byte(i + 1)}
		fillObj(a, off, o)
		m.live[off] = o
	}
	return a, h, path, m
}

// scribbleTx runs a transaction that frees about half of m's objects,
// allocates new ones (some reusing what it freed) and scribbles over every
// allocation it made without logging, as file data writes do. It returns
// the offsets it allocated. m is not changed.
func scribbleTx(t *testing.T, h *Heap, tx *pram.Tx, m *model) []pram.Off {
	t.Helper()
	a := h.Arena()
	var freed []uint64
	i := 0
	for off, o := range m.live {
		if i++; i%2 == 0 {
			continue
		}
		if err := h.Free(tx, off); err != nil {
			t.Fatal(err)
		}
		freed = append(freed, o.n)
	}
	var made []pram.Off
	for _, n := range append(freed, 16, 700, 5000, 70000, MaxAlloc) {
		off, err := h.Alloc(tx, n)
		if err != nil {
			t.Fatal(err)
		}
		fillObj(a, off, obj{size: ClassSize(n), fill: 0xEE})
		made = append(made, off)
	}
	z, err := h.AllocZero(tx, 4000)
	if err != nil {
		t.Fatal(err)
	}
	return append(made, z)
}

// TestAbortRestoresHeap is the allocator rule: alloc inside a Tx, scribble
// over the allocated memory unlogged, abort: the heap is exactly as before
// and every committed object keeps its contents, even where the Tx freed it
// and handed its memory out again.
func TestAbortRestoresHeap(t *testing.T) {
	a, h, _, m := committed(t, 8<<20)
	before := metaSnapshot(h)
	tx := a.Begin()
	made := scribbleTx(t, h, tx, m)
	reused := 0
	for _, off := range made {
		if _, ok := m.live[off]; ok {
			reused++
		}
	}
	if reused == 0 {
		t.Fatal("test does not exercise reuse within the Tx")
	}
	tx.Abort()
	if !bytes.Equal(before, metaSnapshot(h)) {
		t.Fatal("Abort did not restore the heap exactly")
	}
	if err := m.verify(h); err != nil {
		t.Fatal(err)
	}
}

// TestCrashRollsBack: the same Tx, interrupted by a crash (Abandon); the
// next Open rolls it back.
func TestCrashRollsBack(t *testing.T) {
	a, h, path, m := committed(t, 8<<20)
	before := metaSnapshot(h)
	tx := a.Begin()
	scribbleTx(t, h, tx, m)
	_ = tx
	a, h = reopen(t, a, path, true)
	if !a.WasDirty() || a.Recovered() == 0 {
		t.Fatalf("after crash: dirty %v, recovered %d", a.WasDirty(), a.Recovered())
	}
	if !bytes.Equal(before, metaSnapshot(h)) {
		t.Fatal("recovery did not restore the heap exactly")
	}
	if err := m.verify(h); err != nil {
		t.Fatal(err)
	}
}

// TestCrashAtEveryStore stops the process model at each journaled store of
// an Alloc/Free transaction in turn (pram's store hook), abandons the
// arena, and checks that reopening restores the heap exactly.
func TestCrashAtEveryStore(t *testing.T) {
	type stop struct{}
	for n := 1; ; n++ {
		a, h, path, m := committed(t, 8<<20)
		before := metaSnapshot(h)
		count := 0
		a.SetStoreHook(func() {
			if count++; count == n {
				panic(stop{})
			}
		})
		finished := func() (done bool) {
			defer func() {
				if r := recover(); r != nil {
					if _, ok := r.(stop); !ok {
						panic(r)
					}
				}
			}()
			tx := a.Begin()
			scribbleTx(t, h, tx, m)
			tx.Commit()
			return true
		}()
		a.SetStoreHook(nil)
		a, h = reopen(t, a, path, true)
		if finished {
			if n < 10 {
				t.Fatalf("transaction finished after only %d stores", n)
			}
			t.Logf("crashed at each of %d stores", n-1)
			return
		}
		if !bytes.Equal(before, metaSnapshot(h)) {
			t.Fatalf("crash at store %d: recovery did not restore the heap", n)
		}
		if err := m.verify(h); err != nil {
			t.Fatalf("crash at store %d: %v", n, err)
		}
		a.Close()
	}
}

// fillPages allocates single pages until the heap has no free page left,
// and adds them to m.
func fillPages(t *testing.T, h *Heap, m *model) {
	t.Helper()
	for {
		tx := h.Arena().Begin()
		off, err := h.Alloc(tx, pageSize)
		tx.Commit()
		if errors.Is(err, ErrNoSpace) {
			return
		}
		if err != nil {
			t.Fatal(err)
		}
		m.live[off] = obj{n: pageSize, size: pageSize, fill: 0x77}
		fillObj(h.Arena(), off, m.live[off])
	}
}

// freeAllocAbort frees off in a Tx, allocates n bytes, scribbles over them
// unlogged and aborts; it returns the new offset and the journal bytes the
// Alloc cost.
func freeAllocAbort(t *testing.T, h *Heap, frees []pram.Off, n uint64) (pram.Off, uint64) {
	t.Helper()
	tx := h.Arena().Begin()
	defer tx.Abort()
	for _, off := range frees {
		if err := h.Free(tx, off); err != nil {
			t.Fatal(err)
		}
	}
	used := tx.Used()
	got, err := h.Alloc(tx, n)
	if err != nil {
		t.Fatal(err)
	}
	fillObj(h.Arena(), got, obj{size: ClassSize(n), fill: 0xEE})
	return got, tx.Used() - used
}

// TestReuseInTx pins the reuse rule: memory freed and allocated again in
// one Tx, scribbled, then aborted, has its old contents back. Slab slots
// are reused (and logged); pages are not reused while other free pages
// exist, and are reused and logged when the heap is full. The 16-byte slab
// page, whose bitmap is in the page, gets its bitmap back.
func TestReuseInTx(t *testing.T) {
	a, h, _ := newArena(t, 4<<20)
	// The test needs a heap with no free page at all.
	h.useReserve = 1
	m := newModel()
	add := func(n uint64, fill byte) pram.Off {
		off := mustAlloc(t, h, n)
		m.live[off] = obj{n: n, size: ClassSize(n), fill: fill}
		fillObj(a, off, m.live[off])
		return off
	}
	check := func(what string) {
		t.Helper()
		if err := m.verify(h); err != nil {
			t.Fatalf("%s: %v", what, err)
		}
	}

	slot := add(1000, 0x11)
	if got, cost := freeAllocAbort(t, h, []pram.Off{slot}, 1000); got != slot || cost < 1024 {
		t.Fatalf("slot: got %#x (freed %#x), logged %d", got, slot, cost)
	}
	check("slot")

	big := add(64<<10, 0x22)
	if got, cost := freeAllocAbort(t, h, []pram.Off{big}, 64<<10); got == big || cost > 2048 {
		t.Fatalf("pages with free space elsewhere: got %#x (freed %#x), logged %d", got, big, cost)
	}
	check("pages, not reused")

	// Two 16-byte slabs, the first not full so that the second one's page
	// is returned when emptied.
	var tiny []pram.Off
	for i := range tinySlots + 3 {
		off := add(16, byte(i))
		if i >= tinySlots {
			tiny = append(tiny, off)
		}
	}
	mustFree(t, h, slot)
	delete(m.live, slot)
	for off := range m.live {
		if off < tiny[0]&^(pageSize-1) && m.live[off].size == 16 {
			mustFree(t, h, off)
			delete(m.live, off)
			break
		}
	}
	fillPages(t, h, m)
	st := h.Stats()
	if st.FreePages != 0 {
		t.Fatalf("heap not full: %+v", st)
	}
	before := metaSnapshot(h)
	if got, cost := freeAllocAbort(t, h, []pram.Off{big}, 64<<10); got != big || cost < 64<<10 {
		t.Fatalf("pages in a full heap: got %#x (freed %#x), logged %d", got, big, cost)
	}
	check("pages, reused")
	page := tiny[0] &^ (pageSize - 1)
	if got, _ := freeAllocAbort(t, h, tiny, pageSize); got != page {
		t.Fatalf("page allocation got %#x, not the freed 16-byte slab page %#x", got, page)
	}
	if !bytes.Equal(before, metaSnapshot(h)) {
		t.Fatal("abort did not restore the heap (tail bitmap of the reused slab page?)")
	}
	check("16-byte slab page")
}

// TestTxFullPanicsCleanly: an Alloc whose journal records do not fit panics
// with pram.ErrTxFull; recovering and aborting leaves the heap as before.
func TestTxFullPanicsCleanly(t *testing.T) {
	a, h, _, m := committed(t, 8<<20)
	before := metaSnapshot(h)
	tx := a.Begin()
	// Fill the journal to within a few bytes.
	filler := mustAllocIn(t, h, tx, 2048)
	for tx.Room() >= 16+2048 {
		tx.Touch(filler, 2048)
	}
	for tx.Room() >= 24 {
		tx.Touch(filler, 8)
	}
	func() {
		defer func() {
			r := recover()
			err, _ := r.(error)
			if !errors.Is(err, pram.ErrTxFull) {
				t.Fatalf("recovered %v, want ErrTxFull", r)
			}
		}()
		h.Alloc(tx, 70000)
		t.Fatal("Alloc did not panic with a full journal")
	}()
	tx.Abort()
	if !bytes.Equal(before, metaSnapshot(h)) {
		t.Fatal("heap changed")
	}
	if err := m.verify(h); err != nil {
		t.Fatal(err)
	}
}

func mustAllocIn(t *testing.T, h *Heap, tx *pram.Tx, n uint64) pram.Off {
	t.Helper()
	off, err := h.Alloc(tx, n)
	if err != nil {
		t.Fatal(err)
	}
	return off
}
