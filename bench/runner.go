package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Benchmark is one workload. Run performs it once in env.Dir, an empty
// directory of its own, and returns its figures; it must leave env.Dir empty
// or nearly so (the runner removes it afterwards) and fail with ErrCorrupt if
// data it reads back is not the data it wrote.
type Benchmark interface {
	Name() string
	Run(ctx context.Context, env *Env) (Result, error)
}

// Env is what a Benchmark runs with.
type Env struct {
	FS       FS // not nil; NewEnv gives OSFS
	Dir      string
	Progress *Progress    // nil: silent
	Settle   func() error // called before each timed phase; nil: nothing
}

// NewEnv is an Env on the operating system's files in dir, silent, with no
// phase-start routine.
func NewEnv(dir string) *Env { return &Env{FS: OSFS{}, Dir: dir} }

func (e *Env) settle() error {
	if e.Settle == nil {
		return nil
	}
	return e.Settle()
}

// Metric is one figure of one run.
type Metric struct {
	Name           string  `json:"name"`
	Unit           string  `json:"unit"`
	Value          float64 `json:"value"`
	HigherIsBetter bool    `json:"higher_is_better"`
}

// Result is what one run of a Benchmark returns: the figures that go into
// tables and charts, and counts (operations, bytes, seconds) that only go into
// the JSON.
type Result struct {
	Metrics []Metric           `json:"metrics"`
	Counts  map[string]float64 `json:"counts,omitempty"`
}

// rate is n per second of d, or 0 when d is zero.
func rate(n float64, d time.Duration) float64 {
	if d <= 0 {
		return 0
	}
	return n / d.Seconds()
}

// Target is a directory to benchmark and the label it has in reports.
type Target struct {
	Label string `json:"label"`
	Dir   string `json:"dir"`
}

// ParseTarget reads "LABEL=DIR" or "DIR"; a bare DIR is labelled with its base
// name. The part before '=' is taken as a label only if it has no '/'.
func ParseTarget(s string) Target {
	if label, dir, ok := strings.Cut(s, "="); ok && label != "" && dir != "" && !strings.Contains(label, "/") {
		return Target{Label: label, Dir: dir}
	}
	return Target{Label: filepath.Base(filepath.Clean(s)), Dir: s}
}

// Options configure Run.
type Options struct {
	Targets    []Target
	Runs       int        // rounds; each round runs every target once, in order
	FS         FS         // nil: OSFS
	PhaseStart PhaseStart // state each phase starts from
	Progress   io.Writer  // nil: silent
}

// Run runs b Runs times on every target, interleaved (A B C A B C ...), so
// that drift in the machine's state spreads over all targets alike, and
// returns the samples and their medians. Each run works in a fresh
// subdirectory of the target, removed afterwards. The first error stops
// everything: a figure from a run that failed to verify is not reported.
func Run(ctx context.Context, b Benchmark, opt Options) (*Report, error) {
	if len(opt.Targets) == 0 {
		return nil, errors.New("bench: no directory to benchmark")
	}
	if opt.Runs <= 0 {
		opt.Runs = 1
	}
	if opt.FS == nil {
		opt.FS = OSFS{}
	}
	targets := uniqueLabels(opt.Targets)
	for _, t := range targets {
		if fi, err := os.Stat(t.Dir); err != nil {
			return nil, fmt.Errorf("bench: %s: %w", t.Label, err)
		} else if !fi.IsDir() {
			return nil, fmt.Errorf("bench: %s: %s is not a directory", t.Label, t.Dir)
		}
	}
	prog := NewProgress(opt.Progress)
	r := &Report{
		Benchmark:  b.Name(),
		Config:     b,
		Date:       time.Now().UTC().Truncate(time.Second),
		Machine:    CurrentMachine(),
		Runs:       opt.Runs,
		PhaseStart: opt.PhaseStart,
		Targets:    targets,
	}
	for run := 1; run <= opt.Runs; run++ {
		for _, t := range targets {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
			prog.SetPrefix(fmt.Sprintf("[%d/%d %s] %s", run, opt.Runs, t.Label, b.Name()))
			res, err := runOnce(ctx, b, opt, t, run, prog)
			if err != nil {
				prog.Note("[%d/%d %s] %s: FAILED: %v", run, opt.Runs, t.Label, b.Name(), err)
				return nil, fmt.Errorf("%s on %s (%s), run %d: %w", b.Name(), t.Label, t.Dir, run, err)
			}
			r.Samples = append(r.Samples, Sample{Run: run, Target: t.Label, Result: res})
		}
	}
	r.Metrics = summarize(targets, r.Samples)
	return r, nil
}

