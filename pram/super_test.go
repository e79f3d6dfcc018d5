package pram

import (
	"bytes"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	farm "github.com/dgryski/go-farm"
)

// TestSuperblockLayoutPinned pins the superblock format: changing any of
// these values changes the on-arena format and needs a new Version.
func TestSuperblockLayoutPinned(t *testing.T) {
	pins := []struct {
		name      string
		got, want int
	}{
		{"offMagic", offMagic, 0}, {"offVersion", offVersion, 8}, {"offFeatures", offFeatures, 12},
		{"offUUID", offUUID, 16}, {"offSize", offSize, 32}, {"offJournal", offJournal, 40},
		{"offJournalLen", offJournalLen, 48}, {"offHeap", offHeap, 56}, {"offCreated", offCreated, 64},
		{"offParams", offParams, 72}, {"NumParams", NumParams, 8}, {"offChecksum", offChecksum, 136},
		{"superStatic", superStatic, 144}, {"offBackup", offBackup, 2048}, {"offState", offState, 512}, {"offMounts", offMounts, 520},
		{"offBoot", offBoot, 528}, {"offCheckDue", offCheckDue, 544},
		{"offRoots", offRoots, 576}, {"NumRoots", NumRoots, 32}, {"superDynEnd", superDynEnd, 832},
		{"journalHeader", journalHeader, 64}, {"MinSize", MinSize, 1 << 20}, {"PageSize", PageSize, 4096},
		{"Version", int(Version), 1}, {"StateClean", int(StateClean), 1}, {"StateDirty", int(StateDirty), 2},
		{"FeatureDisk", int(FeatureDisk), 1},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s = %d, pinned at %d", p.name, p.got, p.want)
		}
	}
	if Magic != "CONQPRAM" {
		t.Errorf("Magic = %q", Magic)
	}
	if offParams+8*NumParams != offChecksum || offChecksum+8 != superStatic || superStatic > offState ||
		offMounts+8 > offBoot || offBoot+16 > offCheckDue || offCheckDue+8 > offRoots || superDynEnd > offBackup ||
		offBackup+superStatic > PageSize {
		t.Error("superblock fields overlap or overflow the page")
	}
}

func testGeometry() Geometry {
	g := Geometry{Size: 8 << 20, JournalOff: PageSize, JournalLen: 256 << 10, Features: FeatureDisk,
		CreatedNs: 1_700_000_000_123_456_789, Params: [NumParams]uint64{1 << 20, 4096, 1 << 30}}
	g.HeapOff = Off(PageSize + g.JournalLen)
	for i := range g.UUID {
		g.UUID[i] = byte(0xa0 + i)
	}
	return g
}

// TestSuperblockGolden pins the encoding of a fixed geometry byte for byte.
func TestSuperblockGolden(t *testing.T) {
	page := make([]byte, PageSize)
	encodeSuper(page, testGeometry())
	const want = "434f4e515052414d" + "01000000" + "01000000" + // magic, version 1, features
		"a0a1a2a3a4a5a6a7a8a9aaabacadaeaf" + // UUID
		"0000800000000000" + "0010000000000000" + "0000040000000000" + "0010040000000000" + // size, journal, len, heap
		"15cd853dfe9c9717" + // created ns 1_700_000_000_123_456_789
		"0000100000000000" + "0010000000000000" + "0000004000000000" + // params 0..2
		"00000000000000000000000000000000000000000000000000000000000000000000000000000000" // params 3..7
	got := hex.EncodeToString(page[:offChecksum])
	if got != want {
		t.Errorf("superblock\n got %s\nwant %s", got, want)
	}
	if sum := binary.LittleEndian.Uint64(page[offChecksum:]); sum != farm.Hash64(page[:offChecksum]) {
		t.Errorf("checksum %#x is not farm.Hash64 of the static part", sum)
	}
	if !bytes.Equal(page[offBackup:offBackup+superStatic], page[:superStatic]) {
		t.Error("the backup copy at offBackup is not the static part")
	}
	if got := testGeometry().UUIDString(); got != "a0a1a2a3-a4a5-a6a7-a8a9-aaabacadaeaf" {
		t.Errorf("UUIDString = %s", got)
	}
}

