package bench

import (
	"bytes"
	"encoding/xml"
	"fmt"
	"math"
	"strings"
)

// SVG geometry, in pixels.
const (
	svgPanelW  = 280
	svgPanelH  = 230
	svgCols    = 3
	svgHeaderH = 76
	svgPlotTop = 44 // inside a panel: title above
	svgPlotBot = 46 // inside a panel: target labels below
	svgPlotL   = 52 // inside a panel: y-axis labels left
	svgPlotR   = 14
)

var svgPalette = []string{"#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2", "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac"}

// SVG draws the report as a grid of bar charts, one per metric, each with its
// own scale: a bar per target at the median, a whisker from min to max, the
// median written above. It is written by hand, so that the package needs no
// plotting library.
func (r *Report) SVG() []byte {
	cols := min(svgCols, max(1, len(r.Metrics)))
	rows := (len(r.Metrics) + cols - 1) / cols
	w := cols * svgPanelW
	h := svgHeaderH + rows*svgPanelH + 8
	var b bytes.Buffer
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%d" height="%d" viewBox="0 0 %d %d" font-family="sans-serif" font-size="11">`+"\n", w, h, w, h)
	fmt.Fprintf(&b, `<rect width="%d" height="%d" fill="#ffffff"/>`+"\n", w, h)
	fmt.Fprintf(&b, `<text x="10" y="20" font-size="15" font-weight="bold">%s</text>`+"\n",
		esc(fmt.Sprintf("conquest bench %s — median of %d run(s), whiskers min–max", r.Title(), r.Runs)))
	fmt.Fprintf(&b, `<text x="10" y="37" fill="#555">%s</text>`+"\n",
		esc(fmt.Sprintf("%s · %s · %d CPUs · %s", r.Date.Format("2006-01-02 15:04 MST"), r.Machine.Hostname, r.Machine.CPUs, r.Machine.CPU)))
	fmt.Fprintf(&b, `<text x="10" y="52" fill="#555" font-size="9">%s</text>`+"\n", esc(shorten(r.Benchmark+" "+r.ConfigJSON(), w/5)))
	// Legend.
	x := 10
	for i, t := range r.Targets {
		fmt.Fprintf(&b, `<rect x="%d" y="58" width="12" height="12" fill="%s"/><text x="%d" y="68">%s</text>`+"\n",
			x, svgPalette[i%len(svgPalette)], x+16, esc(t.Label))
		x += 16 + 7*len([]rune(t.Label)) + 18
	}
	for i, m := range r.Metrics {
		px := (i % cols) * svgPanelW
		py := svgHeaderH + (i/cols)*svgPanelH
		r.svgPanel(&b, m, px, py)
	}
	b.WriteString("</svg>\n")
	return b.Bytes()
}

func (r *Report) svgPanel(b *bytes.Buffer, m MetricStats, px, py int) {
	fmt.Fprintf(b, `<g transform="translate(%d,%d)">`+"\n", px, py)
	fmt.Fprintf(b, `<rect x="4" y="4" width="%d" height="%d" fill="none" stroke="#ddd"/>`+"\n", svgPanelW-8, svgPanelH-8)
	better := "higher is better"
	if !m.HigherIsBetter {
		better = "lower is better"
	}
	fmt.Fprintf(b, `<text x="%d" y="22" text-anchor="middle" font-weight="bold">%s</text>`+"\n", svgPanelW/2, esc(m.Name))
	fmt.Fprintf(b, `<text x="%d" y="36" text-anchor="middle" fill="#555">%s</text>`+"\n", svgPanelW/2, esc(m.Unit+", "+better))

	top, bot := svgPlotTop+10, svgPanelH-svgPlotBot
	left, right := svgPlotL, svgPanelW-svgPlotR
	hi := 0.0
	for _, s := range m.Targets {
		hi = math.Max(hi, math.Max(s.Max, s.Median))
	}
	step := niceStep(hi / 4)
	axisMax := step * math.Ceil(hi/step)
	if axisMax <= 0 {
		axisMax = 1
	}
	y := func(v float64) float64 { return float64(bot) - (v/axisMax)*float64(bot-top) }
	for v := 0.0; v <= axisMax*1.0001; v += step {
		fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%.1f" y2="%.1f" stroke="#eee"/><text x="%d" y="%.1f" text-anchor="end" fill="#555">%s</text>`+"\n",
			left, right, y(v), y(v), left-4, y(v)+4, esc(FormatValue(v)))
	}
	fmt.Fprintf(b, `<line x1="%d" x2="%d" y1="%d" y2="%d" stroke="#333"/>`+"\n", left, right, bot, bot)

	n := max(1, len(m.Targets))
	slot := float64(right-left) / float64(n)
	bw := math.Min(slot*0.7, 48)
	for i, s := range m.Targets {
		cx := float64(left) + slot*(float64(i)+0.5)
		color := svgPalette[i%len(svgPalette)]
		fmt.Fprintf(b, `<rect class="bar" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s</title></rect>`+"\n",
			cx-bw/2, y(s.Median), bw, float64(bot)-y(s.Median), color,
			esc(fmt.Sprintf("%s: median %s %s, min %s, max %s", s.Target, FormatValue(s.Median), m.Unit, FormatValue(s.Min), FormatValue(s.Max))))
		if s.Max > s.Min {
			fmt.Fprintf(b, `<path d="M%.1f %.1fV%.1fM%.1f %.1fH%.1fM%.1f %.1fH%.1f" stroke="#222" fill="none"/>`+"\n",
				cx, y(s.Min), y(s.Max), cx-5, y(s.Min), cx+5, cx-5, y(s.Max), cx+5)
		}
		label := FormatValue(s.Median)
		if i > 0 && s.Ratio != 0 {
			label += " (" + FormatRatio(s.Ratio) + ")"
		}
		fmt.Fprintf(b, `<text x="%.1f" y="%.1f" text-anchor="middle" font-size="10">%s</text>`+"\n",
			cx, math.Min(y(s.Median), y(s.Max))-4, esc(label))
		fmt.Fprintf(b, `<text x="%.1f" y="%d" text-anchor="middle">%s</text>`+"\n", cx, bot+16, esc(shorten(s.Target, int(slot/6.5))))
	}
	b.WriteString("</g>\n")
}

// niceStep rounds x up to 1, 2 or 5 times a power of ten.
func niceStep(x float64) float64 {
	if x <= 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(x)))
	for _, m := range []float64{1, 2, 5, 10} {
		if m*p >= x {
			return m * p
		}
	}
	return 10 * p
}

func shorten(s string, n int) string {
	r := []rune(s)
	if n < 4 || len(r) <= n {
		return s
	}
	return string(r[:n-1]) + "…"
}

func esc(s string) string {
	var b strings.Builder
	xml.EscapeText(&b, []byte(s))
	return b.String()
}
