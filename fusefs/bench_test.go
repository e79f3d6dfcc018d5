package fusefs_test

import (
	"fmt"
	"os"
	"testing"

	"golang.org/x/sys/unix"

	"conquest/internal/mounttest"
)

// BenchmarkRoundTrips measures the costs the cache policy trades off, with
// the kernel writeback cache off (the default) and on:
//
//	go test -run XXX -bench RoundTrips ./fusefs
func BenchmarkRoundTrips(b *testing.B) {
	for _, cm := range cacheModes {
		b.Run(cm.name, func(b *testing.B) {
			m := mounttest.Mount(b, mounttest.WithFuseOptions(cm.opt), mounttest.WithPramSize(512<<20))
			must := func(err error) {
				if err != nil {
					b.Fatal(err)
				}
			}
			must(os.WriteFile(m.Path("f"), make([]byte, 1<<20), 0o644))
			// run reports FUSE requests per operation next to the time.
			run := func(name string, fn func(b *testing.B)) {
				b.Run(name, func(b *testing.B) {
					before := total(m.Server.Stats())
					fn(b)
					b.ReportMetric(float64(total(m.Server.Stats())-before)/float64(b.N), "reqs/op")
				})
			}

			run("stat", func(b *testing.B) {
				var st unix.Stat_t
				for b.Loop() {
					must(unix.Stat(m.Path("f"), &st))
				}
			})
			run("stat-missing", func(b *testing.B) {
				var st unix.Stat_t
				for b.Loop() {
					unix.Stat(m.Path("missing"), &st)
				}
			})
			run("create-write1k-close-unlink", func(b *testing.B) {
				data := make([]byte, 1024)
				i := 0
				for b.Loop() {
					name := m.Path(fmt.Sprintf("c%d", i))
					i++
					fd, err := unix.Open(name, unix.O_CREAT|unix.O_EXCL|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
					must(err)
					_, err = unix.Write(fd, data)
					must(err)
					must(unix.Close(fd))
					must(unix.Unlink(name))
				}
			})
			run("open-read4k-close", func(b *testing.B) {
				buf := make([]byte, 4096)
				for b.Loop() {
					fd, err := unix.Open(m.Path("f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
					must(err)
					_, err = unix.Pread(fd, buf, 8192)
					must(err)
					must(unix.Close(fd))
				}
			})
			// Listings of a directory of 50 entries: unchanged between
			// listings (served from the kernel's cache after the first),
			// and with an entry created and removed before each.
			must(os.Mkdir(m.Path("d"), 0o755))
			for i := range 50 {
				must(os.WriteFile(m.Path(fmt.Sprintf("d/e%02d", i)), nil, 0o644))
			}
			list := func() {
				f, err := os.Open(m.Path("d"))
				must(err)
				names, err := f.Readdirnames(-1)
				must(err)
				must(f.Close())
				if len(names) != 50 {
					b.Fatalf("listed %d entries, want 50", len(names))
				}
			}
			run("opendir-list50-close", func(b *testing.B) {
				for b.Loop() {
					list()
				}
			})
			run("create-unlink-list50", func(b *testing.B) {
				for b.Loop() {
					fd, err := unix.Open(m.Path("d/x"), unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
					must(err)
					must(unix.Close(fd))
					must(unix.Unlink(m.Path("d/x")))
					list()
				}
			})
			run("seq-write8k", func(b *testing.B) {
				fd, err := unix.Open(m.Path("w"), unix.O_CREAT|unix.O_TRUNC|unix.O_WRONLY|unix.O_CLOEXEC, 0o644)
				must(err)
				data := make([]byte, 8192)
				off := int64(0)
				for b.Loop() {
					if off >= 64<<20 {
						off = 0
					}
					_, err := unix.Pwrite(fd, data, off)
					must(err)
					off += 8192
				}
				b.SetBytes(8192)
				must(unix.Close(fd))
			})
			run("seq-read128k-cold", func(b *testing.B) {
				buf := make([]byte, 128<<10)
				fd, err := unix.Open(m.Path("f"), unix.O_RDONLY|unix.O_CLOEXEC, 0)
				must(err)
				off := int64(0)
				for b.Loop() {
					if off == 0 {
						unix.Fadvise(fd, 0, 0, unix.FADV_DONTNEED)
					}
					_, err := unix.Pread(fd, buf, off)
					must(err)
					off = (off + int64(len(buf))) % (1 << 20)
				}
				b.SetBytes(int64(len(buf)))
				must(unix.Close(fd))
			})
		})
	}
}

func total(m map[string]uint64) uint64 {
	var n uint64
	for _, v := range m {
		n += v
	}
	return n
}
