package alloc

import (
	"errors"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"conquest/pram"
)

// fuzzBase is a closed 1 MiB arena image holding a heap with objects of
// many sizes, some freed, and the offsets of its live objects.
var fuzzBase struct {
	once sync.Once
	img  []byte
	live []pram.Off
	err  error
}

func baseImage(t testing.TB) ([]byte, []pram.Off) {
	fuzzBase.once.Do(func() {
		dir, err := os.MkdirTemp("", "alloc-fuzz-")
		if err != nil {
			fuzzBase.err = err
			return
		}
		defer os.RemoveAll(dir)
		path := filepath.Join(dir, "arena")
		a, err := pram.Format(path, pram.Options{Size: 1 << 20})
		if err != nil {
			fuzzBase.err = err
			return
		}
		tx := a.Begin()
		h, err := Format(tx)
		if err != nil {
			fuzzBase.err = err
			return
		}
		var offs []pram.Off
		for i := range 60 {
			off, err := h.Alloc(tx, []uint64{16, 16, 48, 256, 1000, 2048, 3000, 9000, 40000}[i%9])
			if err != nil {
				fuzzBase.err = err
				return
			}
			offs = append(offs, off)
		}
		for i, off := range offs {
			if i%4 == 1 {
				if fuzzBase.err = h.Free(tx, off); fuzzBase.err != nil {
					return
				}
			} else {
				fuzzBase.live = append(fuzzBase.live, off)
			}
		}
		tx.Commit()
		if fuzzBase.err = a.Close(); fuzzBase.err != nil {
			return
		}
		fuzzBase.img, fuzzBase.err = os.ReadFile(path)
	})
	if fuzzBase.err != nil {
		t.Fatal(fuzzBase.err)
	}
	return fuzzBase.img, fuzzBase.live
}

// damage applies patches to a copy of img. Each 4-byte patch is a region
// selector, a 16-bit position and a byte to xor: region 0 is the heap
// header page, 1 the page map, 2 the data pages (slab tails live there),
// 3 the superblock's dynamic part and the journal.
func damage(img, patch []byte) []byte {
	out := append([]byte(nil), img...)
	heap := int(0x41000) // HeapOff of a 1 MiB arena with the default journal
	for ; len(patch) >= 4; patch = patch[4:] {
		pos := int(patch[1]) | int(patch[2])<<8
		var off int
		switch patch[0] % 4 {
		case 0:
			off = heap + pos%4096
		case 1:
			off = heap + 4096 + pos%8192
		case 2:
			off = heap + 3*4096 + pos*11%(len(img)-heap-3*4096)
		default:
			off = 512 + pos*5%(heap-512)
		}
		out[off] ^= patch[3]
	}
	return out
}

// FuzzOpenWalk feeds damaged images to pram.Open, Open, the walk and a few
// operations: all must report errors, never panic (except pram.ErrTxFull,
// which the Tx contract allows and the core recovers). The seed corpus runs
// in every `go test`; `go test -fuzz FuzzOpenWalk ./alloc` searches further.
func FuzzOpenWalk(f *testing.F) {
	img, _ := baseImage(f)
	if len(img) != 1<<20 {
		f.Fatalf("base image is %d bytes", len(img))
	}
	f.Add([]byte{})
	for _, p := range [][]byte{
		{0, hdrTop, 0, 0x01}, {0, hdrTop, 0, 0xff}, {0, hdrFreePages, 0, 0x02}, {0, hdrFreeHeads, 0, 0x05},
		{0, hdrFreeHeads + 8, 0, 0x80}, {0, 0, 1, 0x03}, {0, 24, 1, 0x40}, /* partial heads at 256 */
		{0, hdrObjects, 0, 0x10}, {0, hdrChecksum, 0, 0x01}, {0, hdrNPages, 0, 0x01},
		{1, 0, 0, 0x01}, {1, 0, 0, 0x03}, {1, 1, 0, 0x07}, {1, 2, 0, 0xff}, {1, 4, 0, 0x10}, {1, 8, 0, 0x02},
		{1, 12, 0, 0x09}, {1, 16, 0, 0x01}, {1, 32, 0, 0x02}, {1, 40, 0, 0x11}, {1, 64, 0, 0x01},
		{1, 96 + 8, 0, 0x7f}, {1, 0xe0, 0, 0x04}, {1, 0x20, 1, 0x01},
		{2, 0, 0, 0xff}, {2, 100, 3, 0x01},
		{3, 0, 0, 0xff}, {3, 13, 0, 0x01}, {3, 0, 1, 0x40},
		{1, 0, 0, 0x03, 1, 1, 0, 0x05, 0, hdrTop, 0, 0x02},
		{0, hdrFreeHeads, 0, 0x03, 1, 8, 0, 0x01, 1, 12, 0, 0x01},
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, patch []byte) {
		if len(patch) > 64 {
			return
		}
		img, live := baseImage(t)
		path := filepath.Join(t.TempDir(), "arena")
		if err := os.WriteFile(path, damage(img, patch), 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := pram.Open(path)
		if err != nil {
			return
		}
		defer a.Close()
		h, err := Open(a)
		if err != nil {
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("Open: %v does not wrap ErrCorrupt", err)
			}
			return
		}
		h.Verify()
		c := h.NewChecker()
		for _, off := range live {
			c.Mark(off, "base")
			h.SizeOf(off)
		}
		c.Finish()
		h.Stats()
		exercise(h, live)
	})
}

// exercise runs allocations and frees on a possibly damaged heap in a Tx
// and aborts it.
func exercise(h *Heap, live []pram.Off) {
	tx := h.Arena().Begin()
	defer func() {
		if r := recover(); r != nil {
			if err, ok := r.(error); !ok || !errors.Is(err, pram.ErrTxFull) {
				panic(r)
			}
		}
		tx.Abort()
	}()
	for i, n := range []uint64{16, 100, 1000, 2048, 5000, 70000, 16, 300} {
		if i < len(live) {
			h.Free(tx, live[i*7%len(live)])
		}
		h.Alloc(tx, n)
	}
}
