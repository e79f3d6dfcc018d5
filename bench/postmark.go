package bench

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"syscall"
	"time"
)

// PostMarkConfig is a PostMark run: the parameters of PostMark 1.5's "set"
// commands, plus Fsync. A PostMarkConfig is a Benchmark.
//
// The algorithm is PostMark's (Katcher, NetApp TR-3022; version 1.5 and the
// 1.53 Debian ships behave alike):
//   - the generator is seeded, and 2*SizeHigh random printable bytes are drawn
//     for the data source;
//   - creation phase: Files files are created, named by a running count, each
//     in subdirectory s<RND(Subdirs)> when Subdirs > 1, with a size of
//     SizeLow + RND(SizeHigh-SizeLow), written in WriteBlock pieces;
//   - transaction phase: each of Transactions transactions first reads (with
//     probability BiasRead/10) or appends to a random live file (picked by
//     drawing slots of a table of 2*Files until a live one comes up), then
//     creates a file (probability BiasCreate/10) or deletes a random live one.
//     A read reads the whole file in ReadBlock pieces; an append adds
//     RND(SizeHigh-size)+1 bytes, and nothing if the file is already SizeHigh.
//     A bias of -1 leaves that half of the transaction out;
//   - deletion phase: the remaining files are deleted in table order.
//
// The generator is PostMark's Mersenne Twister (postmark_rand.go), so the
// sequence of operations and sizes is the postmark binary's. The data is not:
// PostMark writes every file from the start of its source buffer, and this
// writes the bytes that content.go defines for the file and offset, so that
// every read verifies. Buffered I/O follows glibc stdio: the file is fstat'ed
// on first use and a buffer of st_blksize bytes turns the 512-byte fwrites
// into block-sized writes; an append opens with O_APPEND and seeks to the end
// (which stdio does too, and which here also checks the file's size).
// Unbuffered I/O makes one read or write system call per block, as PostMark's
// read/write path does.
//
// Fsync, not in PostMark, syncs each file after it is created or appended to,
// before closing it, as a mail server does before acknowledging a message.
type PostMarkConfig struct {
	Files        int    `json:"files"`        // "set number": files in the initial pool
	Transactions int    `json:"transactions"` // "set transactions"
	SizeLow      int64  `json:"size_low"`     // "set size LOW HIGH", bytes
	SizeHigh     int64  `json:"size_high"`
	Subdirs      int    `json:"subdirectories"` // "set subdirectories"; used when > 1
	ReadBlock    int    `json:"read_block"`     // "set read", bytes
	WriteBlock   int    `json:"write_block"`    // "set write", bytes
	BiasRead     int    `json:"bias_read"`      // "set bias read": 0..10 in 10 reads (vs appends), -1 none
	BiasCreate   int    `json:"bias_create"`    // "set bias create": 0..10 in 10 creates (vs deletes), -1 none
	Buffered     bool   `json:"buffered"`       // "set buffering"
	Seed         uint32 `json:"seed"`           // "set seed"
	Fsync        bool   `json:"fsync"`
}

// DefaultPostMark is PostMark 1.5's configuration before any "set" command.
func DefaultPostMark() PostMarkConfig {
	return PostMarkConfig{
		Files: 500, Transactions: 500, SizeLow: 500, SizeHigh: 10000,
		ReadBlock: 512, WriteBlock: 512, BiasRead: 5, BiasCreate: 5,
		Buffered: true, Seed: 42,
	}
}

// Preset is a named configuration.
type Preset[C any] struct {
	Name, Description string
	Config            C
}

// PostMarkPresets are the configurations of the original evaluation and of
// shared/bench/compare.sh. The working-set presets keep 10,000 files, as the
// Conquest paper did, and draw sizes uniformly from half to one and a half
// times the mean that gives the working set (files x mean size).
func PostMarkPresets() []Preset[PostMarkConfig] {
	ws := func(name string, bytes int64) Preset[PostMarkConfig] {
		c := DefaultPostMark()
		c.Files, c.Transactions = 10000, 50000
		mean := bytes / int64(c.Files)
		c.SizeLow, c.SizeHigh = mean/2, mean*3/2
		return Preset[PostMarkConfig]{name, fmt.Sprintf("10,000 files, %s working set (%s to %s), 50,000 transactions",
			FormatSize(bytes), FormatSize(c.SizeLow), FormatSize(c.SizeHigh)), c}
	}
	with := func(files, txns int, lo, hi int64) PostMarkConfig {
		c := DefaultPostMark()
		c.Files, c.Transactions, c.SizeLow, c.SizeHigh = files, txns, lo, hi
		return c
	}
	return []Preset[PostMarkConfig]{
		{"default", "PostMark 1.5 defaults: 500 files of 500 B to 10,000 B, 500 transactions", DefaultPostMark()},
		{"quick", "1,000 files of 500 B to 10,000 B, 5,000 transactions", with(1000, 5000, 500, 10000)},
		{"small", "10,000 files of 500 B to 10,000 B, 50,000 transactions (compare.sh PM_SMALL)", with(10000, 50000, 500, 10000)},
		{"large", "1,000 files of 500 B to 1 MiB, 5,000 transactions (compare.sh PM_LARGE)", with(1000, 5000, 500, 1<<20)},
		ws("ws80m", 80<<20),
		ws("ws250m", 250<<20),
		ws("ws1g", 1<<30),
		ws("ws4g", 4<<30),
	}
}

