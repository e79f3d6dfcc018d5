package dirhash

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"conquest/pram"
)

// regions lists the directory's allocations: root, table, pages.
func (e *env) regions() (root pram.Off, table []pram.Off, pages []page) {
	e.t.Helper()
	d := e.dir()
	r, err := d.loadRoot()
	if err != nil {
		e.t.Fatal(err)
	}
	if table, err = d.tableAllocs(&r); err != nil {
		e.t.Fatal(err)
	}
	if err := d.walk(&r, func(b *bucket) error {
		pages = append(pages, b.pages...)
		return nil
	}); err != nil {
		e.t.Fatal(err)
	}
	return d.root, table, pages
}

// region is a byte range of the directory that tests damage.
type region struct {
	off pram.Off
	n   int
}

// damageRegions lists the directory's allocations as byte ranges: the
// table (its leaves) and the bucket pages, and the root if withRoot.
func (e *env) damageRegions(withRoot bool) []region {
	e.t.Helper()
	root, table, pages := e.regions()
	var regs []region
	if withRoot {
		regs = append(regs, region{root, rootSize})
	}
	for _, t := range table {
		n, _ := e.h.SizeOf(t)
		regs = append(regs, region{t, int(n)})
	}
	for _, p := range pages {
		regs = append(regs, region{p.off, p.size()})
	}
	return regs
}

// fullPage returns a page with at least two entries.
func fullPage(t *testing.T, pages []page) page {
	for _, p := range pages {
		if p.n() >= 2 {
			return p
		}
	}
	t.Fatal("no page with two entries")
	return page{}
}

// Each kind of damage is reported by Check as ErrCorrupt with a telling
// message, and is undone by aborting the transaction that made it.
func TestCheckFindsDamage(t *testing.T) {
	e := newEnv(t, 16<<20)
	for i := range 3000 {
		if err := e.insert(name(i), uint64(i), 8); err != nil {
			t.Fatal(err)
		}
	}
	e.check()
	root, table, pages := e.regions()
	p := fullPage(t, pages)
	slot := func(i int) pram.Off { return p.off + pram.Off(pageHdr+slotSize*i) }
	var other page // a different bucket's primary page
	for _, q := range pages {
		if q.prefix() != p.prefix() || q.depth() != p.depth() {
			other = q
			break
		}
	}
	cases := []struct {
		name   string
		damage func(tx *pram.Tx)
		want   string
	}{
		{"root count", func(tx *pram.Tx) { tx.Set64(root+rootOffCount, 3001) }, "root counts 3001 entries"},
		{"root magic", func(tx *pram.Tx) { tx.Set32(root, 0) }, "bad magic"},
		{"root depth", func(tx *pram.Tx) { tx.Set8(root+rootOffDepth, 31) }, "global depth 31"},
		{"root table", func(tx *pram.Tx) { tx.Set64(root+rootOffTable, 8) }, "table offset 8 outside the heap"},
		{"root buckets", func(tx *pram.Tx) { tx.Set64(root+rootOffBuckets, 1) }, "root counts 1 buckets"},
		{"root at-depth", func(tx *pram.Tx) { tx.Set64(root+rootOffAtDepth, 0) }, "buckets at depth"},
		{"table slot", func(tx *pram.Tx) { tx.Set64(table[0], uint64(other.off)) }, "table slot 0"},
		{"page magic", func(tx *pram.Tx) { tx.Set32(p.off, 7) }, "bad magic"},
		{"page size", func(tx *pram.Tx) { tx.Set16(p.off+pageOffSize, 300) }, "bad size 300"},
		{"page count", func(tx *pram.Tx) { tx.Set16(p.off+pageOffN, 200) }, "n=200"},
		{"page prefix", func(tx *pram.Tx) { tx.Set64(p.off+pageOffPrefix, p.prefix()^1) }, "prefix"},
		{"page depth", func(tx *pram.Tx) { tx.Set8(p.off+pageOffDepth, 40) }, "depth 40"},
		{"name live", func(tx *pram.Tx) { tx.Set16(p.off+pageOffNameLive, uint16(p.nameLive()-1)) }, "header says"},
		{"overflow to self", func(tx *pram.Tx) { tx.Set64(p.off+pageOffNext, uint64(p.off)) }, "loops"},
		{"overflow to other", func(tx *pram.Tx) { tx.Set64(p.off+pageOffNext, uint64(other.off)) }, "overflow page"},
		{"key hash", func(tx *pram.Tx) { tx.Set64(slot(0), p.key(0)^1<<ordBits) }, "does not match the hash"},
		{"key ordinal", func(tx *pram.Tx) { tx.Set64(slot(0), p.key(0)|maxOrdinal+1) }, "ordinal beyond"},
		{"key bucket", func(tx *pram.Tx) { tx.Set64(slot(0), p.key(0)^1<<61) }, "not in bucket"},
		{"duplicate key", func(tx *pram.Tx) { tx.Set64(slot(1), p.key(0)) }, "twice"},
		{"name offset", func(tx *pram.Tx) { tx.Set16(slot(0)+slotOffName, 5) }, "out of range"},
		{"name length", func(tx *pram.Tx) { tx.Set8(slot(0)+slotOffLen, 0) }, "out of range"},
		{"name overlap", func(tx *pram.Tx) {
			o := le.Uint16(p.b[pageHdr+slotSize+slotOffName:])
			tx.Set16(slot(0)+slotOffName, o)
		}, "overlap"},
		{"name bytes", func(tx *pram.Tx) {
			nm, _ := p.name(0)
			o := le.Uint16(p.b[pageHdr+slotOffName:])
			_ = nm
			tx.Set8(p.off+pram.Off(o), '/')
		}, "invalid name"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			tx := e.a.Begin()
			c.damage(tx)
			errs := e.dir().Check(e.h.NewChecker())
			// Readers must not panic either.
			e.dir().Lookup([]byte(name(1)))
			e.dir().Scan(0, func(Entry, uint64) bool { return true })
			e.dir().Len()
			tx.Abort()
			if len(errs) == 0 {
				t.Fatalf("damage not reported")
			}
			found := false
			for _, err := range errs {
				if !errors.Is(err, ErrCorrupt) {
					t.Errorf("error not ErrCorrupt: %v", err)
				}
				found = found || strings.Contains(err.Error(), c.want)
			}
			if !found {
				t.Errorf("no error mentions %q: %v", c.want, errs)
			}
			e.check() // the abort repaired it
		})
	}
}

