package bench

import (
	"context"
	"errors"
	"testing"
)

// Every benchmark must fail, not report a time, when the directory under it
// corrupts data.
func TestBenchmarksDetectCorruption(t *testing.T) {
	pmBuffered := DefaultPostMark()
	pmBuffered.Files, pmBuffered.Transactions = 20, 100
	pmRaw := pmBuffered
	pmRaw.Buffered = false
	small := SpriteSmallConfig{Files: 10, Size: 1000}
	large := SpriteLargeConfig{Files: 2, Size: 100_000, Request: 4096, Seed: 3}

	cases := []struct {
		name  string
		b     Benchmark
		fault fault
	}{
		{"postmark buffered, flipped writes", pmBuffered, flipWrite},
		{"postmark buffered, flipped reads", pmBuffered, flipRead},
		{"postmark buffered, extra bytes", pmBuffered, extraWrite},
		{"postmark unbuffered, flipped writes", pmRaw, flipWrite},
		{"postmark unbuffered, extra bytes", pmRaw, extraWrite},
		{"sprite-small, flipped writes", small, flipWrite},
		{"sprite-small, flipped reads", small, flipRead},
		{"sprite-small, extra bytes", small, extraWrite},
		{"sprite-large, flipped writes", large, flipWrite},
		{"sprite-large, flipped reads", large, flipRead},
		{"sprite-large, extra bytes", large, extraWrite},
		{"sprite-large, lost overwrites", large, dropWrite},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			fs := newFaultFS(c.fault)
			env := &Env{FS: fs, Dir: t.TempDir()}
			_, err := c.b.Run(context.Background(), env)
			if !errors.Is(err, ErrCorrupt) {
				t.Fatalf("err = %v, want ErrCorrupt", err)
			}
			t.Log(err)
		})
	}
}

// The same benchmarks pass on the fault FS with the fault switched off, so
// the failures above come from the fault and not from the wrapper.
func TestFaultFSOffPasses(t *testing.T) {
	pm := DefaultPostMark()
	pm.Files, pm.Transactions = 20, 100
	for _, b := range []Benchmark{pm, SpriteSmallConfig{Files: 10, Size: 1000},
		SpriteLargeConfig{Files: 2, Size: 100_000, Request: 4096}} {
		fs := newFaultFS(flipWrite)
		fs.active.Store(false)
		if _, err := b.Run(context.Background(), &Env{FS: fs, Dir: t.TempDir()}); err != nil {
			t.Errorf("%s: %v", b.Name(), err)
		}
	}
}

// Run stops at a corrupting target and reports no figures.
func TestRunStopsOnCorruption(t *testing.T) {
	small := SpriteSmallConfig{Files: 5, Size: 100}
	dir := t.TempDir()
	rep, err := Run(context.Background(), small, Options{
		Targets: []Target{{"bad", dir}}, Runs: 2, FS: newFaultFS(flipWrite),
	})
	if !errors.Is(err, ErrCorrupt) || rep != nil {
		t.Fatalf("rep, err = %v, %v", rep, err)
	}
	assertEmpty(t, dir)
}