// Name is "postmark".
func (PostMarkConfig) Name() string { return "postmark" }

// Validate reports parameters PostMark would refuse or could not run.
func (c PostMarkConfig) Validate() error {
	switch {
	case c.Files < 1:
		return errors.New("postmark: need at least one file")
	case c.Transactions < 0:
		return errors.New("postmark: negative transactions")
	case c.SizeLow < 1 || c.SizeHigh < c.SizeLow:
		return fmt.Errorf("postmark: sizes must satisfy 1 <= low <= high, have %d..%d", c.SizeLow, c.SizeHigh)
	case c.SizeHigh > 1<<31-1:
		return errors.New("postmark: file sizes are C ints in PostMark; high bound must be < 2 GiB")
	case c.ReadBlock < 1 || c.WriteBlock < 1:
		return errors.New("postmark: block sizes must be positive")
	case c.BiasRead < -1 || c.BiasRead > 10 || c.BiasCreate < -1 || c.BiasCreate > 10:
		return errors.New("postmark: biases must be -1 (off) or 0..10")
	}
	return nil
}

// ErrOutOfFiles is PostMark's "out of files!": the transactions deleted every
// file. PostMark prints no report then; neither does this.
var ErrOutOfFiles = errors.New("postmark: out of files; increase the number of files or decrease the number of transactions")

// PostMarkResult holds a run's counters and phase times, as PostMark's
// verbose report does.
type PostMarkResult struct {
	Created, Read, Appended, Deleted int
	DeletedAlone                     int // in the deletion phase
	BytesRead, BytesWritten          int64
	CreateTime, TxnTime, DeleteTime  time.Duration
	Transactions                     int
	Files                            int // created in the creation phase
}

// Elapsed is the three phases together (PostMark's "seconds total").
func (r PostMarkResult) Elapsed() time.Duration { return r.CreateTime + r.TxnTime + r.DeleteTime }

// Result turns the counters into metrics: PostMark's headline rates.
func (r PostMarkResult) Result() Result {
	el := r.Elapsed()
	return Result{
		Metrics: []Metric{
			{"transactions", "txn/s", rate(float64(r.Transactions), r.TxnTime), true},
			{"creation alone", "files/s", rate(float64(r.Files), r.CreateTime), true},
			{"deletion alone", "files/s", rate(float64(r.DeletedAlone), r.DeleteTime), true},
			{"data read", "MiB/s", rate(float64(r.BytesRead)/(1<<20), el), true},
			{"data written", "MiB/s", rate(float64(r.BytesWritten)/(1<<20), el), true},
			{"total time", "s", el.Seconds(), false},
		},
		Counts: map[string]float64{
			"files_created": float64(r.Created), "files_read": float64(r.Read),
			"files_appended": float64(r.Appended), "files_deleted": float64(r.Deleted),
			"files_deleted_alone": float64(r.DeletedAlone),
			"bytes_read":          float64(r.BytesRead), "bytes_written": float64(r.BytesWritten),
			"seconds_create": r.CreateTime.Seconds(), "seconds_transactions": r.TxnTime.Seconds(),
			"seconds_delete": r.DeleteTime.Seconds(), "seconds_total": el.Seconds(),
		},
	}
}

