package bench

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"
)

// Report is the outcome of Run: every sample, and per metric the median,
// min and max on each target with the ratio to the first target.
type Report struct {
	Benchmark  string        `json:"benchmark"`
	Name       string        `json:"name,omitempty"` // what the results are filed and titled as; "" means Benchmark
	Config     any           `json:"config"`
	Date       time.Time     `json:"date"`
	Machine    Machine       `json:"machine"`
	Runs       int           `json:"runs"`
	PhaseStart PhaseStart    `json:"phase_start"`
	Targets    []Target      `json:"targets"`
	Metrics    []MetricStats `json:"metrics"`
	Samples    []Sample      `json:"samples"` // in the order they were run
}

// Sample is one run of the benchmark on one target.
type Sample struct {
	Run    int    `json:"run"`
	Target string `json:"target"`
	Result
}

// Table is the report as a Markdown table: one row per metric, one column
// per target, each cell "median (ratio to the first target) [min–max]".
func (r *Report) Table() string {
	var b strings.Builder
	b.WriteString("| " + mdEscape(r.Title()) + " | unit |")
	for _, t := range r.Targets {
		b.WriteString(" " + mdEscape(t.Label) + " |")
	}
	b.WriteString("\n|---|---|")
	for range r.Targets {
		b.WriteString("---:|")
	}
	b.WriteString("\n")
	for _, m := range r.Metrics {
		better := "↑"
		if !m.HigherIsBetter {
			better = "↓"
		}
		fmt.Fprintf(&b, "| %s %s | %s |", mdEscape(m.Name), better, m.Unit)
		for i, s := range m.Targets {
			b.WriteString(" " + FormatValue(s.Median))
			if i > 0 && s.Ratio != 0 {
				b.WriteString(" (" + FormatRatio(s.Ratio) + ")")
			}
			if len(s.Values) > 1 {
				fmt.Fprintf(&b, " [%s–%s]", FormatValue(s.Min), FormatValue(s.Max))
			}
			b.WriteString(" |")
		}
		b.WriteString("\n")
	}
	return b.String()
}

// Markdown is the table with a heading and a line on how it was measured.
func (r *Report) Markdown() string {
	var b strings.Builder
	fmt.Fprintf(&b, "### %s\n\n", r.Title())
	fmt.Fprintf(&b, "Configuration of %s: `%s`\n\n", r.Benchmark, r.ConfigJSON())
	fmt.Fprintf(&b, "Median of %d run(s), interleaved; [min–max]; (ratio to %s). %s, %d CPUs, %s, %s.\n",
		r.Runs, r.firstLabel(), r.Machine.CPU, r.Machine.CPUs, r.Machine.Kernel, r.Date.Format(time.RFC3339))
	fmt.Fprintf(&b, "Each phase starts after: %s.\n\n", r.PhaseStart.describe())
	b.WriteString(r.Table())
	return b.String()
}

func (r *Report) firstLabel() string {
	if len(r.Targets) == 0 {
		return "-"
	}
	return r.Targets[0].Label
}

func (ps PhaseStart) describe() string {
	var parts []string
	if ps.Sync {
		parts = append(parts, "sync")
	}
	if ps.DropCaches {
		parts = append(parts, "dropping the page cache")
	}
	if ps.EvictBytes > 0 {
		parts = append(parts, "writing a "+FormatSize(ps.EvictBytes)+" buffer to evict CPU caches")
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// JSON is the report, indented.
func (r *Report) JSON() ([]byte, error) {
	b, err := json.MarshalIndent(r, "", "  ")
	if err != nil {
		return nil, err
	}
	return append(b, '\n'), nil
}

// Title is Name, or the benchmark's name.
func (r *Report) Title() string {
	if r.Name != "" {
		return r.Name
	}
	return r.Benchmark
}

// ConfigJSON is the benchmark's configuration as one line of JSON.
func (r *Report) ConfigJSON() string {
	b, err := json.Marshal(r.Config)
	if err != nil {
		return fmt.Sprint(r.Config)
	}
	return string(b)
}

// WriteFiles writes TITLE.json, TITLE.svg and TITLE.md into dir (created if
// missing) and returns their paths.
func (r *Report) WriteFiles(dir string) ([]string, error) {
	base := r.Title()
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := r.JSON()
	if err != nil {
		return nil, err
	}
	files := []struct {
		ext  string
		data []byte
	}{
		{".json", js},
		{".svg", r.SVG()},
		{".md", []byte(r.Markdown())},
	}
	var paths []string
	for _, f := range files {
		p := filepath.Join(dir, base+f.ext)
		if err := os.WriteFile(p, f.data, 0o644); err != nil {
			return paths, err
		}
		paths = append(paths, p)
	}
	return paths, nil
}

// FormatValue writes a figure for a table: thousands separated and no
// decimals from 1,000 up, three significant digits below.
func FormatValue(v float64) string {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return strconv.FormatFloat(v, 'f', -1, 64)
	case math.Abs(v) >= 1000:
		s := strconv.FormatFloat(math.Round(v), 'f', 0, 64)
		neg := strings.HasPrefix(s, "-")
		s = strings.TrimPrefix(s, "-")
		var b strings.Builder
		for i, c := range s {
			if i > 0 && (len(s)-i)%3 == 0 {
				b.WriteByte(',')
			}
			b.WriteRune(c)
		}
		if neg {
			return "-" + b.String()
		}
		return b.String()
	case v == 0:
		return "0"
	default:
		return strconv.FormatFloat(v, 'g', 3, 64)
	}
}

// FormatRatio writes a ratio with two decimals, or two significant digits
// below 0.1: "1.25x", "0.018x".
func FormatRatio(r float64) string {
	if math.Abs(r) < 0.1 {
		return strconv.FormatFloat(r, 'g', 2, 64) + "x"
	}
	return strconv.FormatFloat(r, 'f', 2, 64) + "x"
}

func mdEscape(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
