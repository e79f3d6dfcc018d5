package pram

import (
	"bytes"
	"errors"
	"os"
	"testing"
	"time"
)

// faultAt loads the word at off on a goroutine that asked for faults as
// panics, and returns what it recovered (nil if the load worked).
func faultAt(a *Arena, off Off) any {
	got := make(chan any, 1)
	go func() {
		GuardFaults()
		defer func() { got <- recover() }()
		a.U64(off)
	}()
	return <-got
}

// TestFaultInPlace truncates an image mapped in place under an open arena:
// a load through the mapping is a fault that Fault recognizes, the arena is
// lost from then on (Persist fails), and Close releases it without writing
// to the image, which stays as the truncation left it.
func TestFaultInPlace(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a, err := OpenWith(path, OpenOptions{InPlace: true})
	if err != nil {
		t.Fatal(err)
	}
	h := a.Geometry().HeapOff
	if r := faultAt(a, h); r != nil || a.Lost() != nil {
		t.Fatalf("before the truncation: %v, lost %v", r, a.Lost())
	}
	if err := os.Truncate(path, 0); err != nil {
		t.Fatal(err)
	}
	r := faultAt(a, h+8)
	if r == nil {
		t.Fatal("a load from the truncated mapping did not fault")
	}
	if a.Fault("an ordinary panic") || a.Fault(errors.New("no address")) {
		t.Fatal("Fault took a panic without an address for the arena's")
	}
	if a.Lost() != nil {
		t.Fatal("the arena is lost before Fault saw the fault")
	}
	if !a.Fault(r) {
		t.Fatalf("Fault does not recognize %v", r)
	}
	var le *LostError
	if err := a.Lost(); !errors.As(err, &le) || le.Off != uint64(h+8) || le.Path != path || !errors.Is(err, ErrLost) {
		t.Fatalf("Lost: %v; want the fault at offset %d of %s", err, h+8, path)
	}
	if err := a.Persist(0, PageSize); !errors.Is(err, ErrLost) {
		t.Fatalf("Persist of a lost arena: %v", err)
	}
	if err := a.Close(); !errors.Is(err, ErrLost) {
		t.Fatalf("Close of a lost arena: %v", err)
	}
	if fi, err := os.Stat(path); err != nil || fi.Size() != 0 {
		t.Fatalf("the image after Close: %v, %v; want it left empty", fi, err)
	}
}

// TestFaultRAMCopy truncates the RAM copy of a shadowed arena with changes
// waiting for a checkpoint: the background checkpointer faults, which ends
// it instead of the process, and writes nothing to the image. Close removes
// the RAM copy, and the next Open has the last checkpoint's state.
func TestFaultRAMCopy(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{Interval: time.Hour})
	h := a.Geometry().HeapOff
	tx := a.Begin()
	tx.SetBytes(h, []byte("checkpointed"))
	tx.Commit()
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	before, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	ram := a.Shadow().Path
	tx = a.Begin()
	tx.SetBytes(h, []byte("never made durable"))
	tx.Commit()
	if err := os.Truncate(ram, 0); err != nil {
		t.Fatal(err)
	}
	// The next tick checkpoints the changed page, and faults copying it.
	if !a.SetCheckpointInterval(10 * time.Millisecond) {
		t.Fatal("no checkpointer")
	}
	for deadline := time.Now().Add(10 * time.Second); a.Lost() == nil; {
		if time.Now().After(deadline) {
			t.Fatal("the checkpointer did not report the truncated RAM copy in 10 s")
		}
		time.Sleep(5 * time.Millisecond)
	}
	var le *LostError
	if !errors.As(a.Lost(), &le) || le.Path != ram {
		t.Fatalf("Lost: %v; want a fault on the RAM copy %s", a.Lost(), ram)
	}
	select {
	case <-a.sh.done:
	case <-time.After(10 * time.Second):
		t.Fatal("the checkpointer still runs after the fault")
	}
	if err := a.Close(); !errors.Is(err, ErrLost) {
		t.Fatalf("Close of a lost arena: %v", err)
	}
	if _, err := os.Stat(ram); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("the RAM copy after Close: %v; want it removed", err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("the image changed after the RAM copy was lost")
	}
	b := openShadowed(t, path, OpenOptions{})
	defer b.Close()
	if got := string(b.View(h, 12)); got != "checkpointed" {
		t.Fatalf("reopened: %q; want the last checkpoint's %q", got, "checkpointed")
	}
}
