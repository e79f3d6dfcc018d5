package bench

import (
	"context"
	"os"
	"testing"
)

func assertEmpty(t *testing.T, dir string) {
	t.Helper()
	left, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(left) != 0 {
		t.Errorf("%s: %d entries left behind, first %s", dir, len(left), left[0].Name())
	}
}

func TestSpriteSmall(t *testing.T) {
	for _, c := range []SpriteSmallConfig{{Files: 30, Size: 1024}, {Files: 3, Size: 0}, {Files: 5, Size: 3 << 20, Fsync: true}} {
		dir := t.TempDir()
		r, err := c.RunSpriteSmall(context.Background(), NewEnv(dir))
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		res := r.Result()
		if len(res.Metrics) != 3 || res.Counts["files"] != float64(c.Files) {
			t.Errorf("%+v: result %+v", c, res)
		}
		for _, m := range res.Metrics {
			if m.Value <= 0 || m.Unit != "files/s" {
				t.Errorf("%+v: metric %+v", c, m)
			}
		}
		assertEmpty(t, dir)
	}
}

func TestSpriteLarge(t *testing.T) {
	for _, c := range []SpriteLargeConfig{
		{Files: 1, Size: 1 << 20, Request: 8 << 10, Fsync: true},
		{Files: 3, Size: 100_003, Request: 4096},      // a partial last block
		{Files: 1, Size: 3 << 20, Request: 2<<20 + 5}, // requests larger than the pattern
	} {
		dir := t.TempDir()
		var settles int
		env := NewEnv(dir)
		env.Settle = func() error { settles++; return nil }
		r, err := c.RunSpriteLarge(context.Background(), env)
		if err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		if settles != 5 {
			t.Errorf("%+v: %d phase starts, want 5", c, settles)
		}
		res := r.Result()
		if len(res.Metrics) != 5 || r.Bytes != int64(c.Files)*c.Size {
			t.Errorf("%+v: result %+v", c, res)
		}
		for _, m := range res.Metrics {
			if m.Value <= 0 || m.Unit != "MiB/s" {
				t.Errorf("%+v: metric %+v", c, m)
			}
		}
		assertEmpty(t, dir)
	}
	for _, p := range SpriteLargePresets() {
		if err := p.Config.Validate(); err != nil {
			t.Errorf("preset %s: %v", p.Name, err)
		}
	}
}

// countFS counts the Write calls of the files it opens.
type countFS struct {
	OSFS
	writes, bytes int64
}

func (fs *countFS) OpenFile(name string, flag int, perm os.FileMode) (File, error) {
	f, err := fs.OSFS.OpenFile(name, flag, perm)
	if err != nil {
		return nil, err
	}
	return &countFile{File: f, fs: fs}, nil
}

type countFile struct {
	File
	fs *countFS
}

func (f *countFile) Write(p []byte) (int, error) {
	f.fs.writes++
	f.fs.bytes += int64(len(p))
	return f.File.Write(p)
}

// The sequential write issues one write(2) per request, also for requests
// longer than the content pattern (1 MiB requests): a request split in two
// would leave on FUSE a page filled by two writes, which the kernel does not
// cache as up to date.
func TestSpriteLargeOneWritePerRequest(t *testing.T) {
	for _, c := range []SpriteLargeConfig{
		{Files: 2, Size: 3 << 20, Request: 1 << 20},
		{Files: 1, Size: 1<<20 + 5, Request: 8 << 10},
	} {
		fs := &countFS{}
		env := NewEnv(t.TempDir())
		env.FS = fs
		env.Settle = func() error { return nil }
		if _, err := c.RunSpriteLarge(context.Background(), env); err != nil {
			t.Fatalf("%+v: %v", c, err)
		}
		reqs := int64(c.Files) * ((c.Size + int64(c.Request) - 1) / int64(c.Request))
		if fs.writes != reqs || fs.bytes != int64(c.Files)*c.Size {
			t.Errorf("%+v: %d writes of %d bytes in all, want %d requests of %d bytes", c, fs.writes, fs.bytes, reqs, int64(c.Files)*c.Size)
		}
	}
}
