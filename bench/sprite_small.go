package bench

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strconv"
	"time"
)

// SpriteSmallConfig is the Sprite LFS small-file benchmark (Rosenblum and
// Ousterhout, 1992): create Files files of Size bytes in one directory, read
// them back in the order created, then delete them; each phase is timed on
// its own and starts from the state PhaseStart describes. A file is created
// with open(O_CREAT|O_TRUNC), one write and close; read with open, one read
// (of Size+1 bytes, so a file that grew shows) and close. A
// SpriteSmallConfig is a Benchmark.
type SpriteSmallConfig struct {
	Files int   `json:"files"`
	Size  int64 `json:"size"`
	Fsync bool  `json:"fsync"` // sync each file before closing it
}

// DefaultSpriteSmall is the original: 10,000 files of 1 KB.
func DefaultSpriteSmall() SpriteSmallConfig { return SpriteSmallConfig{Files: 10000, Size: 1 << 10} }

// Name is "sprite-small".
func (SpriteSmallConfig) Name() string { return "sprite-small" }

// Validate reports unusable parameters.
func (c SpriteSmallConfig) Validate() error {
	if c.Files < 1 || c.Size < 0 {
		return errors.New("sprite-small: need at least one file and a size >= 0")
	}
	return nil
}

// SpriteSmallResult holds the phase times.
type SpriteSmallResult struct {
	Files                int
	Bytes                int64
	Create, Read, Delete time.Duration
}

// Result turns the phase times into files per second.
func (r SpriteSmallResult) Result() Result {
	n := float64(r.Files)
	return Result{
		Metrics: []Metric{
			{"create", "files/s", rate(n, r.Create), true},
			{"read", "files/s", rate(n, r.Read), true},
			{"delete", "files/s", rate(n, r.Delete), true},
		},
		Counts: map[string]float64{
			"files": n, "bytes_per_file": float64(r.Bytes),
			"seconds_create": r.Create.Seconds(), "seconds_read": r.Read.Seconds(), "seconds_delete": r.Delete.Seconds(),
		},
	}
}

// Run implements Benchmark.
func (c SpriteSmallConfig) Run(ctx context.Context, env *Env) (Result, error) {
	r, err := c.RunSpriteSmall(ctx, env)
	if err != nil {
		return Result{}, err
	}
	return r.Result(), nil
}

// RunSpriteSmall runs the benchmark once in env.Dir.
func (c SpriteSmallConfig) RunSpriteSmall(ctx context.Context, env *Env) (SpriteSmallResult, error) {
	res := SpriteSmallResult{Files: c.Files, Bytes: c.Size}
	if err := c.Validate(); err != nil {
		return res, err
	}
	pat := randomPattern(defaultPatternLen, 1)
	names := make([]string, c.Files)
	for i := range names {
		names[i] = filepath.Join(env.Dir, strconv.Itoa(i))
	}
	data := make([]byte, c.Size)
	buf := make([]byte, c.Size+1)
	prog := env.Progress

	phase := func(name string, d *time.Duration, op func(i int) error) error {
		if err := env.settle(); err != nil {
			return err
		}
		prog.Begin(name, c.Files)
		t0 := time.Now()
		for i := range c.Files {
			if i&255 == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if err := op(i); err != nil {
				return err
			}
			prog.Step(i + 1)
		}
		*d = time.Since(t0)
		prog.End()
		return nil
	}

	create := func(i int) error {
		pat.fill(data, uint64(i), 0)
		f, err := env.FS.OpenFile(names[i], os.O_WRONLY|os.O_CREATE|os.O_TRUNC, 0o644)
		if err != nil {
			return err
		}
		_, err = f.Write(data)
		if err == nil && c.Fsync {
			err = f.Sync()
		}
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		return err
	}
	read := func(i int) error {
		f, err := env.FS.OpenFile(names[i], os.O_RDONLY, 0)
		if err != nil {
			return err
		}
		n, err := readAtLeast(f, buf, c.Size)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
		switch {
		case int64(n) > c.Size:
			return corrupt(names[i], "longer than the %d bytes written", c.Size)
		case int64(n) < c.Size:
			return shortRead(names[i], int64(n), err)
		}
		return pat.verify(buf[:n], uint64(i), 0, names[i])
	}
	del := func(i int) error { return env.FS.Remove(names[i]) }

	if err := phase("create", &res.Create, create); err != nil {
		return res, err
	}
	if err := phase("read", &res.Read, read); err != nil {
		return res, err
	}
	if err := phase("delete", &res.Delete, del); err != nil {
		return res, err
	}
	return res, nil
}
