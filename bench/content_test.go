package bench

import (
	"bytes"
	"errors"
	"testing"
)

func TestPatternIsAFunctionOfKeyAndOffset(t *testing.T) {
	p := randomPattern(1009, 7) // small and prime, so runs wrap often
	whole := make([]byte, 5000)
	p.fill(whole, 42, 0)
	for _, c := range []struct{ off, n int }{{0, 10}, {1000, 1009}, {1005, 3000}, {4999, 1}, {17, 4983}} {
		part := make([]byte, c.n)
		p.fill(part, 42, int64(c.off))
		if !bytes.Equal(part, whole[c.off:c.off+c.n]) {
			t.Errorf("fill at %d+%d differs from the whole file", c.off, c.n)
		}
		if c.n <= p.n && !bytes.Equal(p.view(42, int64(c.off), c.n), part) {
			t.Errorf("view at %d+%d differs from fill", c.off, c.n)
		}
		if err := p.verify(part, 42, int64(c.off), "f"); err != nil {
			t.Errorf("verify at %d: %v", c.off, err)
		}
	}
	other := make([]byte, 5000)
	p.fill(other, 43, 0)
	if bytes.Equal(other, whole) {
		t.Error("keys 42 and 43 have the same content")
	}
	whole[3333] ^= 1
	err := p.verify(whole, 42, 0, "f")
	if !errors.Is(err, ErrCorrupt) || !bytes.Contains([]byte(err.Error()), []byte("offset 3333")) {
		t.Errorf("verify of a corrupted buffer: %v", err)
	}
	// Data shifted by a block is not the data written.
	shifted := make([]byte, 4096)
	p.fill(shifted, 42, 512)
	if p.verify(shifted, 42, 0, "f") == nil {
		t.Error("shifted data verified")
	}
}
