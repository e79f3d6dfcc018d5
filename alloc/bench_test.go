package alloc

import (
	"fmt"
	"testing"
	"time"

	"conquest/pram"
)

var benchSizes = []uint64{16, 256, 1024, 4096, 64 << 10, 1 << 20}

var sink []byte

// BenchmarkAllocFree: one Alloc and one Free in one Tx (begin and commit
// included), against make([]byte, n) for the same sizes.
func BenchmarkAllocFree(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			a, h, _ := newArena(b, 64<<20)
			var journal uint64
			for b.Loop() {
				tx := a.Begin()
				off, err := h.Alloc(tx, n)
				if err != nil {
					b.Fatal(err)
				}
				if err := h.Free(tx, off); err != nil {
					b.Fatal(err)
				}
				journal = tx.Used()
				tx.Commit()
			}
			b.ReportMetric(float64(journal), "journal-B/op")
		})
	}
}

// BenchmarkAllocBatch: 64 Allocs in one Tx then 64 Frees in another;
// ns/op is per object (one Alloc plus one Free).
func BenchmarkAllocBatch(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			a, h, _ := newArena(b, 256<<20)
			offs := make([]pram.Off, 64)
			for i := 0; i < b.N; i += len(offs) {
				tx := a.Begin()
				for j := range offs {
					var err error
					if offs[j], err = h.Alloc(tx, n); err != nil {
						b.Fatal(err)
					}
				}
				tx.Commit()
				tx = a.Begin()
				for _, off := range offs {
					if err := h.Free(tx, off); err != nil {
						b.Fatal(err)
					}
				}
				tx.Commit()
			}
		})
	}
}

func BenchmarkMake(b *testing.B) {
	for _, n := range benchSizes {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			for b.Loop() {
				sink = make([]byte, n)
			}
		})
	}
}

// BenchmarkReopen: pram.Open plus Open of an arena holding 0 or 1,000,000
// allocated 256-byte records (inode-sized). Open reads one header, so the
// time should not grow with the number of records.
func BenchmarkReopen(b *testing.B) {
	for _, records := range []int{0, 1_000_000} {
		b.Run(fmt.Sprintf("records=%d", records), func(b *testing.B) {
			a, h, path := newArena(b, 512<<20)
			start := time.Now()
			for i := 0; i < records; i += 1000 {
				tx := a.Begin()
				for range min(1000, records-i) {
					if _, err := h.Alloc(tx, 256); err != nil {
						b.Fatal(err)
					}
				}
				tx.Commit()
			}
			if records > 0 {
				b.Logf("%d records allocated in %v", records, time.Since(start))
			}
			for b.Loop() {
				b.StopTimer()
				if err := a.Close(); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				var err error
				if a, err = pram.Open(path); err != nil {
					b.Fatal(err)
				}
				if h, err = Open(a); err != nil {
					b.Fatal(err)
				}
			}
			if got := h.Stats().Objects; got != uint64(records) {
				b.Fatalf("%d objects after reopen, want %d", got, records)
			}
			// Open alone (the heap's part): one header read and check.
			t0 := time.Now()
			const k = 1000
			for range k {
				if _, err := Open(a); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(time.Since(t0).Nanoseconds())/k, "heap-open-ns")
			a.Close()
		})
	}
}

// BenchmarkSpace: allocates objects of 1 KB, 4 KB and 64 KB and reports the
// heap bytes they take per payload byte beyond 1 (pages held plus their
// page map entries), as overhead-B/B.
func BenchmarkSpace(b *testing.B) {
	for _, n := range []uint64{1000, 1024, 4096, 64 << 10} {
		b.Run(fmt.Sprintf("n=%d", n), func(b *testing.B) {
			a, h, _ := newArena(b, 4<<30)
			base := h.Stats()
			var payload uint64
			for b.Loop() {
				tx := a.Begin()
				if _, err := h.Alloc(tx, n); err != nil {
					b.Fatal(err)
				}
				tx.Commit()
				payload += n
			}
			s := h.Stats()
			held := (base.FreePages - s.FreePages) * pageSize
			b.ReportMetric(float64(held+held/pageSize*EntrySize)/float64(payload)-1, "overhead-B/B")
		})
	}
}