func runOnce(ctx context.Context, b Benchmark, opt Options, t Target, run int, prog *Progress) (Result, error) {
	dir := filepath.Join(t.Dir, fmt.Sprintf("conquest-bench.%d.%d", os.Getpid(), run))
	if err := opt.FS.Mkdir(dir, 0o755); err != nil {
		return Result{}, err
	}
	env := &Env{FS: opt.FS, Dir: dir, Progress: prog, Settle: opt.PhaseStart.Settle}
	res, err := b.Run(ctx, env)
	if rmErr := opt.FS.RemoveAll(dir); rmErr != nil && err == nil {
		err = fmt.Errorf("removing the working directory: %w", rmErr)
	}
	return res, err
}

// uniqueLabels returns targets with repeated labels numbered: a, a#2, a#3.
func uniqueLabels(ts []Target) []Target {
	out := slices.Clone(ts)
	seen := map[string]int{}
	for i := range out {
		seen[out[i].Label]++
		if n := seen[out[i].Label]; n > 1 {
			out[i].Label = fmt.Sprintf("%s#%d", out[i].Label, n)
		}
	}
	return out
}

// Stats summarise one metric on one target over all runs.
type Stats struct {
	Target string    `json:"target"`
	Values []float64 `json:"values"`
	Median float64   `json:"median"`
	Min    float64   `json:"min"`
	Max    float64   `json:"max"`
	// Ratio is Median divided by the first target's median (0 if that is 0).
	Ratio float64 `json:"ratio"`
}

// MetricStats is one metric over all targets.
type MetricStats struct {
	Name           string  `json:"name"`
	Unit           string  `json:"unit"`
	HigherIsBetter bool    `json:"higher_is_better"`
	Targets        []Stats `json:"targets"`
}

// summarize computes, for each metric in the order the benchmark reports
// them, each target's median, min, max and ratio to the first target.
func summarize(targets []Target, samples []Sample) []MetricStats {
	var out []MetricStats
	index := map[string]int{}
	for _, s := range samples {
		for _, m := range s.Result.Metrics {
			if _, ok := index[m.Name]; !ok {
				index[m.Name] = len(out)
				ms := MetricStats{Name: m.Name, Unit: m.Unit, HigherIsBetter: m.HigherIsBetter}
				for _, t := range targets {
					ms.Targets = append(ms.Targets, Stats{Target: t.Label})
				}
				out = append(out, ms)
			}
		}
	}
	tindex := map[string]int{}
	for i, t := range targets {
		tindex[t.Label] = i
	}
	for _, s := range samples {
		for _, m := range s.Result.Metrics {
			st := &out[index[m.Name]].Targets[tindex[s.Target]]
			st.Values = append(st.Values, m.Value)
		}
	}
	for i := range out {
		for j := range out[i].Targets {
			st := &out[i].Targets[j]
			st.Median, st.Min, st.Max = median(st.Values)
		}
		if first := out[i].Targets[0].Median; first != 0 {
			for j := range out[i].Targets {
				out[i].Targets[j].Ratio = out[i].Targets[j].Median / first
			}
		}
	}
	return out
}

// median returns the median (the mean of the middle two for an even count),
// minimum and maximum of v; zeros if v is empty.
func median(v []float64) (med, lo, hi float64) {
	if len(v) == 0 {
		return 0, 0, 0
	}
	s := slices.Clone(v)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		med = s[n/2]
	} else {
		med = (s[n/2-1] + s[n/2]) / 2
	}
	return med, s[0], s[n-1]
}