// reseal recomputes the checksum of a superblock image.
func reseal(page []byte) {
	binary.LittleEndian.PutUint64(page[offChecksum:], farm.Hash64(page[:offChecksum]))
}

// TestValidateSentinels: each kind of damage returns its sentinel error.
func TestValidateSentinels(t *testing.T) {
	good := make([]byte, PageSize)
	encodeSuper(good, testGeometry())
	g, err := Validate(good, 8<<20)
	if err != nil || g != testGeometry() {
		t.Fatalf("Validate(good) = %+v, %v", g, err)
	}
	if _, err := Validate(good, 0); err != nil {
		t.Fatalf("Validate without a device size: %v", err)
	}
	le := binary.LittleEndian
	cases := []struct {
		name   string
		damage func(p []byte) []byte
		size   uint64
		want   error
	}{
		{"short", func(p []byte) []byte { return p[:superDynEnd-1] }, 0, ErrNotConquest},
		{"empty", func(p []byte) []byte { return nil }, 0, ErrNotConquest},
		{"zero", func(p []byte) []byte { return make([]byte, PageSize) }, 0, ErrNotConquest},
		{"magic", func(p []byte) []byte { p[3] ^= 1; return p }, 0, ErrNotConquest},
		{"version", func(p []byte) []byte { le.PutUint32(p[offVersion:], 2); reseal(p); return p }, 0, ErrVersion},
		{"version 2 unsealed", func(p []byte) []byte { le.PutUint32(p[offVersion:], 2); return p }, 0, ErrVersion},
		{"version 0 sealed", func(p []byte) []byte { le.PutUint32(p[offVersion:], 0); reseal(p); return p }, 0, ErrVersion},
		{"version huge sealed", func(p []byte) []byte { le.PutUint32(p[offVersion:], 1831600129); reseal(p); return p }, 0, ErrVersion},
		// A version field no later format would have, unsealed: damage
		// (a corruption review saw "unsupported version 1831600129").
		{"version 0 unsealed", func(p []byte) []byte { le.PutUint32(p[offVersion:], 0); return p }, 0, ErrChecksum},
		{"version damaged", func(p []byte) []byte { le.PutUint32(p[offVersion:], 1831600129); return p }, 0, ErrChecksum},
		{"version high byte", func(p []byte) []byte { p[offVersion+3] ^= 0x40; return p }, 0, ErrChecksum},
		{"features", func(p []byte) []byte { le.PutUint32(p[offFeatures:], 1<<7); reseal(p); return p }, 0, ErrVersion},
		{"checksum", func(p []byte) []byte { p[offChecksum] ^= 1; return p }, 0, ErrChecksum},
		{"uuid flip", func(p []byte) []byte { p[offUUID+5] ^= 0x10; return p }, 0, ErrChecksum},
		{"param flip", func(p []byte) []byte { p[offParams+9] ^= 1; return p }, 0, ErrChecksum},
		{"size flip", func(p []byte) []byte { p[offSize+2] ^= 1; return p }, 0, ErrChecksum},
		{"device size", func(p []byte) []byte { return p }, 16 << 20, ErrSizeMismatch},
		{"sealed size", func(p []byte) []byte { le.PutUint64(p[offSize:], 16<<20); reseal(p); return p }, 8 << 20, ErrSizeMismatch},
		{"too small", func(p []byte) []byte { le.PutUint64(p[offSize:], MinSize-PageSize); reseal(p); return p }, 0, ErrTooSmall},
		{"journal off", func(p []byte) []byte { le.PutUint64(p[offJournal:], 2*PageSize); reseal(p); return p }, 0, ErrCorrupt},
		{"journal len odd", func(p []byte) []byte { le.PutUint64(p[offJournalLen:], 256<<10+8); reseal(p); return p }, 0, ErrCorrupt},
		{"journal len tiny", func(p []byte) []byte { le.PutUint64(p[offJournalLen:], PageSize); reseal(p); return p }, 0, ErrCorrupt},
		{"heap gap", func(p []byte) []byte { le.PutUint64(p[offHeap:], le.Uint64(p[offHeap:])+PageSize); reseal(p); return p }, 0, ErrCorrupt},
		{"heap past end", func(p []byte) []byte {
			le.PutUint64(p[offJournalLen:], 8<<20)
			le.PutUint64(p[offHeap:], PageSize+8<<20)
			reseal(p)
			return p
		}, 0, ErrCorrupt},
	}
	sentinels := []error{ErrNotConquest, ErrVersion, ErrChecksum, ErrSizeMismatch, ErrCorrupt, ErrTooSmall}
	for _, tc := range cases {
		p := append([]byte(nil), good...)
		_, err := Validate(tc.damage(p), tc.size)
		if !errors.Is(err, tc.want) {
			t.Errorf("%s: Validate = %v, want %v", tc.name, err, tc.want)
		}
		for _, s := range sentinels {
			if s != tc.want && errors.Is(err, s) {
				t.Errorf("%s: error %v also wraps %v", tc.name, err, s)
			}
		}
	}
}

