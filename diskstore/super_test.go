package diskstore

import (
	"encoding/binary"
	"errors"
	"path/filepath"
	"testing"

	farm "github.com/dgryski/go-farm"

	"conquest/alloc"
	"conquest/pram"
)

func TestSuperRoundTrip(t *testing.T) {
	dev := NewMemDevice(10 << 20)
	uuid := [16]byte{1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16}
	s, err := FormatDisk(dev, uuid, 64<<10)
	if err != nil {
		t.Fatal(err)
	}
	got, err := ReadSuper(dev)
	if err != nil {
		t.Fatal(err)
	}
	if got != s || got.Blocks != 160 || got.UUID != uuid || got.BlockSize != 64<<10 || got.DataBlocks() != 159 {
		t.Fatalf("read %+v, wrote %+v", got, s)
	}
}

func TestSuperErrors(t *testing.T) {
	uuid := [16]byte{9}
	fresh := func() *MemDevice {
		dev := NewMemDevice(1 << 20)
		if _, err := FormatDisk(dev, uuid, 4096); err != nil {
			t.Fatal(err)
		}
		return dev
	}
	cases := []struct {
		name string
		hit  func(b []byte)
		want error
	}{
		{"zeros", func(b []byte) { clear(b[:4096]) }, ErrNotConquestDisk},
		{"other magic", func(b []byte) { copy(b, "CONQPRAM") }, ErrNotConquestDisk},
		{"version", func(b []byte) { binary.LittleEndian.PutUint32(b[superOffVersion:], 2) }, ErrVersion},
		{"version sealed", func(b []byte) {
			binary.LittleEndian.PutUint32(b[superOffVersion:], 1<<30)
			binary.LittleEndian.PutUint64(b[superOffChecksum:], farm.Hash64(b[:superOffChecksum]))
		}, ErrVersion},
		// No later format would have these: damage, not a newer disk.
		{"version 0", func(b []byte) { binary.LittleEndian.PutUint32(b[superOffVersion:], 0) }, ErrChecksum},
		{"version damaged", func(b []byte) { b[superOffVersion+2] ^= 0x11 }, ErrChecksum},
		{"checksum", func(b []byte) { b[superOffUUID] ^= 1 }, ErrChecksum},
		{"block size", func(b []byte) {
			binary.LittleEndian.PutUint32(b[superOffBlockSize:], 5000)
			binary.LittleEndian.PutUint64(b[superOffChecksum:], farm.Hash64(b[:superOffChecksum]))
		}, ErrGeometry},
		{"larger than device", func(b []byte) {
			binary.LittleEndian.PutUint64(b[superOffBlocks:], 1<<20)
			binary.LittleEndian.PutUint64(b[superOffChecksum:], farm.Hash64(b[:superOffChecksum]))
		}, ErrGeometry},
	}
	for _, c := range cases {
		dev := fresh()
		c.hit(dev.Bytes())
		if _, err := ReadSuper(dev); !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
		}
	}
	if _, err := FormatDisk(NewMemDevice(1<<20), uuid, 3000); !errors.Is(err, ErrGeometry) {
		t.Errorf("block size 3000: %v", err)
	}
	if _, err := FormatDisk(NewMemDevice(4096), uuid, 4096); !errors.Is(err, ErrGeometry) {
		t.Errorf("one-block device: %v", err)
	}
	if _, err := ReadSuper(NewMemDevice(100)); !errors.Is(err, ErrNotConquestDisk) {
		t.Errorf("tiny device: %v", err)
	}
	fd := NewFaultDevice(fresh(), OnNth(OpRead, 1, FaultEIO))
	if _, err := ReadSuper(fd); !errors.Is(err, ErrIO) {
		t.Errorf("read error: %v", err)
	}
}

// TestOpenChecksArena: a disk is refused by an arena of another file system
// (UUID) or with other geometry parameters.
func TestOpenChecksArena(t *testing.T) {
	e := newEnv(t, envOpts{blockSize: 4096, dev: NewMemDevice(8 << 20)})
	dev := e.dev.(*MemDevice)
	e.s.Close()
	// Another file system's disk.
	other := NewMemDevice(8 << 20)
	if _, err := FormatDisk(other, [16]byte{0xEE}, 4096); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(e.h, other, Options{}); !errors.Is(err, ErrUUIDMismatch) {
		t.Fatalf("foreign disk: %v", err)
	}
	// Same UUID, other block size.
	g := e.a.Geometry()
	odd := NewMemDevice(8 << 20)
	if _, err := FormatDisk(odd, g.UUID, 8192); err != nil {
		t.Fatal(err)
	}
	if _, err := Open(e.h, odd, Options{}); !errors.Is(err, ErrGeometry) {
		t.Fatalf("other block size: %v", err)
	}
	if _, err := Open(e.h, dev.Reopen(), Options{}); err != nil {
		t.Fatalf("own disk: %v", err)
	}
	// An arena whose parameters disagree with the disk refuses Format.
	path := filepath.Join(t.TempDir(), "a2")
	var params [pram.NumParams]uint64
	params[ParamBlockSize] = 4096
	params[ParamDiskBlocks] = 7
	a, err := pram.Format(path, pram.Options{Size: 8 << 20, Params: params})
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	tx := a.Begin()
	h, err := alloc.Format(tx)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Format(tx, h, NewMemDevice(8<<20), 4096, Options{}); !errors.Is(err, ErrGeometry) {
		t.Fatalf("format with mismatched parameters: %v", err)
	}
	tx.Abort()
	// An arena without a free map.
	tx = a.Begin()
	if _, err := alloc.Format(tx); err != nil {
		t.Fatal(err)
	}
	tx.Commit()
	h, _ = alloc.Open(a)
	d := NewMemDevice(8 << 20)
	FormatDisk(d, a.Geometry().UUID, 4096)
	if _, err := Open(h, d, Options{}); !errors.Is(err, ErrGeometry) && !errors.Is(err, ErrCorrupt) {
		t.Fatalf("arena without free map: %v", err)
	}
}

