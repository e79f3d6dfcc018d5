package pram

import (
	"bytes"
	"math/rand/v2"
	"os"
	"strings"
	"testing"

	"conquest/internal/loopdev"
	"conquest/internal/racetest"
)

// A block device is shadowed like an image file on a disk, with its
// checkpoint slots in the room mkfs leaves after the arena (slot.go).

// TestDeviceArenaSize pins the layout arithmetic: the arena and two slots
// of deviceSlotPages fit the device, one more page of arena would not.
func TestDeviceArenaSize(t *testing.T) {
	for _, dev := range []uint64{4 << 20, 5<<20 + 7, 40 << 20, 256 << 20, 1<<30 + 12345, 64 << 30} {
		s := DeviceArenaSize(dev)
		if s == 0 || s%PageSize != 0 {
			t.Fatalf("device of %d bytes: arena %d", dev, s)
		}
		if s+2*slotBytes(deviceSlotPages(s)) > dev {
			t.Errorf("device of %d bytes: arena %d and its slots do not fit", dev, s)
		}
		if n := s + PageSize; n+2*slotBytes(deviceSlotPages(n)) <= dev {
			t.Errorf("device of %d bytes: arena %d, but %d fits too", dev, s, n)
		}
		sl, ok := deviceSlots(s, dev)
		if !ok || sl.pages < deviceSlotPages(s) || uint64(sl.off(1))+slotBytes(sl.pages) > dev {
			t.Errorf("device of %d bytes, arena %d: slots %+v, %v", dev, s, sl, ok)
		}
		if dev >= 1<<30 && s < dev*3/4 {
			t.Errorf("device of %d bytes: arena only %d", dev, s)
		}
	}
	if s := DeviceArenaSize(2 << 20); s != 0 {
		t.Errorf("a 2 MiB device got an arena of %d bytes", s)
	}
	if _, ok := deviceSlots(1<<30, 1<<30); ok {
		t.Error("an arena over the whole device has slots")
	}
}

