package dirhash

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	"conquest/alloc"
	"conquest/pram"
)

// fuzzName is name number i of a small universe, 3 to 253 bytes long.
func fuzzName(i byte) string {
	return fmt.Sprintf("n%d.", i) + strings.Repeat(string(rune('a'+i%26)), int(i)%9*31)
}

// FuzzOps runs a sequence of operations decoded from the input against a
// Go map. The first byte picks the hash function (real, 4 prefixes, or
// clustered); then each pair of bytes is an operation and a name. A scan in
// progress is resumed between operations and must return no name twice and
// every name present throughout exactly once.
//
//	go test ./dirhash -run '^$' -fuzz FuzzOps -fuzztime 1m
func FuzzOps(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, n := range []int{0, 7, 64, 600, 3000} {
		b := make([]byte, n)
		for i := range b {
			b[i] = byte(rng.Uint32())
		}
		f.Add(b)
	}
	// Insert all 256 names, then delete them, under each hash mode.
	for mode := range byte(3) {
		b := []byte{mode}
		for i := range 256 {
			b = append(b, 0, byte(i))
		}
		for i := range 256 {
			b = append(b, 2, byte(i), 4, 0)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		if len(data) == 0 {
			return
		}
		m := hashModes[min(int(data[0])%4, len(hashModes)-1)]
		setHash(t, m.f)
		e := newEnv(t, pram.MinSize)
		model := map[string]val{}
		var scan *partialScan
		var throughout map[string]bool
		var reinserted map[string]bool
		for i := 1; i+1 < len(data); i += 2 {
			op, nm := data[i], fuzzName(data[i+1])
			v, present := model[nm]
			switch op % 8 {
			case 0, 1: // insert
				err := e.insert(nm, uint64(i), op)
				switch {
				case present:
					if !errors.Is(err, ErrExists) {
						t.Fatalf("op %d: insert of present %q: %v", i, nm, err)
					}
				case err == nil:
					model[nm] = val{uint64(i), op}
					if scan != nil && scan.seen[nm] > 0 {
						reinserted[nm] = true
					}
				case errors.Is(err, ErrCollision):
				case errors.Is(err, alloc.ErrNoSpace):
					e.sameAs(model)
				default:
					t.Fatalf("op %d: insert %q: %v", i, nm, err)
				}
			case 2: // delete
				ino, typ, err := e.delete(nm)
				if !present {
					if !errors.Is(err, ErrNotFound) {
						t.Fatalf("op %d: delete of absent %q: %v", i, nm, err)
					}
					break
				}
				if err != nil || ino != v.ino || typ != v.typ {
					t.Fatalf("op %d: delete %q = %d,%d,%v, model %v", i, nm, ino, typ, err, v)
				}
				delete(model, nm)
				delete(throughout, nm)
			case 3: // replace
				oi, ot, err := e.replace(nm, uint64(i), op)
				if !present {
					if !errors.Is(err, ErrNotFound) {
						t.Fatalf("op %d: replace of absent %q: %v", i, nm, err)
					}
					break
				}
				if err != nil || oi != v.ino || ot != v.typ {
					t.Fatalf("op %d: replace %q = %d,%d,%v, model %v", i, nm, oi, ot, err, v)
				}
				model[nm] = val{uint64(i), op}
			case 4: // lookup
				ino, typ, ok := e.dir().Lookup([]byte(nm))
				if ok != present || ino != v.ino || typ != v.typ {
					t.Fatalf("op %d: lookup %q = %d,%d,%v, model %v,%v", i, nm, ino, typ, ok, v, present)
				}
			case 5: // start or resume a scan
				if scan == nil {
					scan = &partialScan{seen: map[string]int{}}
					throughout, reinserted = map[string]bool{}, map[string]bool{}
					for k := range model {
						throughout[k] = true
					}
				}
				n := 1 + int(data[i+1]%16)
				got := 0
				err := e.dir().Scan(scan.cursor, func(en Entry, next uint64) bool {
					k := string(en.Name)
					if next <= scan.cursor || next >= 1<<62 {
						t.Fatalf("op %d: cursor %d after %d", i, next, scan.cursor)
					}
					scan.cursor = next
					if mv, ok := model[k]; !ok || mv != (val{en.Ino, en.Type}) {
						t.Fatalf("op %d: scan returned %q = %d,%d, model %v,%v", i, k, en.Ino, en.Type, mv, ok)
					}
					if scan.seen[k] > 0 && (m.strict || !reinserted[k]) {
						t.Fatalf("op %d: scan returned %q twice", i, k)
					}
					scan.seen[k]++
					got++
					return got < n
				})
				if err != nil {
					t.Fatalf("op %d: scan: %v", i, err)
				}
				if got < n {
					for k := range throughout {
						if scan.seen[k] != 1 {
							t.Fatalf("op %d: %q present throughout the scan, returned %d times", i, k, scan.seen[k])
						}
					}
					scan = nil
				}
			case 6:
				e.restart()
			case 7:
				e.check()
			}
		}
		e.check()
		e.sameAs(model)
	})
}
