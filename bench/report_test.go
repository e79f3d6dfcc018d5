package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleReport(t *testing.T) *Report {
	t.Helper()
	var calls []string
	rep, err := Run(context.Background(), fakeBench{values: []float64{1000, 2000, 1500, 500}, calls: &calls},
		Options{Targets: []Target{{"conquest", t.TempDir()}, {"tmpfs <&>", t.TempDir()}}, Runs: 2})
	if err != nil {
		t.Fatal(err)
	}
	return rep
}

func TestReportFiles(t *testing.T) {
	rep := sampleReport(t)
	dir := filepath.Join(t.TempDir(), "out")
	paths, err := rep.WriteFiles(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(paths) != 3 {
		t.Fatalf("paths %v", paths)
	}
	checkReportFiles(t, dir, "fake", 2, 2)
}

// checkReportFiles checks that dir holds NAME.json, NAME.svg and NAME.md
// for a report on targets targets over runs runs, and that they parse.
func checkReportFiles(t *testing.T, dir, name string, targets, runs int) *Report {
	t.Helper()
	js, err := os.ReadFile(filepath.Join(dir, name+".json"))
	if err != nil {
		t.Fatal(err)
	}
	var got Report
	if err := json.Unmarshal(js, &got); err != nil {
		t.Fatalf("%s.json: %v", name, err)
	}
	if got.Title() != name || len(got.Targets) != targets || len(got.Samples) != targets*runs || got.Runs != runs {
		t.Errorf("%s.json: benchmark %q, %d targets, %d samples, runs %d", name, got.Benchmark, len(got.Targets), len(got.Samples), got.Runs)
	}
	if len(got.Metrics) == 0 || len(got.Metrics[0].Targets) != targets || got.Machine.CPUs == 0 {
		t.Errorf("%s.json: metrics %+v, machine %+v", name, got.Metrics, got.Machine)
	}

	svg, err := os.ReadFile(filepath.Join(dir, name+".svg"))
	if err != nil {
		t.Fatal(err)
	}
	bars := 0
	dec := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := dec.Token()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("%s.svg is not well-formed XML: %v", name, err)
		}
		if se, ok := tok.(xml.StartElement); ok && se.Name.Local == "rect" {
			for _, a := range se.Attr {
				if a.Name.Local == "class" && a.Value == "bar" {
					bars++
				}
			}
		}
	}
	if want := len(got.Metrics) * targets; bars != want {
		t.Errorf("%s.svg: %d bars, want %d", name, bars, want)
	}

	md, err := os.ReadFile(filepath.Join(dir, name+".md"))
	if err != nil {
		t.Fatal(err)
	}
	if rows := strings.Count(string(md), "\n| "); rows != len(got.Metrics)+1 {
		t.Errorf("%s.md: %d table rows, want %d:\n%s", name, rows, len(got.Metrics)+1, md)
	}
	return &got
}

func TestReportTable(t *testing.T) {
	rep := sampleReport(t)
	tab := rep.Table()
	// conquest: 1000, 1500 -> 1,250; tmpfs: 2000, 500 -> 1,250 (1.00x).
	for _, want := range []string{
		"| fake | unit | conquest | tmpfs <&> |",
		"| speed ↑ | op/s | 1,250 [1,000–1,500] | 1,250 (1.00x) [500–2,000] |",
		"| time ↓ | s |",
	} {
		if !strings.Contains(tab, want) {
			t.Errorf("table lacks %q:\n%s", want, tab)
		}
	}
	if !strings.Contains(string(rep.SVG()), "tmpfs &lt;&amp;&gt;") {
		t.Error("SVG does not escape labels")
	}
}

func TestFormatValue(t *testing.T) {
	cases := map[float64]string{0: "0", 1234567.4: "1,234,567", 999.4: "999", 12.345: "12.3", 0.012345: "0.0123", -4321: "-4,321"}
	for v, want := range cases {
		if got := FormatValue(v); got != want {
			t.Errorf("FormatValue(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestFormatRatio(t *testing.T) {
	cases := map[float64]string{1: "1.00x", 1.256: "1.26x", 0.5: "0.50x", 0.01834: "0.018x", 0.0012: "0.0012x", 60.81: "60.81x"}
	for v, want := range cases {
		if got := FormatRatio(v); got != want {
			t.Errorf("FormatRatio(%v) = %q, want %q", v, got, want)
		}
	}
}

func TestNiceStep(t *testing.T) {
	cases := map[float64]float64{0: 1, 0.3: 0.5, 1: 1, 1.1: 2, 3: 5, 7: 10, 420: 500}
	for in, want := range cases {
		if got := niceStep(in); got != want {
			t.Errorf("niceStep(%v) = %v, want %v", in, got, want)
		}
	}
}
