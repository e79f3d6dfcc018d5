package pram

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"conquest/internal/racetest"
)

// formatClosed formats an arena of size bytes at a new path and closes it.
func formatClosed(t *testing.T, size uint64) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "arena")
	a, err := Format(path, Options{Size: size})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	return path
}

func openShadowed(t *testing.T, path string, o OpenOptions) *Arena {
	t.Helper()
	if o.Interval == 0 {
		o.Interval = -1 // checkpoints only when asked or needed: deterministic
	}
	o.Logf = t.Logf
	a, err := OpenWith(path, o)
	if err != nil {
		t.Fatal(err)
	}
	if a.Shadow().Path == "" {
		t.Fatalf("arena mapped in place: %s", a.Shadow().InPlace)
	}
	return a
}

func heap(a *Arena) []byte {
	g := a.Geometry()
	return append([]byte(nil), a.View(g.HeapOff, g.Size-uint64(g.HeapOff))...)
}

// randomTx changes a few random ranges of the heap, through the journal
// and, as file data is, through Bytes.
func randomTx(a *Arena, rng *rand.Rand) {
	g := a.Geometry()
	tx := a.Begin()
	for range 1 + rng.IntN(6) {
		n := 1 + rng.Uint64N(3*PageSize)
		off := g.HeapOff + Off(rng.Uint64N(g.Size-uint64(g.HeapOff)-n))
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		if rng.IntN(2) == 0 {
			tx.SetBytes(off, b)
		} else {
			copy(a.Bytes(off, n), b)
		}
	}
	if rng.IntN(8) == 0 {
		tx.Abort()
		return
	}
	tx.Commit()
}

