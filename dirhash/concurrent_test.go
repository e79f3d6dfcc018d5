package dirhash

import (
	"sync"
	"testing"
)

// Readers (Lookup, Scan, Len, Check) run concurrently with each other; run
// with -race.
func TestConcurrentReaders(t *testing.T) {
	e := newEnv(t, 16<<20)
	const n = 5000
	for i := range n {
		if err := e.insert(name(i), uint64(i), 8); err != nil {
			t.Fatal(err)
		}
	}
	d := e.dir()
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			for i := g; i < n; i += 4 {
				if ino, _, ok := d.Lookup([]byte(name(i))); !ok || ino != uint64(i) {
					t.Errorf("lookup %d = %d %v", i, ino, ok)
					return
				}
			}
			count := 0
			if err := d.Scan(0, func(Entry, uint64) bool { count++; return true }); err != nil || count != n {
				t.Errorf("scan: %d entries, %v", count, err)
			}
			if d.Len() != n {
				t.Errorf("Len = %d", d.Len())
			}
			if errs := d.Check(e.h.NewChecker()); len(errs) != 0 {
				t.Errorf("check: %v", errs)
			}
		})
	}
	wg.Wait()
}
