package bench

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

// fakeBench returns preset values in turn, so the statistics can be checked.
type fakeBench struct {
	values []float64
	calls  *[]string
}

func (fakeBench) Name() string { return "fake" }

func (f fakeBench) Run(_ context.Context, env *Env) (Result, error) {
	*f.calls = append(*f.calls, env.Dir)
	v := f.values[(len(*f.calls)-1)%len(f.values)]
	if err := env.settle(); err != nil {
		return Result{}, err
	}
	env.Progress.Begin("phase", 4)
	env.Progress.Step(2)
	env.Progress.End()
	return Result{Metrics: []Metric{{"speed", "op/s", v, true}, {"time", "s", 1 / v, false}}}, nil
}

func TestRunInterleavesAndSummarises(t *testing.T) {
	a, b := t.TempDir(), t.TempDir()
	var calls []string
	// Runs go a b a b a b: a gets 1, 3, 5 and b gets 2, 4, 12.
	fb := fakeBench{values: []float64{1, 2, 3, 4, 5, 12}, calls: &calls}
	var progress bytes.Buffer
	rep, err := Run(context.Background(), fb, Options{
		Targets: []Target{{"a", a}, {"b", b}}, Runs: 3, Progress: &progress,
		PhaseStart: PhaseStart{EvictBytes: 1 << 16},
	})
	if err != nil {
		t.Fatal(err)
	}
	for i, c := range calls {
		want := []string{a, b}[i%2]
		if !strings.HasPrefix(c, want+"/conquest-bench.") {
			t.Errorf("call %d in %s, want under %s", i, c, want)
		}
	}
	if len(rep.Samples) != 6 || rep.Samples[1].Target != "b" || rep.Samples[2].Run != 2 {
		t.Errorf("samples %+v", rep.Samples)
	}
	speed := rep.Metrics[0]
	if speed.Name != "speed" || speed.Targets[0].Median != 3 || speed.Targets[1].Median != 4 ||
		speed.Targets[1].Min != 2 || speed.Targets[1].Max != 12 || speed.Targets[1].Ratio != 4.0/3 || speed.Targets[0].Ratio != 1 {
		t.Errorf("speed %+v", speed)
	}
	if rep.Metrics[1].HigherIsBetter {
		t.Error("time marked higher-is-better")
	}
	if !strings.Contains(progress.String(), "[2/3 b] fake: phase ..........") {
		t.Errorf("progress:\n%s", progress.String())
	}
	assertEmpty(t, a)
	assertEmpty(t, b)
}

func TestRunRejectsMissingDir(t *testing.T) {
	var calls []string
	_, err := Run(context.Background(), fakeBench{[]float64{1}, &calls}, Options{Targets: []Target{{"x", t.TempDir() + "/nope"}}})
	if err == nil || len(calls) != 0 {
		t.Fatalf("err = %v, calls %v", err, calls)
	}
	if _, err := Run(context.Background(), fakeBench{[]float64{1}, &calls}, Options{}); err == nil {
		t.Fatal("no targets accepted")
	}
}

func TestMedian(t *testing.T) {
	cases := []struct {
		in          []float64
		med, lo, hi float64
	}{
		{nil, 0, 0, 0},
		{[]float64{5}, 5, 5, 5},
		{[]float64{3, 1, 2}, 2, 1, 3},
		{[]float64{4, 1, 3, 2}, 2.5, 1, 4},
	}
	for _, c := range cases {
		med, lo, hi := median(c.in)
		if med != c.med || lo != c.lo || hi != c.hi {
			t.Errorf("median(%v) = %v %v %v", c.in, med, lo, hi)
		}
	}
}

func TestParseTarget(t *testing.T) {
	cases := map[string]Target{
		"/mnt/c":               {"c", "/mnt/c"},
		"tmpfs=/tmp/x":         {"tmpfs", "/tmp/x"},
		"/a=b/c":               {"c", "/a=b/c"},
		"/tmp/conquest-peers/": {"conquest-peers", "/tmp/conquest-peers/"},
	}
	for in, want := range cases {
		if got := ParseTarget(in); got != want {
			t.Errorf("ParseTarget(%q) = %+v, want %+v", in, got, want)
		}
	}
	got := uniqueLabels([]Target{{"a", "1"}, {"a", "2"}, {"b", "3"}, {"a", "4"}})
	if got[1].Label != "a#2" || got[3].Label != "a#3" || got[2].Label != "b" {
		t.Errorf("uniqueLabels = %+v", got)
	}
}

func TestProgressNilIsSilent(t *testing.T) {
	var p *Progress
	p.SetPrefix("x")
	p.Begin("y", 3)
	p.Step(1)
	p.End()
	p.Note("z")
	if NewProgress(nil) != nil {
		t.Error("NewProgress(nil) not nil")
	}
}

func TestPhaseStart(t *testing.T) {
	if n := DefaultEvictBytes(); n < minEvict || n > maxEvict {
		t.Errorf("DefaultEvictBytes = %d", n)
	}
	if err := (PhaseStart{EvictBytes: 1 << 20}).Settle(); err != nil {
		t.Fatal(err)
	}
}
