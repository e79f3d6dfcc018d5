package conquest

import (
	"testing"

	"conquest/diskstore"
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

// BenchmarkDiskSequential100MB writes (128 KiB requests, as FUSE sends
// them, then fsync) and reads back a 100 MB file through the core, on a
// file-backed disk with 64 KiB blocks, in both durability modes of the
// store. Each iteration is one file: the figure is bytes per second.
func BenchmarkDiskSequential100MB(b *testing.B) {
	for _, mode := range []diskstore.Durability{diskstore.DurableOnProcessCrash, diskstore.GatherInMemory} {
		for _, op := range []string{"write", "read"} {
			b.Run(mode.String()+"/"+op, func(b *testing.B) { benchDiskSeq(b, mode, op == "write") })
		}
	}
}

func benchDiskSeq(b *testing.B, mode diskstore.Durability, write bool) {
	const size, piece = 100 << 20, 128 << 10
	dir := b.TempDir()
	p, d := dir+"/arena", dir+"/disk"
	if err := Mkfs(p, d, MkfsOptions{PramSize: 64 << 20, DiskSize: 160 << 20}); err != nil {
		b.Fatal(err)
	}
	fs, err := Open(p, d, Options{Disk: diskstore.Options{Durability: mode}})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { fs.Close() })
	data := pattern(size, 1)
	buf := make([]byte, piece)
	at, h, err := fs.Create(RootIno, "f", 0o644, O_CREAT|O_RDWR, user)
	if err != nil {
		b.Fatal(err)
	}
	writeAll := func() {
		for off := 0; off < size; off += piece {
			if _, err := fs.Write(at.Ino, h, int64(off), data[off:off+piece], false); err != nil {
				b.Fatal(err)
			}
		}
		if err := fs.Fsync(at.Ino, false); err != nil {
			b.Fatal(err)
		}
	}
	if !write {
		writeAll()
	}
	b.SetBytes(size)
	b.ResetTimer()
	for b.Loop() {
		if write {
			writeAll()
			continue
		}
		rh, err := fs.Open(at.Ino, 0)
		if err != nil {
			b.Fatal(err)
		}
		for off := 0; off < size; off += piece {
			if n, err := fs.Read(at.Ino, rh, int64(off), buf); err != nil || n != piece {
				b.Fatal(n, err)
			}
		}
		fs.Release(at.Ino, rh)
	}
	fs.Release(at.Ino, h)
}

// xattrBenchFile is a file carrying n user.* attributes of 8 bytes.
func xattrBenchFile(b *testing.B, fs *FS, n int) Ino {
	b.Helper()
	at, h, err := fs.Create(RootIno, "x", 0o644, O_CREAT|O_RDWR, user)
	if err != nil {
		b.Fatal(err)
	}
	fs.Release(at.Ino, h)
	for i := range n {
		if err := fs.SetXattr(at.Ino, sprintf("user.var_%d", i), []byte("12345678"), XattrCreate); err != nil {
			b.Fatal(err)
		}
	}
	return at.Ino
}

// BenchmarkXattrGetMany: getxattr of the last of 3,000 attributes of one
// file (stress-ng's xattr stressor makes up to 4,096).
func BenchmarkXattrGetMany(b *testing.B) {
	fs := benchFS(b, 64<<20)
	ino := xattrBenchFile(b, fs, 3000)
	for b.Loop() {
		if _, err := fs.GetXattr(ino, "user.var_2999"); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkXattrSetMany: replace and then remove and create one attribute
// among 3,000 of one file.
func BenchmarkXattrSetMany(b *testing.B) {
	fs := benchFS(b, 64<<20)
	ino := xattrBenchFile(b, fs, 3000)
	for b.Loop() {
		if err := fs.SetXattr(ino, "user.var_1500", []byte("abcdefgh"), XattrReplace); err != nil {
			b.Fatal(err)
		}
		if err := fs.RemoveXattr(ino, "user.var_1500"); err != nil {
			b.Fatal(err)
		}
		if err := fs.SetXattr(ino, "user.var_1500", []byte("12345678"), XattrCreate); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkXattrListMany: listxattr of a file with 3,000 attributes.
func BenchmarkXattrListMany(b *testing.B) {
	fs := benchFS(b, 64<<20)
	ino := xattrBenchFile(b, fs, 3000)
	for b.Loop() {
		if _, err := fs.ListXattr(ino); err != nil {
			b.Fatal(err)
		}
	}
}
