package dirhash

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"conquest/alloc"
	"conquest/pram"
)

// The on-arena format: sizes and offsets may not drift.
func TestLayoutPinned(t *testing.T) {
	pins := []struct {
		name      string
		got, want int
	}{
		{"rootSize", rootSize, 64},
		{"rootOffDepth", rootOffDepth, 5},
		{"rootOffCount", rootOffCount, 8},
		{"rootOffTable", rootOffTable, 16},
		{"rootOffAtDepth", rootOffAtDepth, 24},
		{"rootOffBuckets", rootOffBuckets, 32},
		{"rootOffPages", rootOffPages, 40},
		{"pageHdr", pageHdr, 32},
		{"pageOffN", pageOffN, 6},
		{"pageOffSize", pageOffSize, 8},
		{"pageOffNameLo", pageOffNameLo, 10},
		{"pageOffNameLive", pageOffNameLive, 12},
		{"pageOffPrefix", pageOffPrefix, 16},
		{"pageOffNext", pageOffNext, 24},
		{"slotSize", slotSize, 24},
		{"slotOffIno", slotOffIno, 8},
		{"slotOffName", slotOffName, 16},
		{"slotOffLen", slotOffLen, 18},
		{"slotOffType", slotOffType, 19},
		{"minPage", minPage, 256},
		{"maxPage", maxPage, 4096},
		{"leafBytes", leafBytes, 65536},
		{"MaxDepth", MaxDepth, 30},
		{"maxOrdinal", maxOrdinal, 126},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s = %d, want %d", p.name, p.got, p.want)
		}
	}
	if leafBytes > alloc.MaxAlloc || 8<<topBits > alloc.MaxAlloc {
		t.Errorf("table leaf %d or top %d exceeds alloc.MaxAlloc", leafBytes, 8<<topBits)
	}
	// The largest key leaves room for the cursor key+1 below 1<<62.
	if maxKey := uint64(1<<hashBits-1)<<ordBits | maxOrdinal; maxKey+1 >= 1<<62 {
		t.Errorf("largest key %#x: cursor %#x not below 1<<62", maxKey, maxKey+1)
	}
}

func TestEmpty(t *testing.T) {
	e := newEnv(t, 4<<20)
	d := e.dir()
	if d.Len() != 0 {
		t.Fatalf("Len = %d", d.Len())
	}
	if _, _, ok := d.Lookup([]byte("x")); ok {
		t.Fatal("lookup in empty directory found x")
	}
	n := 0
	if err := d.Scan(0, func(Entry, uint64) bool { n++; return true }); err != nil || n != 0 {
		t.Fatalf("scan: %d entries, %v", n, err)
	}
	e.check()
	// An empty directory is small: root, one-slot table, one 256-B page.
	if used, want := e.h.Stats().UsedBytes, e.h.ClassSize(rootSize)+e.h.ClassSize(8)+minPage; used != want || used > 336 {
		t.Errorf("empty directory uses %d bytes, want %d (<= 336)", used, want)
	}
}

func TestBasicOps(t *testing.T) {
	e := newEnv(t, 4<<20)
	if err := e.insert("a", 10, 8); err != nil {
		t.Fatal(err)
	}
	if err := e.insert("b", 11, 4); err != nil {
		t.Fatal(err)
	}
	if err := e.insert("a", 12, 8); !errors.Is(err, ErrExists) {
		t.Fatalf("second insert of a: %v, want ErrExists", err)
	}
	if ino, typ, ok := e.dir().Lookup([]byte("a")); !ok || ino != 10 || typ != 8 {
		t.Fatalf("lookup a = %d %d %v", ino, typ, ok)
	}
	if oi, ot, err := e.replace("a", 20, 10); err != nil || oi != 10 || ot != 8 {
		t.Fatalf("replace a = %d %d %v", oi, ot, err)
	}
	if _, _, err := e.replace("zz", 1, 1); !errors.Is(err, ErrNotFound) {
		t.Fatalf("replace of missing name: %v", err)
	}
	if ino, typ, err := e.delete("b"); err != nil || ino != 11 || typ != 4 {
		t.Fatalf("delete b = %d %d %v", ino, typ, err)
	}
	if _, _, err := e.delete("b"); !errors.Is(err, ErrNotFound) {
		t.Fatalf("second delete of b: %v", err)
	}
	e.sameAs(map[string]val{"a": {20, 10}})
	e.check()
	e.restart()
	e.sameAs(map[string]val{"a": {20, 10}})
	e.check()
}

