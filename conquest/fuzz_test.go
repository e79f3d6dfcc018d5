package conquest

import (
	"encoding/binary"
	"math/rand"
	"path/filepath"
	"testing"

	"conquest/pram"
)

// FuzzDamage overwrites 8 bytes somewhere in the heap of a small populated
// file system (as a damaged arena would have them) and runs every kind of
// operation plus Check and a reopen. Nothing may panic or hang: damage is
// reported as errors.
func FuzzDamage(f *testing.F) {
	for _, s := range []struct {
		at  uint32
		val uint64
	}{{0, 0}, {8, 1 << 40}, {16, 0xffffffff}, {120, 12345}, {256 + 48, 1 << 62}, {4096, 3}, {9000, 0}, {70000, ^uint64(0)}} {
		f.Add(s.at, s.val)
	}
	f.Fuzz(func(t *testing.T, at uint32, val uint64) {
		p := filepath.Join(t.TempDir(), "arena")
		if err := Mkfs(p, "", MkfsOptions{PramSize: 2 << 20}); err != nil {
			t.Fatal(err)
		}
		fs, err := Open(p, "", Options{})
		if err != nil {
			t.Fatal(err)
		}
		d, _ := fs.Mkdir(RootIno, "d", 0o755, user)
		a, h, _ := fs.Create(d.Ino, "a", 0o644, O_CREAT|O_RDWR, user)
		fs.Write(a.Ino, h, 0, pattern(300, 1), false)
		fs.Release(a.Ino, h)
		b, h, _ := fs.Create(RootIno, "b", 0o644, O_CREAT|O_RDWR, user)
		fs.Write(b.Ino, h, 0, pattern(20000, 2), false)
		fs.Release(b.Ino, h)
		s, _ := fs.Symlink(RootIno, "s", "target", user)
		fs.SetXattr(b.Ino, "user.x", []byte("value"), 0)

		// The damage: 8 bytes at an offset into the used part of the heap.
		g := fs.a.Geometry()
		span := uint64(128 << 10)
		off := uint64(g.HeapOff) + uint64(at)%span&^7
		binary.LittleEndian.PutUint64(fs.a.Bytes(pramOff(off), 8), val)

		inos := []Ino{RootIno, d.Ino, a.Ino, b.Ino, s.Ino}
		buf := make([]byte, 30000)
		for _, ino := range inos {
			fs.GetAttr(ino)
			fs.Read(ino, 0, 0, buf)
			fs.Readlink(ino)
			fs.ListXattr(ino)
			fs.GetXattr(ino, "user.x")
			fs.ReadDir(ino, 0, func(string, Ino, uint8, uint64) bool { return true })
			fs.Lookup(ino, "a")
		}
		fs.Write(b.Ino, 0, 5000, pattern(9000, 3), false)
		fs.SetAttr(b.Ino, SetAttr{Valid: SetSize | SetMode, Size: 10, Mode: 0o600}, user)
		fs.Rename(RootIno, "b", d.Ino, "a", 0)
		fs.Unlink(RootIno, "s")
		fs.Rmdir(RootIno, "d")
		fs.Mkdir(RootIno, "e", 0o755, user)
		fs.SetXattr(RootIno, "user.y", pattern(100, 4), 0)
		fs.Check()
		fs.StatFS()
		fs.Usage()
		for _, ino := range inos {
			fs.Forget(ino, 1)
		}
		fs.Close()
		if fs2, err := Open(p, "", Options{}); err == nil {
			fs2.Check()
			fs2.Close()
		}
	})
}

// FuzzSimulation runs the model-based simulation from a fuzzed seed.
func FuzzSimulation(f *testing.F) {
	for _, s := range []int64{1, 2, 3} {
		f.Add(s, uint16(200))
	}
	f.Fuzz(func(t *testing.T, seed int64, steps uint16) {
		fs, env := newTestFS(t)
		s := &simulator{t: t, r: rand.New(rand.NewSource(seed)), fs: fs, env: env, m: newModel()}
		for i := 0; i < int(steps%1000); i++ {
			s.step(i)
		}
		got, want := snapshot(t, s.fs), s.m.snapshot()
		for p, e := range got {
			e.Blocks = 0
			got[p] = e
		}
		if !equalSnap(got, want) {
			t.Fatalf("FS and model differ:\n%s", diffSnap(want, got))
		}
	})
}

func pramOff(v uint64) pram.Off { return pram.Off(v) }
