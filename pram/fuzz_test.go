package pram

import (
	"os"
	"path/filepath"
	"testing"
)

// crashedImage is a 1 MiB arena left by a crash in the middle of a Tx, so
// that Open has a journal to validate and roll back.
func crashedImage(f *testing.F) []byte {
	path := filepath.Join(f.TempDir(), "arena")
	a, err := Format(path, Options{Size: 1 << 20, Params: [NumParams]uint64{1, 2, 3}})
	if err != nil {
		f.Fatal(err)
	}
	h := a.Geometry().HeapOff
	tx := a.Begin()
	tx.Set64(RootOff(0), uint64(h))
	tx.SetBytes(h+8, []byte("crashed transaction"))
	tx.Set32(h+100, 7)
	a.Abandon()
	img, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	return img
}

// FuzzOpen feeds damaged images to Open: it must return an error or a
// usable arena, never panic. Each 4-byte patch is a selector, a 16-bit
// position and a byte to xor; selector bit 0 picks the superblock page or
// the journal's first page, bit 1 recomputes the superblock checksum after
// patching (to get past it to the geometry checks). The seed corpus runs in
// every `go test`; `go test -fuzz FuzzOpen ./pram` searches further.
func FuzzOpen(f *testing.F) {
	img := crashedImage(f)
	f.Add([]byte{})
	for _, p := range [][]byte{
		{0, offSize, 0, 1}, {2, offSize + 2, 0, 0x10}, {2, offJournalLen + 1, 0, 0x01}, {2, offHeap + 1, 0, 0x02},
		{2, offJournal + 1, 0, 0x10}, {2, offVersion, 0, 3}, {2, offFeatures, 0, 0x80}, {0, 0, 0, 0xff},
		{0, 0, offState >> 8, 0x03}, {1, 0, 0, 0x08}, {1, 0, 0, 0x04}, {1, 7, 0, 0x80}, {1, 64, 0, 0x01},
		{1, 69, 0, 0x10}, {1, 72, 0, 0x0f}, {1, 72, 0, 0x08}, {1, 96, 0, 0xff}, {1, 64 + 8, 0, 0x40},
		{2, offSize + 5, 0, 0x01, 1, 0, 0, 0x10},
	} {
		f.Add(p)
	}
	f.Fuzz(func(t *testing.T, patch []byte) {
		if len(patch) > 64 {
			return
		}
		b := append([]byte(nil), img...)
		reseal := false
		for ; len(patch) >= 4; patch = patch[4:] {
			pos := (int(patch[1]) | int(patch[2])<<8) % PageSize
			if patch[0]&1 != 0 {
				pos += PageSize
			}
			b[pos] ^= patch[3]
			reseal = reseal || patch[0]&2 != 0
		}
		if reseal {
			encodeChecksum(b)
		}
		path := filepath.Join(t.TempDir(), "arena")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		a, err := Open(path)
		if err != nil {
			return
		}
		g := a.Geometry()
		for i := range NumRoots {
			a.Root(i)
		}
		tx := a.Begin()
		tx.Set64(g.HeapOff, 1)
		tx.Abort()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	})
}

func encodeChecksum(b []byte) { reseal(b[:PageSize]) }
