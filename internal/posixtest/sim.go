package posixtest

import (
	"errors"
	"fmt"
	"math/rand"
	"strings"
	"syscall"
	"testing"

	"golang.org/x/sys/unix"
)

// OpKind names a simulated operation. Each applies as one mutating system
// call (plus an open and close without side effects for writes), so that a
// crash leaves it either done or not done.
type OpKind uint8

const (
	OpCreate   OpKind = iota // open(O_CREAT | Flags, Mode), close
	OpWrite                  // open(O_WRONLY), pwrite(Off, Len bytes of pattern(Seed)), close
	OpAppend                 // open(O_WRONLY|O_APPEND), write(Len bytes), close
	OpTruncate               // open(O_WRONLY), ftruncate(Off), close
	OpMkdir                  // mkdir(Path, Mode)
	OpRmdir                  // rmdir(Path)
	OpUnlink                 // unlink(Path)
	OpLink                   // link(Path, Path2)
	OpSymlink                // symlink(Target, Path)
	OpRename                 // rename(Path, Path2)
	OpChmod                  // chmod(Path, Mode)
	OpMkfifo                 // mknod(Path, S_IFIFO|Mode)
	numOpKinds
)

var opNames = [...]string{"create", "write", "append", "truncate", "mkdir", "rmdir", "unlink", "link", "symlink", "rename", "chmod", "mkfifo"}

func (k OpKind) String() string {
	if int(k) < len(opNames) {
		return opNames[k]
	}
	return fmt.Sprintf("op%d", k)
}

// Op is one operation on paths relative to a root directory.
type Op struct {
	Kind   OpKind
	Path   string
	Path2  string // link and rename destination
	Target string // symlink target
	Flags  int    // extra open flags of OpCreate
	Mode   uint32
	Off    int64 // write offset, truncate size
	Len    int
	Seed   uint64
}

func (o Op) String() string {
	switch o.Kind {
	case OpCreate:
		return fmt.Sprintf("create %s flags=%#x mode=%o", o.Path, o.Flags, o.Mode)
	case OpWrite:
		return fmt.Sprintf("write %s off=%d len=%d", o.Path, o.Off, o.Len)
	case OpAppend:
		return fmt.Sprintf("append %s len=%d", o.Path, o.Len)
	case OpTruncate:
		return fmt.Sprintf("truncate %s %d", o.Path, o.Off)
	case OpMkdir, OpChmod, OpMkfifo:
		return fmt.Sprintf("%v %s %o", o.Kind, o.Path, o.Mode)
	case OpLink, OpRename:
		return fmt.Sprintf("%v %s %s", o.Kind, o.Path, o.Path2)
	case OpSymlink:
		return fmt.Sprintf("symlink %q %s", o.Target, o.Path)
	}
	return fmt.Sprintf("%v %s", o.Kind, o.Path)
}

