package conquest

import (
	"testing"
)

func benchFS(b *testing.B, size uint64) *FS {
	b.Helper()
	p := b.TempDir() + "/arena"
	if err := Mkfs(p, "", MkfsOptions{PramSize: size}); err != nil {
		b.Fatal(err)
	}
	fs, err := Open(p, "", Options{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	return fs
}

// BenchmarkCreate1K: create, write 1 KB, close (small-file path).
func BenchmarkCreate1K(b *testing.B) {
	fs := benchFS(b, 512<<20)
	data := pattern(1000, 1)
	b.SetBytes(1000)
	for i := 0; b.Loop(); i++ {
		at, h, err := fs.Create(RootIno, sprintf("f%d", i), 0o644, O_CREAT|O_RDWR, user)
		if err != nil {
			b.Fatal(err)
		}
		if _, err := fs.Write(at.Ino, h, 0, data, false); err != nil {
			b.Fatal(err)
		}
		fs.Release(at.Ino, h)
		fs.Forget(at.Ino, 1)
	}
}

// BenchmarkCreateUnlink: create and unlink an empty file.
func BenchmarkCreateUnlink(b *testing.B) {
	fs := benchFS(b, 64<<20)
	for b.Loop() {
		at, h, err := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
		if err != nil {
			b.Fatal(err)
		}
		fs.Release(at.Ino, h)
		fs.Forget(at.Ino, 1)
		if err := fs.Unlink(RootIno, "f"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWriteSeq64K: sequential 64 KiB appends to one file (wrapping
// at 256 MiB).
func BenchmarkWriteSeq64K(b *testing.B) {
	fs := benchFS(b, 512<<20)
	at, h, _ := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
	data := pattern(64<<10, 1)
	b.SetBytes(int64(len(data)))
	off := int64(0)
	for b.Loop() {
		if _, err := fs.Write(at.Ino, h, off, data, false); err != nil {
			b.Fatal(err)
		}
		off = (off + int64(len(data))) % (256 << 20)
	}
}

// BenchmarkRead64K: 64 KiB reads of a 64 MiB file.
func BenchmarkRead64K(b *testing.B) {
	fs := benchFS(b, 256<<20)
	at, h, _ := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
	data := pattern(1<<20, 1)
	for i := 0; i < 64; i++ {
		fs.Write(at.Ino, h, int64(i)<<20, data, false)
	}
	buf := make([]byte, 64<<10)
	b.SetBytes(int64(len(buf)))
	off := int64(0)
	for b.Loop() {
		if _, err := fs.Read(at.Ino, h, off, buf); err != nil {
			b.Fatal(err)
		}
		off = (off + int64(len(buf))) % (64 << 20)
	}
}

// BenchmarkLookup: a lookup (and forget) in a directory of 10,000 entries.
func BenchmarkLookup(b *testing.B) {
	fs := benchFS(b, 128<<20)
	for i := 0; i < 10000; i++ {
		at, h, _ := fs.Create(RootIno, sprintf("f%d", i), 0o644, O_CREAT|O_RDWR, user)
		fs.Release(at.Ino, h)
		fs.Forget(at.Ino, 1)
	}
	for i := 0; b.Loop(); i++ {
		at, err := fs.Lookup(RootIno, sprintf("f%d", i%10000))
		if err != nil {
			b.Fatal(err)
		}
		fs.Forget(at.Ino, 1)
	}
}

// BenchmarkGetAttrParallel: GetAttr from all CPUs (shared lock).
func BenchmarkGetAttrParallel(b *testing.B) {
	fs := benchFS(b, 64<<20)
	at, h, _ := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
	fs.Release(at.Ino, h)
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if _, err := fs.GetAttr(at.Ino); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkRename: rename a file back and forth between two directories.
func BenchmarkRename(b *testing.B) {
	fs := benchFS(b, 64<<20)
	d1, _ := fs.Mkdir(RootIno, "a", 0o755, user)
	d2, _ := fs.Mkdir(RootIno, "b", 0o755, user)
	at, h, _ := fs.Create(d1.Ino, "f", 0o644, O_CREAT|O_RDWR, user)
	fs.Release(at.Ino, h)
	for i := 0; b.Loop(); i++ {
		from, to := d1.Ino, d2.Ino
		if i%2 == 1 {
			from, to = to, from
		}
		if err := fs.Rename(from, "f", to, "f", 0); err != nil {
			b.Fatal(err)
		}
	}
}