// TestDynamicPartNotChecksummed: state, mount counter and root slots change
// while mounted without invalidating the checksum.
func TestDynamicPartNotChecksummed(t *testing.T) {
	p := make([]byte, PageSize)
	encodeSuper(p, testGeometry())
	for off := offState; off < superDynEnd; off++ {
		p[off] = 0xff
	}
	if _, err := Validate(p, 0); err != nil {
		t.Fatal(err)
	}
}

// TestSuperBackup: damage to the superblock's static part (a flipped bit of
// its checksum, magic or a field) makes Open refuse the arena with
// ErrSuperBackup as long as the copy page 0 keeps is intact, and
// RestoreSuper writes the copy back, after which the arena opens with its
// geometry and contents. Damage to both is refused (ErrCorrupt), as is a
// foreign image (no ErrSuperBackup). Open writes the copy into an arena
// made before it existed. (Found by corrupting random bytes of an image:
// one flipped bit of the superblock lost the whole file system.)
func TestSuperBackup(t *testing.T) {
	a, path := newTestArena(t, 2<<20)
	geo := a.Geometry()
	a.PutU64(a.Geometry().HeapOff, 0xfeed)
	if err := a.Close(); err != nil {
		t.Fatal(err)
	}
	flip := func(off int64, bit byte) {
		t.Helper()
		f, err := os.OpenFile(path, os.O_RDWR, 0)
		if err != nil {
			t.Fatal(err)
		}
		defer f.Close()
		b := make([]byte, 1)
		if _, err := f.ReadAt(b, off); err != nil {
			t.Fatal(err)
		}
		b[0] ^= bit
		if _, err := f.WriteAt(b, off); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range []struct {
		name string
		off  int64
		want error
	}{
		{"checksum", offChecksum + 3, ErrChecksum},
		{"magic", offMagic + 1, ErrNotConquest},
		{"journal length", offJournalLen + 1, ErrChecksum},
		{"version", offVersion, ErrVersion},
	} {
		flip(c.off, 0x10)
		_, err := Open(path)
		if !errors.Is(err, ErrSuperBackup) || !errors.Is(err, c.want) {
			t.Fatalf("%s: Open = %v, want %v and ErrSuperBackup", c.name, err, c.want)
		}
		if done, err := RestoreSuper(path); err != nil || !done {
			t.Fatalf("%s: RestoreSuper = %v, %v", c.name, done, err)
		}
		if done, err := RestoreSuper(path); err != nil || done {
			t.Fatalf("%s: second RestoreSuper = %v, %v; want nothing to do", c.name, done, err)
		}
		a, err := Open(path)
		if err != nil {
			t.Fatalf("%s: Open after RestoreSuper: %v", c.name, err)
		}
		if a.Geometry() != geo || a.U64(geo.HeapOff) != 0xfeed {
			t.Fatalf("%s: geometry %+v, want %+v, or lost contents", c.name, a.Geometry(), geo)
		}
		must(t, a.Close())
	}
	// Both damaged: refused for good.
	flip(offSize+1, 1)
	flip(offBackup+offSize+1, 1)
	if _, err := Open(path); err == nil || errors.Is(err, ErrSuperBackup) || !errors.Is(err, ErrChecksum) {
		t.Fatalf("both damaged: Open = %v", err)
	}
	if _, err := RestoreSuper(path); !errors.Is(err, ErrCorrupt) {
		t.Fatalf("both damaged: RestoreSuper = %v, want ErrCorrupt", err)
	}
	flip(offSize+1, 1)
	flip(offBackup+offSize+1, 1)
	// An arena without the copy gets it at Open.
	f, err := os.OpenFile(path, os.O_RDWR, 0)
	must(t, err)
	_, err = f.WriteAt(make([]byte, superStatic), offBackup)
	must(t, err)
	must(t, f.Close())
	a, err = Open(path)
	if err != nil {
		t.Fatal(err)
	}
	must(t, a.Close())
	page, err := os.ReadFile(path)
	must(t, err)
	if !bytes.Equal(page[offBackup:offBackup+superStatic], page[:superStatic]) {
		t.Fatal("Open did not write the backup copy")
	}
	// A foreign image is not offered a restore.
	foreign := filepath.Join(t.TempDir(), "foreign")
	must(t, os.WriteFile(foreign, bytes.Repeat([]byte{0x5a}, 2<<20), 0o600))
	if _, err := Open(foreign); !errors.Is(err, ErrNotConquest) || errors.Is(err, ErrSuperBackup) {
		t.Fatalf("foreign image: Open = %v", err)
	}
}

func must(t *testing.T, err error) {
	t.Helper()
	if err != nil {
		t.Fatal(err)
	}
}

// TestFixImageLength (found by an outside review): an arena image file cut
// short or grown by a page was refused by mount and by `fsck --repair`
// alike, though nothing else was wrong with it. FixImageLength gives it a
// length its superblock's size allows: the arena's, or with the
// checkpoint slots when a slot's header follows the arena.
func TestFixImageLength(t *testing.T) {
	const s = "checkpointed"
	for _, tc := range []struct {
		name  string
		slots bool  // a crash left checkpoint slots after the arena
		delta int64 // the length's change from the image's
		want  string
	}{
		{"cut short", false, -PageSize, "grew it"},
		{"cut to half", false, -(2 << 20), "grew it"},
		{"grown", false, PageSize, "cut it"},
		{"grown past the slots", false, int64(TailLen(4<<20)) + PageSize, "cut it"},
		{"slots cut short", true, -PageSize, "the arena and its checkpoint slots"},
		{"slots grown", true, PageSize, "the arena and its checkpoint slots"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := formatClosed(t, 4<<20)
			a := openShadowed(t, path, OpenOptions{})
			commitString(a, s)
			if tc.slots {
				must(t, a.Sync()) // a checkpoint: through a slot
				name := a.Shadow().Path
				must(t, a.Abandon())
				must(t, removeShadowFiles(name)) // and the RAM copy lost (a power loss)
			} else {
				must(t, a.Close())
			}
			st, err := os.Stat(path)
			must(t, err)
			want := st.Size()
			must(t, os.Truncate(path, st.Size()+tc.delta))
			if _, err := Open(path); !errors.Is(err, ErrSizeMismatch) {
				t.Fatalf("before: Open = %v, want ErrSizeMismatch", err)
			}
			did, err := FixImageLength(path)
			must(t, err)
			if !strings.Contains(did, tc.want) {
				t.Errorf("FixImageLength: %q, want it to say %q", did, tc.want)
			}
			if st, err := os.Stat(path); err != nil || st.Size() != want {
				t.Errorf("length after: %v, %v; want %d", st, err, want)
			}
			b, err := OpenWith(path, OpenOptions{Interval: -1, Logf: t.Logf})
			must(t, err)
			defer b.Close()
			if got := heapString(b, len(s)); got != s {
				t.Errorf("after: the heap starts %q, want %q", got, s)
			}
		})
	}
}