// Report prints the run the way PostMark's verbose report does.
func (r PostMarkResult) Report(w io.Writer) {
	el, tx := r.Elapsed().Seconds(), r.TxnTime.Seconds()
	per := func(n float64, s float64) float64 {
		if s <= 0 {
			return 0
		}
		return n / s
	}
	fmt.Fprintf(w, "Time:\n\t%.4f seconds total\n\t%.4f seconds of transactions (%.2f per second)\n",
		el, tx, per(float64(r.Transactions), tx))
	fmt.Fprintf(w, "\nFiles:\n\t%d created (%.2f per second)\n", r.Created, per(float64(r.Created), el))
	fmt.Fprintf(w, "\t\tCreation alone: %d files (%.2f per second)\n", r.Files, per(float64(r.Files), r.CreateTime.Seconds()))
	fmt.Fprintf(w, "\t\tMixed with transactions: %d files (%.2f per second)\n", r.Created-r.Files, per(float64(r.Created-r.Files), tx))
	fmt.Fprintf(w, "\t%d read (%.2f per second)\n\t%d appended (%.2f per second)\n",
		r.Read, per(float64(r.Read), tx), r.Appended, per(float64(r.Appended), tx))
	fmt.Fprintf(w, "\t%d deleted (%.2f per second)\n", r.Deleted, per(float64(r.Deleted), el))
	fmt.Fprintf(w, "\t\tDeletion alone: %d files (%.2f per second)\n", r.DeletedAlone, per(float64(r.DeletedAlone), r.DeleteTime.Seconds()))
	fmt.Fprintf(w, "\t\tMixed with transactions: %d files (%.2f per second)\n", r.Deleted-r.DeletedAlone, per(float64(r.Deleted-r.DeletedAlone), tx))
	fmt.Fprintf(w, "\nData:\n\t%.2f megabytes read (%.2f megabytes per second)\n", float64(r.BytesRead)/(1<<20), per(float64(r.BytesRead)/(1<<20), el))
	fmt.Fprintf(w, "\t%.2f megabytes written (%.2f megabytes per second)\n", float64(r.BytesWritten)/(1<<20), per(float64(r.BytesWritten)/(1<<20), el))
}

// Run implements Benchmark.
func (c PostMarkConfig) Run(ctx context.Context, env *Env) (Result, error) {
	r, err := c.RunPostMark(ctx, env)
	if err != nil {
		return Result{}, err
	}
	return r.Result(), nil
}

// RunPostMark runs PostMark once in env.Dir.
func (c PostMarkConfig) RunPostMark(ctx context.Context, env *Env) (PostMarkResult, error) {
	if err := c.Validate(); err != nil {
		return PostMarkResult{}, err
	}
	p := &postmark{cfg: c, env: env, rng: newMT(c.Seed)}
	p.res.Transactions, p.res.Files = c.Transactions, c.Files
	// PostMark's initialize_file_source: 2*high printable bytes. They are this
	// run's pattern, and drawing them keeps the stream where PostMark's is.
	src := make([]byte, 2*c.SizeHigh)
	for i := range src {
		src[i] = byte(32 + p.rng.rnd(95))
	}
	p.pat = newPattern(src)
	p.table = make([]pmFile, 2*c.Files)
	p.rbuf = make([]byte, max(c.ReadBlock, 1<<16)+1)

	if c.Subdirs > 1 {
		for i := range c.Subdirs {
			if err := env.FS.Mkdir(filepath.Join(env.Dir, "s"+strconv.Itoa(i)), 0o700); err != nil {
				return p.res, err
			}
		}
	}
	if err := env.settle(); err != nil {
		return p.res, err
	}
	prog := env.Progress

	t0 := time.Now()
	prog.Begin("creating files", c.Files)
	for i := range c.Files {
		if err := p.tick(ctx, i); err != nil {
			return p.res, err
		}
		if err := p.create(); err != nil {
			return p.res, err
		}
		prog.Step(i + 1)
	}
	prog.End()

	t1 := time.Now()
	prog.Begin("transactions", c.Transactions)
	for i := range c.Transactions {
		if err := p.tick(ctx, i); err != nil {
			return p.res, err
		}
		if p.res.Created == p.res.Deleted {
			return p.res, ErrOutOfFiles
		}
		if c.BiasRead != -1 {
			var err error
			if p.rng.rnd(10) < int64(c.BiasRead) {
				err = p.read(p.findUsed())
			} else {
				err = p.append(p.findUsed())
			}
			if err != nil {
				return p.res, err
			}
		}
		if c.BiasCreate != -1 {
			var err error
			if p.rng.rnd(10) < int64(c.BiasCreate) {
				err = p.create()
			} else {
				err = p.delete(p.findUsed())
			}
			if err != nil {
				return p.res, err
			}
		}
		prog.Step(i + 1)
	}
	prog.End()

	t2 := time.Now()
	base := p.res.Deleted
	prog.Begin("deleting files", p.res.Created-p.res.Deleted)
	for i := range p.table {
		if err := p.tick(ctx, i); err != nil {
			return p.res, err
		}
		if err := p.delete(i); err != nil {
			return p.res, err
		}
		prog.Step(p.res.Deleted - base)
	}
	prog.End()
	t3 := time.Now()

	if c.Subdirs > 1 {
		for i := range c.Subdirs {
			if err := env.FS.Remove(filepath.Join(env.Dir, "s"+strconv.Itoa(i))); err != nil {
				return p.res, err
			}
		}
	}
	p.res.DeletedAlone = p.res.Deleted - base
	p.res.CreateTime, p.res.TxnTime, p.res.DeleteTime = t1.Sub(t0), t2.Sub(t1), t3.Sub(t2)
	return p.res, nil
}