func TestBadNames(t *testing.T) {
	e := newEnv(t, 4<<20)
	long := strings.Repeat("n", MaxName)
	if err := e.insert(long, 1, 8); err != nil {
		t.Fatalf("insert of a %d-byte name: %v", MaxName, err)
	}
	cases := []struct {
		name string
		want error
	}{
		{"", ErrBadName},
		{".", ErrBadName},
		{"..", ErrBadName},
		{"a/b", ErrBadName},
		{"/", ErrBadName},
		{"a\x00b", ErrBadName},
		{long + "n", ErrNameTooLong},
		{strings.Repeat("x", 4096), ErrNameTooLong},
	}
	for _, c := range cases {
		if err := e.insert(c.name, 1, 8); !errors.Is(err, c.want) {
			t.Errorf("insert %.20q: %v, want %v", c.name, err, c.want)
		}
		if _, _, err := e.delete(c.name); !errors.Is(err, c.want) {
			t.Errorf("delete %.20q: %v, want %v", c.name, err, c.want)
		}
		if _, _, err := e.replace(c.name, 1, 1); !errors.Is(err, c.want) {
			t.Errorf("replace %.20q: %v, want %v", c.name, err, c.want)
		}
		if _, _, ok := e.dir().Lookup([]byte(c.name)); ok {
			t.Errorf("lookup %.20q found something", c.name)
		}
	}
	// Names with every other byte value, including "..." and ".x".
	var odd [][]byte
	for b := 1; b < 256; b++ {
		if b != '/' && b != '.' {
			odd = append(odd, []byte{byte(b), byte(b)})
		}
	}
	odd = append(odd, []byte("..."), []byte(".x"), []byte("x."), []byte{'.', 0xff})
	for i, nm := range odd {
		if err := e.update(func(tx *pram.Tx) error { return e.dir().Insert(tx, nm, uint64(i), 1) }); err != nil {
			t.Fatalf("insert %q: %v", nm, err)
		}
	}
	for i, nm := range odd {
		if ino, _, ok := e.dir().Lookup(nm); !ok || ino != uint64(i) {
			t.Fatalf("lookup %q = %d %v", nm, ino, ok)
		}
	}
	if e.dir().Len() != uint64(len(odd)+1) {
		t.Fatalf("Len = %d, want %d", e.dir().Len(), len(odd)+1)
	}
	e.check()
}

// Names returned by Scan are copies: changing them changes nothing stored,
// and they stay intact after the directory changes.
func TestScanNamesAreCopies(t *testing.T) {
	e := newEnv(t, 4<<20)
	for i := range 50 {
		if err := e.insert(name(i), uint64(i), 8); err != nil {
			t.Fatal(err)
		}
	}
	var kept []Entry
	e.dir().Scan(0, func(en Entry, _ uint64) bool {
		kept = append(kept, en)
		en.Name[0] = 'X'
		en.Name = append(en.Name, "tail"...) // must not run into a neighbour
		return true
	})
	for i := range 50 {
		if err := e.update(func(tx *pram.Tx) error {
			_, _, err := e.dir().Delete(tx, []byte(name(i)))
			return err
		}); err != nil {
			t.Fatal(err)
		}
	}
	for _, en := range kept {
		if !bytes.HasPrefix(en.Name, []byte("Xile-")) || len(en.Name) != len(name(0)) {
			t.Fatalf("kept name changed: %q", en.Name)
		}
	}
}

