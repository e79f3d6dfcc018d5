package dirhash

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"conquest/pram"
)

// BenchmarkDir measures Lookup, Insert and Delete at 1 thousand, 100
// thousand and 1 million entries against a Go map, the arena bytes per entry,
// and full and readdir-sized scans. Every Insert and Delete runs in its own
// transaction (Begin/Commit included), as in the file system.
//
//	go test ./dirhash -run '^$' -bench Dir -benchtime 200000x
func BenchmarkDir(b *testing.B) {
	for _, n := range []int{1_000, 100_000, 1_000_000} {
		names := make([][]byte, n)
		for i := range names {
			names[i] = []byte(name(i))
		}
		e := newEnv(b, 256<<20)
		base := e.h.Stats().UsedBytes
		for i, nm := range names {
			if err := e.update(func(tx *pram.Tx) error { return e.dir().Insert(tx, nm, uint64(i), 8) }); err != nil {
				b.Fatal(err)
			}
		}
		perEntry := float64(e.h.Stats().UsedBytes-base) / float64(n)
		m := make(map[string]val, n)
		for i, nm := range names {
			m[string(nm)] = val{uint64(i), 8}
		}
		// Names not in the directory, inserted and deleted again in chunks
		// so the size stays near n.
		chunk := min(1000, n/10)
		extra := make([][]byte, chunk)
		for i := range extra {
			extra[i] = []byte(fmt.Sprintf("new-%07d", i))
		}
		rng := rand.New(rand.NewPCG(1, 2))
		d := e.dir()

		b.Run(fmt.Sprintf("n=%d/lookup/dirhash", n), func(b *testing.B) {
			for i := 0; b.Loop(); i++ {
				if _, _, ok := d.Lookup(names[rng.IntN(n)]); !ok {
					b.Fatal("not found")
				}
			}
		})
		b.Run(fmt.Sprintf("n=%d/lookup/map", n), func(b *testing.B) {
			for b.Loop() {
				if _, ok := m[string(names[rng.IntN(n)])]; !ok {
					b.Fatal("not found")
				}
			}
		})
		b.Run(fmt.Sprintf("n=%d/insert/dirhash", n), func(b *testing.B) {
			for i := 0; i < b.N; i += chunk {
				k := min(chunk, b.N-i)
				for _, nm := range extra[:k] {
					if err := e.update(func(tx *pram.Tx) error { return d.Insert(tx, nm, 1, 8) }); err != nil {
						b.Fatal(err)
					}
				}
				b.StopTimer()
				for _, nm := range extra[:k] {
					e.update(func(tx *pram.Tx) error { _, _, err := d.Delete(tx, nm); return err })
				}
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("n=%d/insert/map", n), func(b *testing.B) {
			for i := 0; i < b.N; i += chunk {
				k := min(chunk, b.N-i)
				for _, nm := range extra[:k] {
					m[string(nm)] = val{1, 8}
				}
				b.StopTimer()
				for _, nm := range extra[:k] {
					delete(m, string(nm))
				}
				b.StartTimer()
			}
		})
		b.Run(fmt.Sprintf("n=%d/delete/dirhash", n), func(b *testing.B) {
			for i := 0; i < b.N; i += chunk {
				k := min(chunk, b.N-i)
				b.StopTimer()
				for _, nm := range extra[:k] {
					e.update(func(tx *pram.Tx) error { return d.Insert(tx, nm, 1, 8) })
				}
				b.StartTimer()
				for _, nm := range extra[:k] {
					if err := e.update(func(tx *pram.Tx) error { _, _, err := d.Delete(tx, nm); return err }); err != nil {
						b.Fatal(err)
					}
				}
			}
		})
		b.Run(fmt.Sprintf("n=%d/delete/map", n), func(b *testing.B) {
			for i := 0; i < b.N; i += chunk {
				k := min(chunk, b.N-i)
				b.StopTimer()
				for _, nm := range extra[:k] {
					m[string(nm)] = val{1, 8}
				}
				b.StartTimer()
				for _, nm := range extra[:k] {
					delete(m, string(nm))
				}
			}
		})
		b.Run(fmt.Sprintf("n=%d/bytes-per-entry", n), func(b *testing.B) {
			for b.Loop() {
			}
			b.ReportMetric(perEntry, "arena-B/entry")
		})
		b.Run(fmt.Sprintf("n=%d/scan-all", n), func(b *testing.B) {
			for b.Loop() {
				count := 0
				d.Scan(0, func(Entry, uint64) bool { count++; return true })
				if count != n {
					b.Fatalf("scanned %d", count)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
		})
		b.Run(fmt.Sprintf("n=%d/scan-readdir", n), func(b *testing.B) {
			// Like FUSE readdir: 100 entries per call, resumed by cursor.
			for b.Loop() {
				count := 0
				for cur := uint64(0); ; {
					got := 0
					d.Scan(cur, func(_ Entry, next uint64) bool { cur = next; got++; return got < 100 })
					count += got
					if got < 100 {
						break
					}
				}
				if count != n {
					b.Fatalf("scanned %d", count)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/entry")
		})
	}
}