// pmFile is a slot of PostMark's file table; size 0 means free.
type pmFile struct {
	name string
	size int64
	key  uint64 // the file's creation number: its content key
}

type postmark struct {
	cfg       PostMarkConfig
	env       *Env
	rng       *mt19937
	pat       *pattern
	table     []pmFile
	allocated int // find_free_file's cursor
	rbuf      []byte
	res       PostMarkResult
}

// tick checks for cancellation every 256 iterations.
func (p *postmark) tick(ctx context.Context, i int) error {
	if i&255 == 0 {
		return ctx.Err()
	}
	return nil
}

// findFree is find_free_file: the next slot if free, else the first free one.
func (p *postmark) findFree() int {
	if p.allocated < len(p.table) && p.table[p.allocated].size == 0 {
		p.allocated++
		return p.allocated - 1
	}
	for i := range p.table {
		if p.table[i].size == 0 {
			p.allocated = i + 1
			return i
		}
	}
	return -1
}

// findUsed is find_used_file: random slots until a live one comes up.
func (p *postmark) findUsed() int {
	for {
		i := p.rng.rnd(int64(len(p.table)))
		if p.table[i].size != 0 {
			return int(i)
		}
	}
}

// create is create_file.
func (p *postmark) create() error {
	slot := p.findFree()
	if slot < 0 {
		return nil
	}
	name := p.env.Dir
	if p.cfg.Subdirs > 1 {
		name = filepath.Join(name, "s"+strconv.FormatInt(p.rng.rnd(int64(p.cfg.Subdirs)), 10))
	}
	p.res.Created++
	name = filepath.Join(name, strconv.Itoa(p.res.Created))
	size := p.cfg.SizeLow + p.rng.rnd(p.cfg.SizeHigh-p.cfg.SizeLow)
	p.table[slot] = pmFile{name: name, size: size, key: uint64(p.res.Created)}

	flag, perm := os.O_WRONLY|os.O_CREATE|os.O_TRUNC, os.FileMode(0o666) // fopen "w"
	if !p.cfg.Buffered {
		flag, perm = os.O_RDWR|os.O_CREATE, 0o644 // PostMark's open()
	}
	f, err := p.env.FS.OpenFile(name, flag, perm)
	if err != nil {
		return err
	}
	return p.writeClose(f, p.table[slot].key, 0, size)
}

// append is append_file.
func (p *postmark) append(i int) error {
	e := &p.table[i]
	if e.size >= p.cfg.SizeHigh {
		return nil
	}
	flag := os.O_WRONLY | os.O_CREATE | os.O_APPEND // fopen "a"
	if !p.cfg.Buffered {
		flag = os.O_RDWR | os.O_APPEND
	}
	f, err := p.env.FS.OpenFile(e.name, flag, 0o666)
	if err != nil {
		return err
	}
	if p.cfg.Buffered { // stdio seeks to the end on fopen "a"
		end, err := f.Seek(0, io.SeekEnd)
		if err != nil {
			f.Close()
			return err
		}
		if end != e.size {
			f.Close()
			return corrupt(e.name, "size %d, wrote %d", end, e.size)
		}
	}
	block := p.rng.rnd(p.cfg.SizeHigh-e.size) + 1
	if err := p.writeClose(f, e.key, e.size, block); err != nil {
		return err
	}
	e.size += block
	p.res.Appended++
	return nil
}

// writeClose writes n bytes of file key from offset off in WriteBlock pieces
// (buffered or not), syncs if asked, and closes f.
func (p *postmark) writeClose(f File, key uint64, off, n int64) error {
	var w io.Writer = f
	var bw *bufio.Writer
	if p.cfg.Buffered {
		bw = bufio.NewWriterSize(f, stdioBufSize(f))
		w = bw
	}
	err := func() error {
		wb := int64(p.cfg.WriteBlock)
		for done := int64(0); done < n; {
			k := min(wb, n-done)
			if _, err := writeFull(w, p.pat, key, off+done, k); err != nil {
				return err
			}
			done += k
		}
		if bw != nil {
			if err := bw.Flush(); err != nil {
				return err
			}
		}
		if p.cfg.Fsync {
			return f.Sync()
		}
		return nil
	}()
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	p.res.BytesWritten += n
	return err
}