// formatDevice formats dev with the default (largest) arena and closes it.
func formatDevice(t *testing.T, dev string) {
	t.Helper()
	a, err := Format(dev, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
}

// TestBlockDeviceShadowed: an arena on a block device lives in a RAM copy;
// after a crash and the loss of the RAM copy (a power loss) the device
// holds exactly what was synced; a clean Close leaves no slot to apply.
func TestBlockDeviceShadowed(t *testing.T) {
	dev := loopdev.New(t, 40<<20)
	formatDevice(t, dev)
	var a *Arena
	var want []byte // the arena as of the last durable checkpoint
	a = openShadowed(t, dev, OpenOptions{OnCheckpoint: func(uint64) {
		if a != nil {
			want = heap(a)
		}
	}})
	if a.Kind() != KindBlock || a.Size() != DeviceArenaSize(40<<20) {
		t.Fatalf("kind %v, size %d", a.Kind(), a.Size())
	}
	if p := a.Shadow().Path; !strings.Contains(p, "-b") {
		t.Errorf("RAM copy %s is not named by the device number", p)
	}
	rng := rand.New(rand.NewPCG(5, 6))
	for range 200 {
		randomTx(a, rng)
	}
	must(t, a.Sync())
	synced := heap(a)
	if !bytes.Equal(want, synced) {
		t.Fatal("Sync made no checkpoint")
	}
	for range 200 {
		randomTx(a, rng) // some make checkpoints (backpressure)
	}
	if a.Shadow().Checkpoints < 3 {
		t.Errorf("%d checkpoints: the device's smaller limit did not apply", a.Shadow().Checkpoints)
	}
	must(t, a.Abandon())
	must(t, RemoveShadow(dev, ""))

	b := openShadowed(t, dev, OpenOptions{})
	if info := b.Shadow(); info.Reused || !info.Loaded {
		t.Fatalf("after the power loss: %+v", info)
	}
	if !bytes.Equal(heap(b), want) {
		t.Fatal("the device does not hold what was synced")
	}
	for range 50 {
		randomTx(b, rng)
	}
	want = heap(b)
	must(t, b.Close())

	c := openShadowed(t, dev, OpenOptions{})
	defer c.Close()
	if info := c.Shadow(); info.Finished || c.WasDirty() {
		t.Fatalf("after a clean close: %+v, dirty %v", info, c.WasDirty())
	}
	if !bytes.Equal(heap(c), want) {
		t.Fatal("Close did not leave the arena on the device")
	}
}

// TestBlockDeviceDaemonCrash is TestShadowDaemonCrash on a block device:
// the RAM copy a crash leaves is reused, named by the device's number.
func TestBlockDeviceDaemonCrash(t *testing.T) {
	dev := loopdev.New(t, 40<<20)
	formatDevice(t, dev)
	shadowDaemonCrash(t, dev)
}

// TestBlockDevicePowerLoss is TestShadowPowerLoss on a block device, whose
// slots hold less than the arena, so backpressure checkpoints come often.
func TestBlockDevicePowerLoss(t *testing.T) {
	dev := loopdev.New(t, 40<<20)
	seeds := uint64(12)
	if racetest.Reduced(t) {
		seeds = 4
	}
	powerLoss(t, seeds, 300, func() string { formatDevice(t, dev); return dev })
}

// TestBlockDeviceSplitCheckpoint: a checkpoint larger than a slot is
// written in parts, and the device ends up with all of it.
func TestBlockDeviceSplitCheckpoint(t *testing.T) {
	dev := loopdev.New(t, 40<<20)
	formatDevice(t, dev)
	var logged strings.Builder
	a, err := OpenWith(dev, OpenOptions{Interval: -1, Logf: func(f string, args ...any) {
		logged.WriteString(f)
	}})
	must(t, err)
	sl := a.sh.slots
	g := a.Geometry()
	n := (sl.pages + sl.pages/2) * PageSize // a slot and a half
	if uint64(g.HeapOff)+n > g.Size {
		t.Fatalf("arena of %d bytes too small for %d", g.Size, n)
	}
	b := a.Bytes(g.HeapOff, n) // no transaction: no backpressure
	for i := range b {
		b[i] = byte(i*7 + i>>12)
	}
	want := heap(a)
	seq := a.Shadow().Seq
	must(t, a.Sync())
	if !strings.Contains(logged.String(), "in %d parts") {
		t.Errorf("no split was logged: %q", logged.String())
	}
	if got := a.Shadow().Seq; got != seq+2 {
		t.Errorf("sequence %d after the split checkpoint, want %d", got, seq+2)
	}
	must(t, a.Abandon())
	must(t, RemoveShadow(dev, ""))
	c := openShadowed(t, dev, OpenOptions{})
	defer c.Close()
	if !bytes.Equal(heap(c), want) {
		t.Fatal("the device lost part of the split checkpoint")
	}
}

// TestBlockDeviceLayout: mkfs refuses an arena that leaves no room for the
// slots, and a device formatted whole (an older mkfs) is mapped in place,
// saying why.
func TestBlockDeviceLayout(t *testing.T) {
	const size = 8 << 20
	dev := loopdev.New(t, size)
	if _, err := Format(dev, Options{Size: size}); err == nil || !strings.Contains(err.Error(), "no room for its checkpoint slots") {
		t.Fatalf("Format of the whole device = %v", err)
	}
	// An arena over the whole device, as an older mkfs made it: formatted
	// as a file and copied onto the device.
	img := formatClosed(t, size)
	data, err := os.ReadFile(img)
	must(t, err)
	must(t, os.WriteFile(dev, data, 0))
	a, err := Open(dev)
	must(t, err)
	defer a.Close()
	if info := a.Shadow(); info.Path != "" || !strings.Contains(info.InPlace, "no room for checkpoint slots") {
		t.Fatalf("whole-device arena: %+v", info)
	}
}

// TestBlockDeviceLoadEnd: a device has no holes, so after the first load
// (which reads the whole arena) a load reads only as far as the last
// checkpoint's load end, past which the device holds zeros.
func TestBlockDeviceLoadEnd(t *testing.T) {
	dev := loopdev.New(t, 40<<20)
	formatDevice(t, dev)
	a := openShadowed(t, dev, OpenOptions{})
	g := a.Geometry()
	high := g.HeapOff + 2<<20
	tx := a.Begin()
	tx.SetBytes(high, []byte("the highest change"))
	tx.Commit()
	must(t, a.Close())
	f, err := os.OpenFile(dev, os.O_RDWR, 0)
	must(t, err)
	defer f.Close()
	page := make([]byte, PageSize)
	_, err = f.ReadAt(page, 0)
	must(t, err)
	end := int64(load64(page[offLoadEnd:]))
	if end <= int64(high) || end%PageSize != 0 || end >= int64(g.Size)/2 {
		t.Fatalf("load end %d, the highest change at %d, arena %d", end, high, g.Size)
	}
	// Bytes past the load end are not read (nothing but a checkpoint
	// writes there; this is a test's doing).
	_, err = f.WriteAt([]byte("not to be loaded"), end+PageSize)
	must(t, err)
	b := openShadowed(t, dev, OpenOptions{})
	if got := b.View(Off(end+PageSize), 16); !bytes.Equal(got, make([]byte, 16)) {
		t.Errorf("the load read past its end: %q", got)
	}
	if got := b.View(high, 18); string(got) != "the highest change" {
		t.Errorf("the load missed %q", got)
	}
	must(t, b.Abandon()) // Close's verification would see the bytes written here
	must(t, RemoveShadow(dev, ""))
	// A damaged load end (the superblock's dynamic part has no checksum)
	// is not trusted: the load reads everything. (Without slots: the one
	// of b's first checkpoint would restore the superblock.)
	must(t, clearDeviceSlots(f, g.Size, 40<<20))
	var word [8]byte
	store64(word[:], PageSize)
	_, err = f.WriteAt(word[:], offLoadEnd)
	must(t, err)
	c := openShadowed(t, dev, OpenOptions{})
	if got := c.View(high, 18); string(got) != "the highest change" {
		t.Errorf("a damaged load end was trusted: %q", got)
	}
	if got := c.View(Off(end+PageSize), 16); string(got) != "not to be loaded" {
		t.Errorf("with a damaged load end the load skipped %q", got)
	}
	must(t, c.Abandon())
	must(t, RemoveShadow(dev, ""))
}
