package bench

import (
	"context"
	"errors"
	"os"
	"testing"
)

// The counts below are what the Debian postmark binary (1.53, which prints
// "PostMark v1.51") reports for the same parameters, verbose and terse
// reports together. Matching them shows that the transaction mix, the file
// picks, the sizes and the appends follow PostMark's stream exactly.
var postmarkGolden = []struct {
	name                                    string
	cfg                                     func(*PostMarkConfig)
	created, read, appended, deleted, alone int
	bytesRead, bytesWritten                 int64
}{
	{"defaults", func(*PostMarkConfig) {}, 764, 243, 257, 764, 528, 1430770, 4662068},
	{"subdirs+biases", func(c *PostMarkConfig) {
		c.Files, c.Transactions, c.SizeLow, c.SizeHigh = 100, 1000, 100, 5000
		c.Subdirs, c.Seed, c.BiasRead, c.BiasCreate = 4, 7, 3, 6
	}, 629, 302, 688, 629, 200, 1006112, 2220593},
	{"fixed size, reads only", func(c *PostMarkConfig) {
		c.Files, c.Transactions, c.SizeLow, c.SizeHigh = 50, 300, 2000, 2000
		c.BiasCreate, c.BiasRead, c.Seed = -1, 10, 9
	}, 50, 300, 0, 50, 50, 600000, 100000},
}

func TestPostMarkMatchesPostMarkBinary(t *testing.T) {
	for _, g := range postmarkGolden {
		for _, buffered := range []bool{true, false} {
			cfg := DefaultPostMark()
			g.cfg(&cfg)
			cfg.Buffered = buffered
			dir := t.TempDir()
			r, err := cfg.RunPostMark(context.Background(), NewEnv(dir))
			if err != nil {
				t.Fatalf("%s (buffered=%v): %v", g.name, buffered, err)
			}
			got := []int64{int64(r.Created), int64(r.Read), int64(r.Appended), int64(r.Deleted), int64(r.DeletedAlone), r.BytesRead, r.BytesWritten}
			want := []int64{int64(g.created), int64(g.read), int64(g.appended), int64(g.deleted), int64(g.alone), g.bytesRead, g.bytesWritten}
			for i := range got {
				if got[i] != want[i] {
					t.Errorf("%s (buffered=%v): created, read, appended, deleted, deleted alone, bytes read, bytes written = %v, want %v",
						g.name, buffered, got, want)
					break
				}
			}
			if left, _ := os.ReadDir(dir); len(left) != 0 {
				t.Errorf("%s: %d entries left behind", g.name, len(left))
			}
		}
	}
}

// postmark with bias create 2 deletes faster than it creates and stops with
// "out of files!"; so must this.
func TestPostMarkOutOfFiles(t *testing.T) {
	cfg := DefaultPostMark()
	cfg.Files, cfg.Transactions, cfg.SizeLow, cfg.SizeHigh = 200, 2000, 1, 100000
	cfg.BiasRead, cfg.BiasCreate, cfg.Seed = 0, 2, 1234
	_, err := cfg.RunPostMark(context.Background(), NewEnv(t.TempDir()))
	if !errors.Is(err, ErrOutOfFiles) {
		t.Fatalf("err = %v, want ErrOutOfFiles", err)
	}
}

func TestPostMarkFsyncAndResult(t *testing.T) {
	cfg := DefaultPostMark()
	cfg.Files, cfg.Transactions, cfg.Fsync = 20, 40, true
	r, err := cfg.RunPostMark(context.Background(), NewEnv(t.TempDir()))
	if err != nil {
		t.Fatal(err)
	}
	res := r.Result()
	if len(res.Metrics) != 6 || res.Metrics[0].Name != "transactions" || res.Metrics[0].Value <= 0 {
		t.Errorf("metrics = %+v", res.Metrics)
	}
	if res.Counts["files_created"] != float64(r.Created) || r.Created < 20 {
		t.Errorf("counts = %v", res.Counts)
	}
}

func TestPostMarkValidate(t *testing.T) {
	bad := []func(*PostMarkConfig){
		func(c *PostMarkConfig) { c.Files = 0 },
		func(c *PostMarkConfig) { c.SizeLow = 0 },
		func(c *PostMarkConfig) { c.SizeHigh = c.SizeLow - 1 },
		func(c *PostMarkConfig) { c.ReadBlock = 0 },
		func(c *PostMarkConfig) { c.BiasRead = 11 },
		func(c *PostMarkConfig) { c.BiasCreate = -2 },
	}
	for i, f := range bad {
		c := DefaultPostMark()
		f(&c)
		if c.Validate() == nil {
			t.Errorf("case %d: %+v validated", i, c)
		}
	}
	for _, p := range PostMarkPresets() {
		if err := p.Config.Validate(); err != nil {
			t.Errorf("preset %s: %v", p.Name, err)
		}
	}
}

func TestPostMarkCancel(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := DefaultPostMark().RunPostMark(ctx, NewEnv(t.TempDir())); !errors.Is(err, context.Canceled) {
		t.Fatalf("err = %v", err)
	}
}