// writeFull writes n bytes of the pattern of key at off, in one Write call
// when n fits the pattern.
func writeFull(w io.Writer, pat *pattern, key uint64, off, n int64) (int64, error) {
	var done int64
	for done < n {
		k := min(n-done, int64(pat.n))
		m, err := w.Write(pat.view(key, off+done, int(k)))
		done += int64(m)
		if err != nil {
			return done, err
		}
	}
	return done, nil
}

// read is read_file, verifying every block.
func (p *postmark) read(i int) error {
	e := &p.table[i]
	f, err := p.env.FS.OpenFile(e.name, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	err = p.readVerify(f, e)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		p.res.BytesRead += e.size
		p.res.Read++
	}
	return err
}

func (p *postmark) readVerify(f File, e *pmFile) error {
	rb := int64(p.cfg.ReadBlock)
	if p.cfg.Buffered {
		br := bufio.NewReaderSize(f, stdioBufSize(f))
		for off := int64(0); off < e.size; {
			k := min(rb, e.size-off)
			buf := p.buf(k)
			if _, err := io.ReadFull(br, buf); err != nil {
				return shortRead(e.name, off, err)
			}
			if err := p.pat.verify(buf, e.key, off, e.name); err != nil {
				return err
			}
			off += k
		}
		if br.Buffered() > 0 { // the file went on past its size
			return corrupt(e.name, "longer than the %d bytes written", e.size)
		}
		return nil
	}
	// Unbuffered: one read per block; the last asks one byte more than is
	// left, so a file that is too long shows without an extra call.
	for off := int64(0); ; {
		k := min(rb, e.size-off)
		last := off+k == e.size
		want := k
		if last {
			want = k + 1
		}
		buf := p.buf(want)
		n, err := readAtLeast(f, buf, k)
		if n > int(k) {
			return corrupt(e.name, "longer than the %d bytes written", e.size)
		}
		if int64(n) < k {
			return shortRead(e.name, off+int64(n), err)
		}
		if err := p.pat.verify(buf[:k], e.key, off, e.name); err != nil {
			return err
		}
		off += k
		if last {
			return nil
		}
	}
}

// buf returns a read buffer of n bytes, growing the run's buffer if needed.
func (p *postmark) buf(n int64) []byte {
	if int64(len(p.rbuf)) < n {
		p.rbuf = make([]byte, n)
	}
	return p.rbuf[:n]
}

// readAtLeast calls Read at least once, and again until buf holds min bytes
// or is full; it returns the count and the error that stopped it.
func readAtLeast(r io.Reader, buf []byte, min int64) (int, error) {
	n := 0
	for {
		m, err := r.Read(buf[n:])
		n += m
		switch {
		case err != nil:
			return n, err
		case int64(n) >= min || n == len(buf):
			return n, nil
		case m == 0:
			return n, io.ErrNoProgress
		}
	}
}

// shortRead reports a file that ended, or failed, before its size.
func shortRead(name string, off int64, err error) error {
	if err == nil || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return corrupt(name, "ends at offset %d, before the size written", off)
	}
	return fmt.Errorf("%s: read at %d: %w", name, off, err)
}

// delete is delete_file: remove a live file.
func (p *postmark) delete(i int) error {
	e := &p.table[i]
	if e.size == 0 {
		return nil
	}
	if err := p.env.FS.Remove(e.name); err != nil {
		return err
	}
	e.size = 0
	p.res.Deleted++
	return nil
}

// stdioBufSize is the buffer glibc's stdio gives a file: st_blksize from
// fstat, or BUFSIZ (8192) if that is unknown.
func stdioBufSize(f File) int {
	fi, err := f.Stat()
	if err == nil {
		if st, ok := fi.Sys().(*syscall.Stat_t); ok && st.Blksize > 0 {
			return int(st.Blksize)
		}
	}
	return 8192
}

// PostMarkPresetNames lists the preset names, sorted as declared.
func PostMarkPresetNames() []string {
	var names []string
	for _, p := range PostMarkPresets() {
		names = append(names, p.Name)
	}
	return names
}

// findPreset returns the preset called name.
func findPreset[C any](presets []Preset[C], name string) (C, error) {
	for _, p := range presets {
		if p.Name == name {
			return p.Config, nil
		}
	}
	var names []string
	for _, p := range presets {
		names = append(names, p.Name)
	}
	sort.Strings(names)
	var zero C
	return zero, fmt.Errorf("unknown preset %q (have %v)", name, names)
}
