package alloc

import (
	"errors"
	"fmt"
	"path/filepath"
	"sort"
	"testing"

	"conquest/pram"
)

// newArena formats a fresh arena of size bytes in t's temp dir with a heap.
func newArena(t testing.TB, size uint64) (*pram.Arena, *Heap, string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "arena")
	a, err := pram.Format(path, pram.Options{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	tx := a.Begin()
	h, err := Format(tx)
	if err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	tx.Commit()
	return a, h, path
}

// reopen closes (or, with crash, abandons) a and opens path again.
func reopen(t testing.TB, a *pram.Arena, path string, crash bool) (*pram.Arena, *Heap) {
	t.Helper()
	var err error
	if crash {
		err = a.Abandon()
	} else {
		err = a.Close()
	}
	if err != nil {
		t.Fatal(err)
	}
	a, err = pram.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { a.Close() })
	h, err := Open(a)
	if err != nil {
		t.Fatal(err)
	}
	return a, h
}

// inTx runs f in a transaction and commits it, or aborts and fails if f
// returns an error.
func inTx(t testing.TB, a *pram.Arena, f func(tx *pram.Tx) error) {
	t.Helper()
	tx := a.Begin()
	if err := f(tx); err != nil {
		tx.Abort()
		t.Fatal(err)
	}
	tx.Commit()
}

// inTxErr runs f in a transaction, commits it if f succeeds and aborts it
// if not, and returns f's error.
func inTxErr(a *pram.Arena, f func(tx *pram.Tx) error) error {
	tx := a.Begin()
	if err := f(tx); err != nil {
		tx.Abort()
		return err
	}
	tx.Commit()
	return nil
}

func mustAlloc(t testing.TB, h *Heap, n uint64) pram.Off {
	t.Helper()
	var off pram.Off
	inTx(t, h.Arena(), func(tx *pram.Tx) (err error) { off, err = h.Alloc(tx, n); return })
	return off
}

func mustFree(t testing.TB, h *Heap, off pram.Off) {
	t.Helper()
	inTx(t, h.Arena(), func(tx *pram.Tx) error { return h.Free(tx, off) })
}

// model is the plain Go model of the heap: live allocations and the bytes
// the test wrote into them.
type model struct {
	live map[pram.Off]obj
}

type obj struct {
	n    uint64 // requested
	size uint64 // capacity
	fill byte   // every byte of the capacity holds fill
}

func newModel() *model { return &model{live: make(map[pram.Off]obj)} }

// fill writes o.fill over the capacity at off (unlogged, as file data is).
func fillObj(a *pram.Arena, off pram.Off, o obj) {
	b := a.Bytes(off, o.size)
	for i := range b {
		b[i] = o.fill
	}
}

// verify compares the heap with the model: sizes, contents, no overlap,
// alignment, counters, and a full consistency walk marking every object.
func (m *model) verify(h *Heap) error {
	a := h.Arena()
	offs := make([]pram.Off, 0, len(m.live))
	var used uint64
	for off, o := range m.live {
		offs = append(offs, off)
		used += o.size
		if s, err := h.SizeOf(off); err != nil || s != o.size {
			return fmt.Errorf("SizeOf(%#x) = %d, %v; want %d", off, s, err, o.size)
		}
		if o.size&(o.size-1) == 0 && o.size <= pageSize && uint64(off)%o.size != 0 {
			return fmt.Errorf("%#x: capacity %d but not aligned to it", off, o.size)
		}
		if off%16 != 0 {
			return fmt.Errorf("%#x not 16-byte aligned", off)
		}
		for i, c := range a.Bytes(off, o.size) {
			if c != o.fill {
				return fmt.Errorf("%#x+%d: byte %#x, want %#x (size %d)", off, i, c, o.fill, o.size)
			}
		}
	}
	sort.Slice(offs, func(i, j int) bool { return offs[i] < offs[j] })
	for i := 1; i < len(offs); i++ {
		if prev := offs[i-1]; prev.Add(m.live[prev].size) > offs[i] {
			return fmt.Errorf("allocations %#x (+%d) and %#x overlap", prev, m.live[prev].size, offs[i])
		}
	}
	st := h.Stats()
	if st.Objects != uint64(len(m.live)) || st.UsedBytes != used {
		return fmt.Errorf("stats: %d objects, %d bytes; model %d, %d", st.Objects, st.UsedBytes, len(m.live), used)
	}
	if st.FreeBytes+st.UsedBytes+st.SlackBytes != st.TotalBytes {
		return fmt.Errorf("stats do not add up: %+v", st)
	}
	c := h.NewChecker()
	for _, off := range offs {
		c.Mark(off, "model")
	}
	if errs := c.Finish(); len(errs) > 0 {
		return fmt.Errorf("walk: %v", errors.Join(errs...))
	}
	return nil
}
