package alloc

import (
	"encoding/binary"
	"errors"
	"testing"

	"github.com/dgryski/go-farm"

	"conquest/pram"
)

// Damage to the heap's root slot or to the static part of its header makes
// Open refuse the heap with a *StaticHeaderError, and RewriteStatic writes
// them again from the arena's geometry: the heap opens, with every
// allocation intact.
func TestRewriteStatic(t *testing.T) {
	for _, tc := range []struct {
		name string
		off  func(h *Heap) pram.Off
		xor  uint64
	}{
		{"magic", func(h *Heap) pram.Off { return h.g.hdr + hdrMagic }, 0x20},
		{"version", func(h *Heap) pram.Off { return h.g.hdr + hdrVersion }, 0x100},
		{"page map offset", func(h *Heap) pram.Off { return h.g.hdr + hdrMapOff }, 1 << 20},
		{"pages", func(h *Heap) pram.Off { return h.g.hdr + hdrNPages }, 0xff << 24},
		{"checksum", func(h *Heap) pram.Off { return h.g.hdr + hdrChecksum }, 1 << 60},
		{"root slot", func(h *Heap) pram.Off { return pram.RootOff(0) }, 0x7000},
		{"root slot zeroed", func(h *Heap) pram.Off { return pram.RootOff(0) }, zeroIt},
		// With another root slot set (the layers above set theirs after
		// the heap exists), not an mkfs that stopped before the heap.
		{"root slot and magic zeroed", func(h *Heap) pram.Off { return pram.RootOff(0) }, zeroBoth},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a, h, live := rebuildHeap(t)
			off := tc.off(h)
			switch tc.xor {
			case zeroBoth:
				a.PutU64(h.g.hdr+hdrMagic, 0)
				a.PutU64(pram.RootOff(1), 4096)
				fallthrough
			case zeroIt:
				a.PutU64(off, 0)
			default:
				a.PutU64(off, a.U64(off)^tc.xor)
			}
			_, err := Open(a)
			if _, ok := errors.AsType[*StaticHeaderError](err); !ok || !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v; want a StaticHeaderError", err)
			}
			n, err := RewriteStatic(a)
			if err != nil || n == 0 {
				t.Fatalf("RewriteStatic: %d, %v", n, err)
			}
			h2, err := Open(a)
			if err != nil {
				t.Fatal(err)
			}
			if errs := h2.Verify(); len(errs) > 0 {
				t.Fatalf("Verify: %v", errs)
			}
			for o, want := range live {
				if sz, err := h2.SizeOf(o); err != nil || sz < want {
					t.Fatalf("allocation %#x of %d bytes: %d, %v", o, want, sz, err)
				}
			}
			if n, err := RewriteStatic(a); err != nil || n != 0 {
				t.Fatalf("second RewriteStatic: %d, %v; want nothing to do", n, err)
			}
		})
	}
}

// zeroIt and zeroBoth, as TestRewriteStatic's xor, zero the word (and, for
// zeroBoth, the heap's magic, with root slot 1 set).
const (
	zeroIt   = ^uint64(0)
	zeroBoth = ^uint64(1)
)

// RewriteStatic refuses a header that is intact but not this build's (a
// heap of another version), and an arena with no heap.
func TestRewriteStaticRefuses(t *testing.T) {
	a, h, _ := rebuildHeap(t)
	b := a.Bytes(h.g.hdr, hdrChecksum+8)
	saved := append([]byte(nil), b...)
	binary.LittleEndian.PutUint32(b[hdrVersion:], HeapVersion+1)
	binary.LittleEndian.PutUint64(b[hdrChecksum:], farm.Hash64(b[:hdrChecksum]))
	after := append([]byte(nil), b...)
	// Open names it as another version, not damage.
	if _, err := Open(a); !errors.Is(err, pram.ErrVersion) || errors.Is(err, ErrCorrupt) {
		t.Fatalf("Open of another version's header: %v; want pram.ErrVersion", err)
	}
	if _, err := RewriteStatic(a); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("RewriteStatic of another version's header: %v", err)
	}
	if string(a.Bytes(h.g.hdr, hdrChecksum+8)) != string(after) {
		t.Fatal("a refused rewrite changed the header")
	}
	copy(b, saved)
	a.PutU64(pram.RootOff(0), 0)
	copy(b[hdrMagic:], "NOTAHEAP")
	if _, err := RewriteStatic(a); !errors.Is(err, ErrNoHeap) {
		t.Fatalf("RewriteStatic with no heap: %v", err)
	}
}
