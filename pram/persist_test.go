package pram

import (
	"errors"
	"testing"
)

// TestPersistRange: Persist of a range outside the arena reports
// ErrOutOfRange instead of slicing past the mapping.
func TestPersistRange(t *testing.T) {
	a, _ := newTestArena(t, 2<<20)
	size := a.Size()
	for _, r := range []struct {
		off Off
		n   uint64
	}{{Off(size + PageSize), 1}, {Off(size), 1}, {Off(size - 8), 16}, {8, ^uint64(0)}} {
		if err := a.Persist(r.off, r.n); !errors.Is(err, ErrOutOfRange) {
			t.Errorf("Persist(%d, %d) = %v, want ErrOutOfRange", r.off, r.n, err)
		}
	}
	if err := a.Persist(Off(size-8), 8); err != nil {
		t.Errorf("Persist of the last word: %v", err)
	}
}