// An overflow chain that loops back is reported, and readers stop.
func TestCheckChainLoop(t *testing.T) {
	setHash(t, func([]byte) uint64 { return 42 << 20 })
	e := newEnv(t, 8<<20)
	for i := range 100 {
		if err := e.insert(fmt.Sprintf("%d-%s", i, strings.Repeat("y", 100)), uint64(i), 8); err != nil {
			t.Fatal(err)
		}
	}
	_, _, pages := e.regions()
	if len(pages) < 3 {
		t.Fatalf("want a chain of 3+ pages, have %d", len(pages))
	}
	tx := e.a.Begin()
	tx.Set64(pages[len(pages)-1].off+pageOffNext, uint64(pages[1].off))
	errs := e.dir().Check(e.h.NewChecker())
	if _, _, ok := e.dir().Lookup([]byte("no such name")); ok {
		t.Error("lookup in a looping chain found a missing name")
	}
	err := e.dir().Scan(0, func(Entry, uint64) bool { return true })
	tx.Abort()
	if len(errs) == 0 || !strings.Contains(fmt.Sprint(errs), "loops") {
		t.Errorf("loop not reported: %v", errs)
	}
	if !errors.Is(err, ErrCorrupt) {
		t.Errorf("scan of a looping chain: %v", err)
	}
	e.check()
}

// Random damage anywhere in the directory's memory never makes Check, the
// readers or the writers panic or hang.
func TestDamageNeverPanics(t *testing.T) {
	e := newEnv(t, 16<<20)
	for i := range 2000 {
		if err := e.insert(name(i), uint64(i), 8); err != nil {
			t.Fatal(err)
		}
	}
	regs := e.damageRegions(true)
	rng := rand.New(rand.NewPCG(7, 7))
	for round := range 300 {
		tx := e.a.Begin()
		func() {
			defer func() {
				if p := recover(); p != nil {
					t.Fatalf("round %d: panic: %v", round, p)
				}
			}()
			for range 1 + rng.IntN(4) {
				r := regs[rng.IntN(len(regs))]
				o := r.off + pram.Off(rng.IntN(r.n))
				switch rng.IntN(3) {
				case 0:
					tx.Set8(o, uint8(rng.Uint32()))
				case 1:
					tx.Set8(o, 0)
				default:
					tx.Set8(o, 0xff)
				}
			}
			d := e.dir()
			d.Check(e.h.NewChecker())
			for i := range 50 {
				d.Lookup([]byte(name(i)))
			}
			d.Scan(0, func(Entry, uint64) bool { return true })
			d.Insert(tx, []byte("new-name"), 1, 1)
			d.Delete(tx, []byte(name(rng.IntN(2000))))
			d.Replace(tx, []byte(name(rng.IntN(2000))), 1, 1)
		}()
		tx.Abort()
	}
	e.check()
}

// Check marks every allocation of the directory: the heap's leak check
// finds nothing, and it does find a block the directory does not own.
func TestCheckMarksAllocations(t *testing.T) {
	e := newEnv(t, 16<<20)
	for i := range 20_000 {
		if err := e.insert(name(i), uint64(i), 8); err != nil {
			t.Fatal(err)
		}
	}
	if r := e.shape(); r.depth == 0 {
		t.Fatalf("want a multi-bucket directory: %v", e.dir())
	}
	c := e.h.NewChecker()
	if errs := append(e.dir().Check(c), c.Finish()...); len(errs) != 0 {
		t.Fatalf("clean directory: %v", errs)
	}
	if err := e.update(func(tx *pram.Tx) error { _, err := e.h.Alloc(tx, 256); return err }); err != nil {
		t.Fatal(err)
	}
	c = e.h.NewChecker()
	if errs := append(e.dir().Check(c), c.Finish()...); len(errs) == 0 {
		t.Fatal("a stray allocation was not reported as a leak")
	}
}
