package bench

import (
	"fmt"
	"io"
	"time"
)

// Progress prints what a run is doing, PostMark style: the phase name, a dot
// for every tenth of the work, and the phase's time. It writes whole
// fragments, never carriage returns, so it reads the same on a terminal and
// in a log. A nil *Progress prints nothing.
type Progress struct {
	w      io.Writer
	prefix string
	phase  string
	total  int
	dots   int
	start  time.Time
	open   bool
}

// NewProgress returns a Progress writing to w, or nil (silent) if w is nil.
func NewProgress(w io.Writer) *Progress {
	if w == nil {
		return nil
	}
	return &Progress{w: w}
}

// SetPrefix sets the text that starts each phase line, e.g. "[1/3 tmpfs] postmark".
func (p *Progress) SetPrefix(s string) {
	if p != nil {
		p.prefix = s
	}
}

// Begin starts a phase of total steps.
func (p *Progress) Begin(phase string, total int) {
	if p == nil {
		return
	}
	p.finishLine()
	p.phase, p.total, p.dots, p.start, p.open = phase, total, 0, time.Now(), true
	fmt.Fprintf(p.w, "%s: %s ", p.prefix, phase)
}

// Step reports that done of the phase's total steps are finished.
func (p *Progress) Step(done int) {
	if p == nil || !p.open || p.total <= 0 {
		return
	}
	for p.dots < 10 && done*10 >= (p.dots+1)*p.total {
		p.dots++
		io.WriteString(p.w, ".")
	}
}

// End finishes the phase and prints its duration.
func (p *Progress) End() {
	if p == nil || !p.open {
		return
	}
	p.Step(p.total)
	fmt.Fprintf(p.w, " %.3fs\n", time.Since(p.start).Seconds())
	p.open = false
}

// Note prints a line of its own.
func (p *Progress) Note(format string, args ...any) {
	if p == nil {
		return
	}
	p.finishLine()
	fmt.Fprintf(p.w, format+"\n", args...)
}

// finishLine ends a phase line left open by an error.
func (p *Progress) finishLine() {
	if p.open {
		io.WriteString(p.w, " interrupted\n")
		p.open = false
	}
}