// Grow to many entries and back to none, checking structure and contents
// on the way up and down and across a restart; at the end the directory is
// as small as a new one.
func TestGrowAndShrink(t *testing.T) {
	n := 100_000
	if testing.Short() {
		n = 40_000
	}
	e := newEnv(t, 64<<20)
	model := map[string]val{}
	for i := range n {
		nm := name(i)
		if err := e.insert(nm, uint64(i+1), 8); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
		model[nm] = val{uint64(i + 1), 8}
	}
	t.Logf("%d entries: %v", n, e.dir())
	e.check()
	e.restart()
	e.sameAs(model)
	for i := range n - 10 {
		nm := name(i)
		if _, _, err := e.delete(nm); err != nil {
			t.Fatalf("delete %d: %v", i, err)
		}
		delete(model, nm)
	}
	t.Logf("after deletes: %v", e.dir())
	e.check()
	e.sameAs(model)
	if r := e.shape(); r.depth > 2 || r.pages > 2 {
		t.Errorf("10 entries left in %v: table and buckets did not shrink", e.dir())
	}
	for i := n - 10; i < n; i++ {
		if _, _, err := e.delete(name(i)); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.shape(); r.depth != 0 || r.pages != 1 || r.count != 0 {
		t.Errorf("empty again: %v", e.dir())
	}
	e.check()
	// All storage but the empty directory's is free again.
	if used := e.h.Stats().UsedBytes; used > 512 {
		t.Errorf("empty directory uses %d bytes after growing and shrinking", used)
	}
}

func TestDestroy(t *testing.T) {
	e := newEnv(t, 16<<20)
	base := e.h.Stats()
	var roots []pram.Off
	for k, n := range []int{0, 1, 100, 30_000} {
		var root pram.Off
		if err := e.update(func(tx *pram.Tx) (err error) {
			root, err = Create(tx, e.h)
			return err
		}); err != nil {
			t.Fatal(err)
		}
		for i := range n {
			if err := e.update(func(tx *pram.Tx) error {
				return Open(e.h, root).Insert(tx, []byte(name(i)), uint64(i), uint8(k))
			}); err != nil {
				t.Fatal(err)
			}
		}
		roots = append(roots, root)
	}
	for _, root := range roots {
		if err := e.update(func(tx *pram.Tx) error { return Destroy(tx, e.h, root) }); err != nil {
			t.Fatal(err)
		}
	}
	if s := e.h.Stats(); s.UsedBytes != base.UsedBytes || s.Objects != base.Objects {
		t.Fatalf("after Destroy: %d bytes in %d objects, before %d in %d", s.UsedBytes, s.Objects, base.UsedBytes, base.Objects)
	}
	e.check()
}

// Find tells a name the directory does not hold (ErrNotFound) from a
// damaged directory (ErrCorrupt), which Lookup answers as not found too.
func TestFindDamaged(t *testing.T) {
	e := newEnv(t, 4<<20)
	if err := e.insert("a", 10, 8); err != nil {
		t.Fatal(err)
	}
	d := e.dir()
	if ino, typ, err := d.Find([]byte("a")); err != nil || ino != 10 || typ != 8 {
		t.Fatalf("Find(a) = %d %d %v", ino, typ, err)
	}
	if _, _, err := d.Find([]byte("b")); !errors.Is(err, ErrNotFound) {
		t.Fatalf("Find(b) = %v, want ErrNotFound", err)
	}
	for _, root := range []pram.Off{1 << 40, d.Root() + 8} {
		wild := Open(e.h, root)
		if _, _, err := wild.Find([]byte("a")); !errors.Is(err, ErrCorrupt) {
			t.Errorf("Find in a directory rooted at %d = %v, want ErrCorrupt", root, err)
		}
		if _, _, ok := wild.Lookup([]byte("a")); ok {
			t.Errorf("Lookup in a directory rooted at %d found a", root)
		}
	}
}
