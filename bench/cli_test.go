package bench

import (
	"bytes"
	"path/filepath"
	"strings"
	"testing"

	"github.com/urfave/cli/v2"
)

// app mounts Commands the way cmd/conquest does: under "bench".
func app(stdout, stderr *bytes.Buffer) *cli.App {
	return &cli.App{
		Name:           "conquest",
		Commands:       []*cli.Command{{Name: "bench", Subcommands: Commands()}},
		Writer:         stdout,
		ErrWriter:      stderr,
		ExitErrHandler: func(*cli.Context, error) {}, // never os.Exit in a test
	}
}

func TestCommands(t *testing.T) {
	fast := []string{"--runs", "2", "--evict", "64K", "--sync=false"}
	cases := []struct {
		name    string
		args    []string
		metrics int
	}{
		{"postmark", []string{"--preset", "default", "--files", "30", "--transactions", "60", "--size-high", "5K",
			"--subdirs", "3", "--fsync", "--seed", "5", "--read-block", "1K"}, 6},
		{"postmark", []string{"--preset", "quick", "--files", "20", "--transactions", "40", "--buffered=false"}, 6},
		{"sprite-small", []string{"--files", "20", "--size", "3K"}, 3},
		{"sprite-large", []string{"--preset", "1.01m", "--files", "2", "--size", "70K", "--request", "4K", "--fsync=false"}, 5},
		{"sprite-large", []string{"--preset", "1m", "--files", "2", "--size", "64K", "--name", "sprite-large-1m"}, 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a, b, out := t.TempDir(), t.TempDir(), filepath.Join(t.TempDir(), "results")
			args := append([]string{"conquest", "bench", c.name, "--dir", "first=" + a, "--dir", b, "--out", out}, fast...)
			args = append(args, c.args...)
			var stdout, stderr bytes.Buffer
			if err := app(&stdout, &stderr).Run(args); err != nil {
				t.Fatalf("%v\nstderr:\n%s", err, stderr.String())
			}
			base := c.name
			for i, a := range c.args {
				if a == "--name" {
					base = c.args[i+1]
				}
			}
			rep := checkReportFiles(t, out, base, 2, 2)
			if len(rep.Metrics) != c.metrics || rep.Targets[0].Label != "first" || rep.Targets[1].Dir != b {
				t.Errorf("report: %d metrics, targets %+v", len(rep.Metrics), rep.Targets)
			}
			if !strings.Contains(stdout.String(), "| first |") || !strings.Contains(stdout.String(), "x) [") {
				t.Errorf("stdout:\n%s", stdout.String())
			}
			if !strings.Contains(stderr.String(), "[2/2 "+filepath.Base(b)+"] "+c.name) || !strings.Contains(stderr.String(), "wrote ") {
				t.Errorf("stderr:\n%s", stderr.String())
			}
			assertEmpty(t, a)
			assertEmpty(t, b)
		})
	}
}

func TestCommandsConfig(t *testing.T) {
	a, out := t.TempDir(), t.TempDir()
	var stdout, stderr bytes.Buffer
	err := app(&stdout, &stderr).Run([]string{"conquest", "bench", "postmark", "--dir", a, "--out", out, "--runs", "1",
		"--evict", "0", "--sync=false", "--quiet", "--preset", "default", "--files", "10", "--transactions", "20",
		"--size-low", "1K", "--size-high", "2K", "--bias-read", "10", "--bias-create", "-1", "--write-block", "100"})
	if err != nil {
		t.Fatal(err)
	}
	rep := checkReportFiles(t, out, "postmark", 1, 1)
	cfg, _ := rep.Config.(map[string]any)
	want := map[string]float64{"files": 10, "transactions": 20, "size_low": 1024, "size_high": 2048, "bias_read": 10,
		"bias_create": -1, "write_block": 100, "read_block": 512, "seed": 42}
	for k, v := range want {
		if cfg[k] != v {
			t.Errorf("config %s = %v, want %v", k, cfg[k], v)
		}
	}
	if cfg["buffered"] != true || rep.PhaseStart.EvictBytes != 0 || rep.PhaseStart.Sync {
		t.Errorf("config %v, phase start %+v", cfg, rep.PhaseStart)
	}
	if stderr.Len() != 0 {
		t.Errorf("--quiet printed %q", stderr.String())
	}
	if rep.Samples[0].Counts["files_read"] != 20 || rep.Samples[0].Counts["files_created"] != 10 {
		t.Errorf("counts %v", rep.Samples[0].Counts)
	}
}

func TestCommandsErrors(t *testing.T) {
	dir := t.TempDir()
	for _, args := range [][]string{
		{"postmark", "--preset", "nope", "--dir", dir},
		{"postmark", "--size-low", "2K", "--size-high", "1K", "--dir", dir},
		{"postmark", "--size-high", "lots", "--dir", dir},
		{"postmark"}, // no --dir
		{"sprite-small", "--files", "0", "--dir", dir},
		{"sprite-large", "--request", "0", "--dir", dir},
		{"sprite-large", "--dir", dir + "/missing", "--evict", "0", "--sync=false"},
		{"sprite-small", "--dir", dir, "stray"},
	} {
		var stdout, stderr bytes.Buffer
		if err := app(&stdout, &stderr).Run(append([]string{"conquest", "bench"}, args...)); err == nil {
			t.Errorf("%v: no error", args)
		}
	}
	assertEmpty(t, dir)
}
