package dirhash

import (
	"fmt"
	"strings"
	"testing"

	farm "github.com/dgryski/go-farm"

	"conquest/internal/racetest"
)

// partialScan is a readdir in progress, resumed by cursor.
type partialScan struct {
	cursor uint64
	seen   map[string]int
	done   bool
}

// advance returns up to n more entries.
func (s *partialScan) advance(t *testing.T, e *env, n int) {
	t.Helper()
	got := 0
	err := e.dir().Scan(s.cursor, func(en Entry, next uint64) bool {
		if next <= s.cursor || next >= 1<<62 {
			t.Fatalf("cursor %d after %d", next, s.cursor)
		}
		s.cursor = next
		s.seen[string(en.Name)]++
		if s.seen[string(en.Name)] > 1 {
			t.Fatalf("%q returned twice", en.Name)
		}
		got++
		return got < n
	})
	if err != nil {
		t.Fatal(err)
	}
	s.done = got < n
}

// Scans in progress survive the table doubling from one level to two
// levels with buckets of very different depths, chaining, halving back
// and restarts: every entry present throughout is returned once, none twice.
func TestCursorAcrossReshape(t *testing.T) {
	// Names starting "c-" share the top 16 hash bits: they force the table
	// deep (two levels) and into chains; the rest hash normally.
	setHash(t, func(b []byte) uint64 {
		h := farm.Hash64(b)
		if strings.HasPrefix(string(b), "c-") {
			return 0x5a5a<<48 | h>>16
		}
		return h
	})
	e := newEnv(t, 64<<20)
	ins := func(nm string) {
		t.Helper()
		if err := e.insert(nm, 1, 8); err != nil {
			t.Fatalf("insert %s: %v", nm, err)
		}
	}
	del := func(nm string) {
		t.Helper()
		if _, _, err := e.delete(nm); err != nil {
			t.Fatalf("delete %s: %v", nm, err)
		}
	}
	for i := range 1000 {
		ins(fmt.Sprintf("base-%d", i))
	}
	scans := make([]*partialScan, 4)
	for i := range scans {
		scans[i] = &partialScan{seen: map[string]int{}}
		scans[i].advance(t, e, 100*i+1)
	}
	advanceAll := func() {
		for _, s := range scans {
			if !s.done {
				s.advance(t, e, 150)
			}
		}
	}
	g0 := e.shape().depth
	for i := range 40_000 {
		ins(fmt.Sprintf("grow-%d", i))
		if i%5000 == 0 {
			advanceAll()
		}
	}
	for i := range 400 {
		ins(fmt.Sprintf("c-%d", i))
		if i%100 == 0 {
			advanceAll()
		}
	}
	big := e.shape()
	t.Logf("grown: %v", e.dir())
	if big.depth <= leafBits {
		t.Fatalf("depth %d: the test needs a two-level table", big.depth)
	}
	if big.pages == big.buckets {
		t.Errorf("no overflow chains: %v", e.dir())
	}
	e.check()
	e.restart()
	advanceAll()
	// Shrink again: all grow- and c- names, and every other base name.
	for i := range 400 {
		del(fmt.Sprintf("c-%d", i))
		if i%100 == 0 {
			advanceAll()
		}
	}
	for i := range 40_000 {
		del(fmt.Sprintf("grow-%d", i))
		if i%5000 == 0 {
			advanceAll()
		}
	}
	for i := 0; i < 1000; i += 2 {
		del(fmt.Sprintf("base-%d", i))
	}
	small := e.shape()
	t.Logf("shrunk: %v", e.dir())
	if small.depth > g0+1 {
		t.Errorf("table did not halve back: depth %d, started at %d", small.depth, g0)
	}
	e.check()
	e.restart()
	for _, s := range scans {
		for !s.done {
			s.advance(t, e, 150)
		}
		for i := 1; i < 1000; i += 2 {
			if nm := fmt.Sprintf("base-%d", i); s.seen[nm] != 1 {
				t.Fatalf("%s, present throughout, returned %d times", nm, s.seen[nm])
			}
		}
	}
}

// A directory holds a million entries; all are found and scanned once
// (a quarter of them under -race).
func TestMillionEntries(t *testing.T) {
	if testing.Short() {
		t.Skip("1M entries: skipped in -short")
	}
	n := 1_000_000
	if racetest.Reduced(t) {
		n = 250_000 // single-threaded: the million in make test's second step
	}
	e := newEnv(t, 256<<20)
	for i := range n {
		if err := e.insert(name(i), uint64(i), 8); err != nil {
			t.Fatalf("insert %d: %v", i, err)
		}
	}
	if got := e.dir().Len(); got != uint64(n) {
		t.Fatalf("Len = %d", got)
	}
	for i := 0; i < n; i += 997 {
		if ino, _, ok := e.dir().Lookup([]byte(name(i))); !ok || ino != uint64(i) {
			t.Fatalf("lookup %d = %d %v", i, ino, ok)
		}
	}
	seen := make([]bool, n)
	count := 0
	err := e.dir().Scan(0, func(en Entry, _ uint64) bool {
		var i int
		fmt.Sscanf(string(en.Name), "file-%d", &i)
		if seen[i] {
			t.Fatalf("%s twice", en.Name)
		}
		seen[i] = true
		count++
		return true
	})
	if err != nil || count != n {
		t.Fatalf("scan: %d entries, %v", count, err)
	}
	t.Logf("%v; %.1f arena bytes per entry; most journal per insert %d bytes",
		e.dir(), float64(e.h.Stats().UsedBytes)/float64(n), e.maxJournal)
	e.check()
}