// TestShadowRoundTrip: a shadowed arena lives in a RAM copy, changes reach
// the image only at checkpoints, and Close leaves the image equal to the
// arena and removes the copy.
func TestShadowRoundTrip(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	info := a.Shadow()
	if !info.Loaded || info.Reused {
		t.Fatalf("first open: %+v", info)
	}
	if st, err := os.Stat(info.Path); err != nil || st.Mode().Perm() != 0o600 {
		t.Fatalf("RAM copy: %v %v", st, err)
	}
	h := a.Geometry().HeapOff
	tx := a.Begin()
	tx.SetBytes(h, []byte("in the RAM copy"))
	tx.Commit()
	img, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(img, []byte("in the RAM copy")) {
		t.Fatal("a change reached the image before any checkpoint")
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	if img, _ = os.ReadFile(path); !bytes.Contains(img[:4<<20], []byte("in the RAM copy")) {
		t.Fatal("Sync did not write the change in place")
	}
	if n := a.Shadow().Checkpoints; n == 0 {
		t.Fatal("no checkpoint counted")
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(info.Path); !errors.Is(err, os.ErrNotExist) {
		t.Fatalf("Close left the RAM copy: %v", err)
	}
	b := openShadowed(t, path, OpenOptions{})
	defer b.Close()
	if b.WasDirty() || string(b.View(h, 15)) != "in the RAM copy" {
		t.Fatalf("reopened: dirty %v, %q", b.WasDirty(), b.View(h, 15))
	}
}

// TestShadowDaemonCrash: after a crash of the process (Abandon), the next
// Open uses the RAM copy, which has every committed change, rolls back the
// interrupted transaction there, and checkpoints what the image missed.
func TestShadowDaemonCrash(t *testing.T) { shadowDaemonCrash(t, formatClosed(t, 4<<20)) }

// shadowDaemonCrash is TestShadowDaemonCrash on the closed arena at path.
func shadowDaemonCrash(t *testing.T, path string) {
	a := openShadowed(t, path, OpenOptions{})
	rng := rand.New(rand.NewPCG(1, 2))
	for range 50 {
		randomTx(a, rng)
	}
	if err := a.Sync(); err != nil {
		t.Fatal(err)
	}
	for range 50 {
		randomTx(a, rng)
	}
	want := heap(a)
	tx := a.Begin() // interrupted by the crash
	tx.SetBytes(a.Geometry().HeapOff+5, []byte("half done"))
	a.Abandon()

	b := openShadowed(t, path, OpenOptions{})
	if info := b.Shadow(); !info.Reused || !b.WasDirty() || b.Recovered() != 1 {
		t.Fatalf("after the crash: %+v, dirty %v, recovered %d", info, b.WasDirty(), b.Recovered())
	}
	if !bytes.Equal(heap(b), want) {
		t.Fatal("the RAM copy lost committed changes")
	}
	if err := b.Close(); err != nil { // verification mode compares the image
		t.Fatal(err)
	}
	c := openShadowed(t, path, OpenOptions{})
	defer c.Close()
	if !bytes.Equal(heap(c), want) {
		t.Fatal("the image lost committed changes")
	}
}

// TestShadowPowerLoss: a power loss at any point (between checkpoints, or
// during one: before its slot is synced, while it writes in place) leaves
// an image that Open recovers to the state of the last durable checkpoint,
// or of the one in flight if its slot was written whole, never a mix.
func TestShadowPowerLoss(t *testing.T) {
	seeds := uint64(60)
	if racetest.Reduced(t) {
		seeds = 15
	}
	powerLoss(t, seeds, 50, func() string { return formatClosed(t, 2<<20) })
}

// powerLoss runs seeds power-loss rounds (TestShadowPowerLoss) of at least
// minSteps transactions each on the arena fresh formats (closed).
func powerLoss(t *testing.T, seeds uint64, minSteps int, fresh func() string) {
	for seed := uint64(0); seed < seeds; seed++ {
		mode := CrashMode(seed % 3)
		rng := rand.New(rand.NewPCG(seed, 7))
		path := fresh()
		var durable, current []byte
		var img *CrashImage
		failAt := -1
		if seed%2 == 1 {
			failAt = 1 + rng.IntN(12) // the power fails at that sync
		}
		var a *Arena
		a = openShadowed(t, path, OpenOptions{
			WrapImage: func(f ImageFile) ImageFile {
				img = NewCrashImage(f, mode, rng)
				img.BeforeSync = func(n int) bool {
					if n != failAt {
						return false
					}
					// Nothing ran since the checkpoint took its copy.
					current = heap(a)
					return true
				}
				return img
			},
			OnCheckpoint: func(uint64) {
				if a != nil { // not during OpenWith
					durable = heap(a)
				}
			},
		})
		durable = heap(a)
		steps := minSteps + rng.IntN(400)
		for i := 0; i < steps && !img.isLost(); i++ {
			randomTx(a, rng) // Begin may make a checkpoint (backpressure)
			if rng.IntN(40) == 0 && !img.isLost() {
				_ = a.Sync()
			}
		}
		inFlight := img.isLost() // the power failed at a checkpoint's sync
		if !inFlight {
			img.PowerLoss(mode, rng) // between checkpoints
		}
		a.Abandon()
		if err := RemoveShadow(path, ""); err != nil {
			t.Fatal(err)
		}
		b := openShadowed(t, path, OpenOptions{})
		if !b.Shadow().Finished {
			t.Errorf("seed %d: Open did not apply the slots the power loss left", seed)
		}
		got := heap(b)
		switch {
		case bytes.Equal(got, durable):
		case bytes.Equal(got, current) && inFlight:
			// the slot of the checkpoint in flight was written whole
		default:
			t.Fatalf("seed %d (mode %d, power lost at sync %d of %d): the recovered arena is neither the last durable checkpoint nor the one in flight",
				seed, mode, failAt, img.Syncs())
		}
		if err := b.Close(); err != nil {
			t.Fatalf("seed %d: %v", seed, err)
		}
	}
}

// TestShadowBackpressure: with no Sync and no timer, a checkpoint is made
// whenever the changed pages reach the limit, so they stay bounded.
func TestShadowBackpressure(t *testing.T) {
	path := formatClosed(t, 64<<20)
	a := openShadowed(t, path, OpenOptions{})
	defer a.Close()
	rng := rand.New(rand.NewPCG(3, 4))
	limit := limitPages(64 << 20)
	for range 2000 {
		randomTx(a, rng)
		if d := a.Shadow().Dirty; d > limit+100 { // one transaction past it
			t.Fatalf("%d pages wait for a checkpoint, limit %d", d, limit)
		}
	}
	if a.Shadow().Checkpoints == 0 {
		t.Fatal("no checkpoint was made")
	}
}

// TestShadowVerify: a store the checkpoints are not told about (through
// View) is what verification mode exists to catch: Close fails, naming it.
func TestShadowVerify(t *testing.T) {
	path := formatClosed(t, 4<<20)
	a := openShadowed(t, path, OpenOptions{})
	off := a.Geometry().HeapOff + 3*PageSize
	a.View(off, 4)[0] = 1    // wrong on purpose
	lastCloseVerify.Store(0) // no rate limit for this Close
	err := a.Close()
	if err == nil || !strings.Contains(err.Error(), "without being marked") {
		t.Fatalf("Close = %v, want a verification error", err)
	}
	// The RAM copy stays when the last checkpoint failed.
	if p, _ := ShadowPath(path, ""); p != "" {
		if _, err := os.Stat(p); err != nil {
			t.Fatalf("RAM copy: %v", err)
		}
		os.Remove(p)
	}
}

// TestShadowInPlace: where a RAM copy cannot or need not be made, the image
// is mapped in place, and Shadow says why.
func TestShadowInPlace(t *testing.T) {
	path := formatClosed(t, 2<<20)
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		o    OpenOptions
		want string
	}{
		{OpenOptions{InPlace: true}, "asked"},
		{OpenOptions{ShadowDir: notDir}, "no directory for the RAM copy"},
	} {
		a, err := OpenWith(path, c.o)
		if err != nil {
			t.Fatal(err)
		}
		if info := a.Shadow(); info.Path != "" || !strings.Contains(info.InPlace, c.want) {
			t.Errorf("%+v: %+v, want in place because %q", c.o, info, c.want)
		}
		if err := a.Close(); err != nil {
			t.Fatal(err)
		}
	}
	if st, err := os.Stat("/dev/shm"); err == nil && st.IsDir() {
		p := filepath.Join("/dev/shm", filepath.Base(t.TempDir())+"-arena")
		a, err := Format(p, Options{Size: 2 << 20})
		if err != nil {
			t.Fatal(err)
		}
		a.Close()
		defer os.Remove(p)
		b, err := Open(p)
		if err != nil {
			t.Fatal(err)
		}
		if info := b.Shadow(); info.Path != "" || !strings.Contains(info.InPlace, "tmpfs") {
			t.Errorf("image on tmpfs: %+v", info)
		}
		b.Close()
	}
}

// TestShadowSlotsCut: an open shadowed image has its checkpoint slots after
// the arena; Close cuts them off again, and an image left with them (a
// crash) opens as well.
func TestShadowSlotsCut(t *testing.T) {
	path := formatClosed(t, 2<<20)
	size := func() int64 {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		return st.Size()
	}
	if size() != 2<<20 {
		t.Fatalf("a new image is %d bytes", size())
	}
	a := openShadowed(t, path, OpenOptions{})
	if size() != int64(2<<20+TailLen(2<<20)) {
		t.Fatalf("open image is %d bytes", size())
	}
	a.Close()
	if size() != 2<<20 {
		t.Fatalf("closed image is %d bytes", size())
	}
	b := openShadowed(t, path, OpenOptions{})
	b.Abandon()
	must(t, RemoveShadow(path, ""))
	c, err := Open(path) // with its slots, after a "power loss"
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestDirtySet pins the bit arithmetic of the changed-page set.
func TestDirtySet(t *testing.T) {
	d := newDirtySet(200)
	for _, r := range [][2]uint64{{0, 0}, {3, 70}, {60, 64}, {127, 128}, {199, 199}} {
		d.mark(r[0], r[1])
	}
	want := []uint64{0}
	for p := uint64(3); p <= 70; p++ {
		want = append(want, p)
	}
	want = append(want, 127, 128, 199)
	if d.count() != int64(len(want)) {
		t.Fatalf("count %d, want %d", d.count(), len(want))
	}
	got := d.take()
	if len(got) != len(want) {
		t.Fatalf("take: %v", got)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("take: %v, want %v", got, want)
		}
	}
	if d.count() != 0 || len(d.take()) != 0 {
		t.Fatal("take did not clear the set")
	}
}

// TestSetCheckpointInterval: a remount's commit= reaches the background
// checkpointer: with an interval of an hour a change waits, and once the
// interval is cut to 20 ms it is checkpointed within moments. An arena
// without a checkpointer (Interval < 0) refuses the change.
func TestSetCheckpointInterval(t *testing.T) {
	path := formatClosed(t, 8<<20)
	a := openShadowed(t, path, OpenOptions{Interval: time.Hour})
	defer a.Close()
	before := a.Shadow().Checkpoints
	randomTx(a, rand.New(rand.NewPCG(1, 2)))
	time.Sleep(50 * time.Millisecond)
	if n := a.Shadow().Checkpoints; n != before {
		t.Fatalf("%d checkpoints with an interval of an hour", n-before)
	}
	if !a.SetCheckpointInterval(20 * time.Millisecond) {
		t.Fatal("SetCheckpointInterval refused")
	}
	deadline := time.Now().Add(10 * time.Second)
	for a.Shadow().Checkpoints == before {
		if time.Now().After(deadline) {
			t.Fatal("no checkpoint 10 s after the interval became 20 ms")
		}
		time.Sleep(5 * time.Millisecond)
	}
	if a.SetCheckpointInterval(0) {
		t.Fatal("a zero interval was taken")
	}
	b := openShadowed(t, formatClosed(t, 8<<20), OpenOptions{})
	defer b.Close()
	if b.SetCheckpointInterval(time.Second) {
		t.Fatal("an arena without a checkpointer took an interval")
	}
}