func FuzzDecodeSuper(f *testing.F) {
	good := encodeDiskSuper(Super{Version: DiskVersion, BlockSize: 65536, UUID: [16]byte{1}, Blocks: 100})
	f.Add(good[:SuperSize], int64(100<<16))
	f.Add(make([]byte, SuperSize), int64(0))
	f.Add([]byte("CONQDISK"), int64(1<<20))
	f.Fuzz(func(t *testing.T, b []byte, size int64) {
		s, err := DecodeSuper(b, size)
		if err != nil {
			return
		}
		if !ValidBlockSize(uint64(s.BlockSize)) || s.Blocks < MinBlocks || (size > 0 && s.Blocks > BlockCount(size, s.BlockSize)) {
			t.Fatalf("accepted %+v for a device of %d bytes", s, size)
		}
	})
}

// TestSuperBackup: block 0 keeps a copy of the superblock. Damage to the
// superblock (checksum, magic, a field) is refused with ErrSuperBackup while
// the copy is intact, and RestoreSuper writes the copy back; damage to both
// is refused for good. Open gives a disk made without the copy one. (Found
// by corrupting an image: one flipped bit of the disk superblock made the
// file system unusable and unrepairable.)
func TestSuperBackup(t *testing.T) {
	dev := NewMemDevice(1 << 20)
	uuid := [16]byte{7, 7, 7}
	want, err := FormatDisk(dev, uuid, 4096)
	if err != nil {
		t.Fatal(err)
	}
	flip := func(off int64) {
		b := make([]byte, 1)
		dev.ReadAt(b, off)
		b[0] ^= 0x20
		dev.WriteAt(b, off)
	}
	for _, c := range []struct {
		name string
		off  int64
		want error
	}{
		{"checksum", superOffChecksum + 2, ErrChecksum},
		{"magic", superOffMagic + 4, ErrNotConquestDisk},
		{"uuid", superOffUUID + 1, ErrChecksum},
		{"version", superOffVersion, ErrVersion},
	} {
		flip(c.off)
		if _, err := ReadSuper(dev); !errors.Is(err, ErrSuperBackup) || !errors.Is(err, c.want) {
			t.Fatalf("%s: ReadSuper = %v, want %v and ErrSuperBackup", c.name, err, c.want)
		}
		if done, err := RestoreSuper(dev); !done || err != nil {
			t.Fatalf("%s: RestoreSuper = %v, %v", c.name, done, err)
		}
		if done, err := RestoreSuper(dev); done || err != nil {
			t.Fatalf("%s: second RestoreSuper = %v, %v; want nothing to do", c.name, done, err)
		}
		if got, err := ReadSuper(dev); err != nil || got != want {
			t.Fatalf("%s: after RestoreSuper: %+v, %v; want %+v", c.name, got, err, want)
		}
	}
	flip(superOffBlocks)
	flip(superBackup + superOffBlocks)
	if _, err := ReadSuper(dev); errors.Is(err, ErrSuperBackup) || !errors.Is(err, ErrChecksum) {
		t.Fatalf("both damaged: ReadSuper = %v", err)
	}
	if _, err := RestoreSuper(dev); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("both damaged: RestoreSuper = %v, want ErrCorrupt", err)
	}
	flip(superOffBlocks)
	flip(superBackup + superOffBlocks)

	// A disk without the copy gets it when a store opens it.
	e := newEnv(t, envOpts{blockSize: 4096, dev: NewMemDevice(8 << 20)})
	mem := e.dev.(*MemDevice)
	e.s.Close()
	mem.WriteAt(make([]byte, SuperSize), superBackup)
	d2 := mem.Reopen()
	s, err := Open(e.h, d2, Options{})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	page := make([]byte, superIO)
	d2.ReadAt(page, 0)
	if !hasBackup(page) {
		t.Fatal("Open did not write the superblock's copy")
	}
}
