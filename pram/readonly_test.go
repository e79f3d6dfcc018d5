package pram

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"testing"
)

// TestOpenReadOnly: an arena opened read-only shows what the image holds,
// takes the stores of the layers above into its own memory only, and
// leaves the image byte for byte as it was: the next ordinary open sees
// none of them and counts no mount for it. Shadowed (image on a disk) and
// in place.
func TestOpenReadOnly(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		path := formatClosed(t, 4<<20)
		rng := rand.New(rand.NewPCG(7, 8))
		a := openShadowedOr(t, path, OpenOptions{InPlace: inPlace})
		for range 20 {
			randomTx(a, rng)
		}
		want, mounts := heap(a), a.Mounts()
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
		image, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}

		r, err := OpenWith(path, OpenOptions{ReadOnly: true})
		if err != nil {
			t.Fatal(err)
		}
		if !r.ReadOnly() || r.Shadowed() || r.WasDirty() || r.Mounts() != mounts {
			t.Fatalf("read-only open: readOnly %v shadowed %v dirty %v mounts %d (want %d)", r.ReadOnly(), r.Shadowed(), r.WasDirty(), r.Mounts(), mounts)
		}
		if !bytes.Equal(heap(r), want) {
			t.Fatal("read-only open shows other contents than the image holds")
		}
		// Stores of every kind, and the persistence points after them.
		randomTx(r, rng)
		r.PutU64(offMounts, 99)
		tx := r.Begin()
		tx.Abort()
		if err := r.Reserve(r.Size()); err != nil {
			t.Fatal(err)
		}
		if err := r.Sync(); err != nil {
			t.Fatal(err)
		}
		if err := r.ClearCheckDue(); err != nil {
			t.Fatal(err)
		}
		if err := r.Close(); err != nil {
			t.Fatal(err)
		}
		after, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(after, image) {
			t.Fatalf("in place %v: a read-only open changed the image", inPlace)
		}
		b, err := OpenWith(path, OpenOptions{InPlace: inPlace})
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(heap(b), want) || b.Mounts() != mounts+1 || b.WasDirty() {
			t.Fatalf("in place %v: after a read-only open: heap equal %v, mounts %d (want %d), dirty %v",
				inPlace, bytes.Equal(heap(b), want), b.Mounts(), mounts+1, b.WasDirty())
		}
		b.Close()
	}
}

// openShadowedOr opens path shadowed, or in place when o.InPlace is set.
func openShadowedOr(t *testing.T, path string, o OpenOptions) *Arena {
	t.Helper()
	if !o.InPlace {
		return openShadowed(t, path, o)
	}
	a, err := OpenWith(path, o)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// TestOpenReadOnlyNeedsRecovery: an image a crash left open (its journal,
// its checkpoint slots or its RAM copy may hold what recovery must apply)
// is refused read-only with ErrNeedsRecovery, and the refusal writes
// nothing; the ordinary open that follows recovers it.
func TestOpenReadOnlyNeedsRecovery(t *testing.T) {
	for _, inPlace := range []bool{false, true} {
		path := formatClosed(t, 4<<20)
		a := openShadowedOr(t, path, OpenOptions{InPlace: inPlace})
		randomTx(a, rand.New(rand.NewPCG(1, 2)))
		if err := a.Sync(); err != nil {
			t.Fatal(err)
		}
		tx := a.Begin() // interrupted by the "crash"
		tx.Set64(a.Geometry().HeapOff, 12345)
		a.Abandon()
		image, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		_, err = OpenWith(path, OpenOptions{ReadOnly: true})
		if !errors.Is(err, ErrNeedsRecovery) {
			t.Fatalf("in place %v: read-only open of a crashed image: %v, want ErrNeedsRecovery", inPlace, err)
		}
		if after, _ := os.ReadFile(path); !bytes.Equal(after, image) {
			t.Fatalf("in place %v: the refused read-only open changed the image", inPlace)
		}
		b, err := OpenWith(path, OpenOptions{InPlace: inPlace})
		if err != nil {
			t.Fatal(err)
		}
		if !b.WasDirty() || b.Recovered() == 0 || b.U64(b.Geometry().HeapOff) == 12345 {
			t.Fatalf("in place %v: recovery after the refusal: dirty %v recovered %d", inPlace, b.WasDirty(), b.Recovered())
		}
		b.Close()
	}
}