// Apply performs the operation under root and returns the errno it failed
// with, or nil.
func (o Op) Apply(root string) error {
	fd, err := unix.Open(root, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	return o.ApplyAt(fd)
}

// ApplyAt performs the operation relative to the directory descriptor dirfd.
// Working through a descriptor keeps a workload on the mount it started on:
// after the daemon dies and the mount is detached, operations fail with
// ENOTCONN instead of landing in the directory underneath.
func (o Op) ApplyAt(dirfd int) error {
	p, q := o.Path, o.Path2
	var err error
	switch o.Kind {
	case OpCreate:
		var fd int
		// O_NONBLOCK: opening an existing FIFO fails with ENXIO instead of
		// blocking; it means nothing for regular files.
		fd, err = unix.Openat(dirfd, p, unix.O_CREAT|unix.O_WRONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|o.Flags, o.Mode)
		if err == nil {
			err = unix.Close(fd)
		}
	case OpWrite, OpAppend, OpTruncate:
		flags := unix.O_WRONLY | unix.O_CLOEXEC | unix.O_NONBLOCK
		if o.Kind == OpAppend {
			flags |= unix.O_APPEND
		}
		var fd int
		fd, err = unix.Openat(dirfd, p, flags|unix.O_CLOEXEC, 0)
		if err != nil {
			break
		}
		switch o.Kind {
		case OpTruncate:
			err = unix.Ftruncate(fd, o.Off)
		case OpAppend:
			err = writeAll(func(b []byte) (int, error) { return unix.Write(fd, b) }, pattern(o.Seed, o.Len))
		default:
			err = writeAll(func(b []byte) (int, error) { return unix.Pwrite(fd, b, o.Off) }, pattern(o.Seed, o.Len))
		}
		if cerr := unix.Close(fd); err == nil {
			err = cerr
		}
	case OpMkdir:
		err = unix.Mkdirat(dirfd, p, o.Mode)
	case OpRmdir:
		err = unix.Unlinkat(dirfd, p, unix.AT_REMOVEDIR)
	case OpUnlink:
		err = unix.Unlinkat(dirfd, p, 0)
	case OpLink:
		err = unix.Linkat(dirfd, p, dirfd, q, 0)
	case OpSymlink:
		err = unix.Symlinkat(o.Target, dirfd, p)
	case OpRename:
		err = unix.Renameat(dirfd, p, dirfd, q)
	case OpChmod:
		err = unix.Fchmodat(dirfd, p, o.Mode, 0)
	case OpMkfifo:
		err = unix.Mknodat(dirfd, p, unix.S_IFIFO|o.Mode, 0)
	default:
		err = fmt.Errorf("unknown op %d", o.Kind)
	}
	return err
}

// writeAll makes one write call and treats a short write as an error (the
// workload relies on each write being one request).
func writeAll(write func([]byte) (int, error), data []byte) error {
	n, err := write(data)
	if err == nil && n != len(data) {
		err = fmt.Errorf("short write %d of %d", n, len(data))
	}
	return err
}

// GenOptions shape the random operations.
type GenOptions struct {
	Prefix   string   // every path starts with Prefix + "/" ("" for none)
	Names    []string // path components; default a..e
	MaxDepth int      // default 3
	// BigFiles: about one write or truncate in BigEvery reaches past 1 MiB
	// (offsets and sizes up to BigMax, default 1.5 MiB).
	BigEvery int
	BigMax   int64
	MaxWrite int // largest write; default 32 KiB
	// PageWrites keeps every write inside one 4 KiB page, and makes no
	// appends. The kernel may split a larger write(2) into several FUSE
	// requests (at folio boundaries), so only such writes are atomic when
	// the daemon dies; crash workloads need them.
	PageWrites bool
}

// Gen produces random operations over a small namespace. It remembers which
// paths exist (from the outcomes passed to Observe) and aims most operations
// at them, so that operations hit existing files and interact.
type Gen struct {
	rng   *rand.Rand
	o     GenOptions
	files pathSet // regular files, symlinks, FIFOs
	dirs  pathSet
}

// NewGen returns a generator seeded with seed.
func NewGen(seed int64, o GenOptions) *Gen {
	if len(o.Names) == 0 {
		o.Names = []string{"a", "b", "c", "d", "e"}
	}
	if o.MaxDepth == 0 {
		o.MaxDepth = 3
	}
	if o.BigMax == 0 {
		o.BigMax = 3 << 19
	}
	if o.MaxWrite == 0 {
		o.MaxWrite = 32 << 10
	}
	return &Gen{rng: rand.New(rand.NewSource(seed)), o: o}
}

// pathSet is a set of paths with a deterministic order for random picks.
type pathSet struct {
	list []string
	idx  map[string]int
}

func (s *pathSet) add(p string) {
	if s.idx == nil {
		s.idx = map[string]int{}
	}
	if _, ok := s.idx[p]; !ok {
		s.idx[p] = len(s.list)
		s.list = append(s.list, p)
	}
}

func (s *pathSet) remove(p string) {
	i, ok := s.idx[p]
	if !ok {
		return
	}
	last := len(s.list) - 1
	s.list[i] = s.list[last]
	s.idx[s.list[i]] = i
	s.list = s.list[:last]
	delete(s.idx, p)
}

func (s *pathSet) has(p string) bool { _, ok := s.idx[p]; return ok }

// movePrefix renames every path under old (old itself included) to new.
func (s *pathSet) movePrefix(old, new string) {
	var moved []string
	for _, p := range s.list {
		if p == old || strings.HasPrefix(p, old+"/") {
			moved = append(moved, p)
		}
	}
	for _, p := range moved {
		s.remove(p)
		s.add(new + p[len(old):])
	}
}

func (s *pathSet) removePrefix(old string) {
	var gone []string
	for _, p := range s.list {
		if p == old || strings.HasPrefix(p, old+"/") {
			gone = append(gone, p)
		}
	}
	for _, p := range gone {
		s.remove(p)
	}
}

func (g *Gen) pick(s *pathSet) (string, bool) {
	if len(s.list) == 0 {
		return "", false
	}
	return s.list[g.rng.Intn(len(s.list))], true
}

// randomPath is a path of random components, existing or not.
func (g *Gen) randomPath() string {
	depth := 1
	for depth < g.o.MaxDepth && g.rng.Intn(100) < 45 {
		depth++
	}
	parts := make([]string, depth)
	for i := range parts {
		parts[i] = g.o.Names[g.rng.Intn(len(g.o.Names))]
	}
	p := strings.Join(parts, "/")
	if g.o.Prefix != "" {
		p = g.o.Prefix + "/" + p
	}
	return p
}

// newPath is a fresh name, usually inside a known directory.
func (g *Gen) newPath() string {
	name := g.o.Names[g.rng.Intn(len(g.o.Names))]
	if d, ok := g.pick(&g.dirs); ok && g.rng.Intn(100) < 60 && strings.Count(d, "/") < g.o.MaxDepth+1 {
		return d + "/" + name
	}
	if g.rng.Intn(100) < 20 {
		return g.randomPath()
	}
	if g.o.Prefix != "" {
		return g.o.Prefix + "/" + name
	}
	return name
}

// existing returns a known file (or dir, if dirs) most of the time, and a
// random path otherwise (to exercise the error paths).
func (g *Gen) existing(files, dirs bool) string {
	if g.rng.Intn(100) < 80 {
		var cands []*pathSet
		if files && len(g.files.list) > 0 {
			cands = append(cands, &g.files)
		}
		if dirs && len(g.dirs.list) > 0 {
			cands = append(cands, &g.dirs)
		}
		if len(cands) > 0 {
			p, _ := g.pick(cands[g.rng.Intn(len(cands))])
			return p
		}
	}
	return g.randomPath()
}

func (g *Gen) big() bool { return g.o.BigEvery > 0 && g.rng.Intn(g.o.BigEvery) == 0 }

func (g *Gen) offset() int64 {
	if g.big() {
		return g.rng.Int63n(g.o.BigMax)
	}
	return g.rng.Int63n(64 << 10)
}

const pageSize = 4096

var (
	fileModes = []uint32{0644, 0600, 0755, 0640, 0444, 0666}
	chmodList = []uint32{0, 0644, 0600, 0755, 0700, 0777, 04755, 02755, 01777, 06711, 0444}
)

// Next returns the next random operation.
func (g *Gen) Next() Op {
	r := g.rng
	o := Op{Seed: r.Uint64()}
	switch w := r.Intn(100); {
	case w < 15:
		o.Kind = OpCreate
		if r.Intn(3) == 0 {
			o.Path = g.existing(true, true)
		} else {
			o.Path = g.newPath()
		}
		o.Flags = []int{0, unix.O_EXCL, unix.O_TRUNC}[r.Intn(3)]
		o.Mode = fileModes[r.Intn(len(fileModes))]
	case w < 43:
		o.Kind = OpWrite
		o.Path = g.existing(true, false)
		o.Off = g.offset()
		o.Len = 1 + r.Intn(g.o.MaxWrite)
		if g.o.PageWrites {
			o.Len = 1 + r.Intn(pageSize-int(o.Off%pageSize))
		} else if w >= 37 {
			o.Kind = OpAppend
			o.Len = 1 + r.Intn(4096)
		}
	case w < 50:
		o.Kind = OpTruncate
		o.Path = g.existing(true, false)
		o.Off = g.offset()
	case w < 57:
		o.Kind = OpMkdir
		o.Path = g.newPath()
		o.Mode = []uint32{0755, 0700, 0777, 02755}[r.Intn(4)]
	case w < 63:
		o.Kind = OpRmdir
		o.Path = g.existing(false, true)
	case w < 69:
		o.Kind = OpUnlink
		o.Path = g.existing(true, r.Intn(5) == 0)
	case w < 74:
		o.Kind = OpLink
		o.Path = g.existing(true, r.Intn(5) == 0)
		o.Path2 = g.newPath()
	case w < 78:
		o.Kind = OpSymlink
		o.Path = g.newPath()
		// Relative targets without "..", so they stay inside the root.
		n := g.o.Names
		o.Target = strings.Join([]string{n[r.Intn(len(n))], n[r.Intn(len(n))]}[:1+r.Intn(2)], "/")
	case w < 90:
		o.Kind = OpRename
		o.Path = g.existing(true, true)
		if r.Intn(2) == 0 {
			o.Path2 = g.existing(true, true)
		} else {
			o.Path2 = g.newPath()
		}
	case w < 96:
		o.Kind = OpChmod
		o.Path = g.existing(true, true)
		o.Mode = chmodList[r.Intn(len(chmodList))]
	default:
		o.Kind = OpMkfifo
		o.Path = g.newPath()
		o.Mode = 0644
	}
	return o
}

// Observe tells the generator the outcome of op on the reference, so it
// can keep aiming at existing paths. The bookkeeping is approximate (a
// symlinked directory in a path confuses it); that only costs hit rate.
func (g *Gen) Observe(o Op, err error) {
	if err != nil {
		return
	}
	switch o.Kind {
	case OpCreate, OpSymlink, OpMkfifo:
		if !g.dirs.has(o.Path) {
			g.files.add(o.Path)
		}
	case OpMkdir:
		g.dirs.add(o.Path)
	case OpRmdir:
		g.dirs.remove(o.Path)
	case OpUnlink:
		g.files.remove(o.Path)
	case OpLink:
		g.files.add(o.Path2)
	case OpRename:
		if o.Path == o.Path2 {
			return
		}
		if g.dirs.has(o.Path) {
			g.dirs.removePrefix(o.Path2)
			g.files.removePrefix(o.Path2)
			g.dirs.movePrefix(o.Path, o.Path2)
			g.files.movePrefix(o.Path, o.Path2)
		} else {
			g.files.remove(o.Path)
			g.files.add(o.Path2)
		}
	}
}

// SimOptions configure Simulate.
type SimOptions struct {
	Seed       int64
	Ops        int
	CheckEvery int // compare the trees every CheckEvery operations (0: at the end only)
	Gen        GenOptions
}

// Simulate applies the same random operations to dir (the file system under
// test) and ref (the reference, e.g. a tmpfs) and fails the test at the
// first operation whose outcome (errno) differs, or when the trees differ at
// a checkpoint. The seed is logged so that a failure can be replayed.
func Simulate(t testing.TB, dir, ref string, o SimOptions) {
	t.Helper()
	t.Logf("simulation seed %d, %d ops", o.Seed, o.Ops)
	g := NewGen(o.Seed, o.Gen)
	var history []string
	check := func(i int) {
		t.Helper()
		if err := CheckTree(dir, ref, Compare{Owners: true, Root: false}); err != nil {
			t.Fatalf("seed %d: after op %d: %v\nlast ops:\n  %s", o.Seed, i, err, strings.Join(history, "\n  "))
		}
	}
	var okCount, failCount [numOpKinds]int
	defer func() {
		var parts []string
		for k := OpKind(0); k < numOpKinds; k++ {
			parts = append(parts, fmt.Sprintf("%v %d/%d", k, okCount[k], okCount[k]+failCount[k]))
		}
		t.Logf("succeeded/attempted: %s", strings.Join(parts, ", "))
	}()
	dirfd := openDir(t, dir)
	reffd := openDir(t, ref)
	for i := 1; i <= o.Ops; i++ {
		op := g.Next()
		want := op.ApplyAt(reffd)
		got := op.ApplyAt(dirfd)
		g.Observe(op, want)
		if want == nil {
			okCount[op.Kind]++
		} else {
			failCount[op.Kind]++
		}
		history = append(history, fmt.Sprintf("%d: %v -> %v", i, op, errText(want)))
		if len(history) > 25 {
			history = history[1:]
		}
		if !sameErr(got, want) {
			t.Fatalf("seed %d: op %d %v: got %v, reference %v\nlast ops:\n  %s", o.Seed, i, op, errText(got), errText(want), strings.Join(history, "\n  "))
		}
		if o.CheckEvery > 0 && i%o.CheckEvery == 0 {
			check(i)
		}
	}
	check(o.Ops)
	if tr, err := Snapshot(ref); err == nil {
		var files, dirs int
		var biggest int64
		for _, n := range tr {
			switch n.Mode & unix.S_IFMT {
			case unix.S_IFREG:
				files++
				biggest = max(biggest, n.Size)
			case unix.S_IFDIR:
				dirs++
			}
		}
		t.Logf("final tree: %d paths, %d files, %d dirs, largest file %d bytes", len(tr), files, dirs, biggest)
	}
}

func sameErr(a, b error) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	var ea, eb syscall.Errno
	if errors.As(a, &ea) && errors.As(b, &eb) {
		return ea == eb
	}
	return a.Error() == b.Error()
}

func errText(err error) string {
	if err == nil {
		return "ok"
	}
	var e syscall.Errno
	if errors.As(err, &e) {
		return unix.ErrnoName(e)
	}
	return err.Error()
}

// openDir opens a directory for *at calls and closes it at cleanup.
func openDir(t testing.TB, dir string) int {
	t.Helper()
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		t.Fatalf("open %s: %v", dir, err)
	}
	closeAtCleanup(t, fd)
	return fd
}
