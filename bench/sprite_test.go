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
