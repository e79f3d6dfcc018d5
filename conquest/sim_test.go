package conquest

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math/rand"
	"sort"
	"strings"
	"testing"

	"conquest/diskstore"
)

// The model-based simulation: random operations run both on the FS and on
// a plain in-memory model; errors and the whole tree must agree, including
// across reopens.

type mNode struct {
	ino    Ino
	mode   uint32
	data   []byte
	target string
	xattr  map[string]string
	kids   map[string]*mNode // directories
	parent *mNode            // directories
	nlink  int               // non-directories: number of names
	fixed  bool              // set up before the run; no operation picks it or what is in it
}

func (n *mNode) isDir() bool { return n.mode&S_IFMT == S_IFDIR }

type model struct {
	root *mNode
}

func newModel() *model {
	return &model{root: &mNode{ino: RootIno, mode: S_IFDIR | 0o755, kids: map[string]*mNode{}, xattr: map[string]string{}}}
}

func splitPath(p string) (string, string) {
	i := strings.LastIndex(p, "/")
	if i <= 0 {
		return "/", p[i+1:]
	}
	return p[:i], p[i+1:]
}

// lookup resolves a path: ErrNotFound or ErrNotDir as path walk would.
func (m *model) lookup(p string) (*mNode, error) {
	n := m.root
	for _, c := range strings.Split(strings.Trim(p, "/"), "/") {
		if c == "" {
			continue
		}
		if !n.isDir() {
			return nil, ErrNotDir
		}
		k := n.kids[c]
		if k == nil {
			return nil, ErrNotFound
		}
		n = k
	}
	return n, nil
}

func (m *model) dir(p string) (*mNode, error) {
	d, err := m.lookup(p)
	if err == nil && !d.isDir() {
		err = ErrNotDir
	}
	return d, err
}

func (m *model) snapshot() map[string]snapEntry {
	out := map[string]snapEntry{}
	var walk func(d *mNode, prefix string)
	walk = func(d *mNode, prefix string) {
		for name, n := range d.kids {
			e := snapEntry{Ino: n.ino, Mode: n.mode, Uid: user.Uid, Gid: user.Gid}
			var xs []string
			for k, v := range n.xattr {
				xs = append(xs, fmt.Sprintf("%s=%x", k, sha256.Sum256([]byte(v))))
			}
			sort.Strings(xs)
			e.Xattrs = strings.Join(xs, ";")
			switch n.mode & S_IFMT {
			case S_IFDIR:
				e.Nlink = 2
				for _, k := range n.kids {
					if k.isDir() {
						e.Nlink++
					}
				}
				e.Size = BlockSize
			case S_IFREG:
				e.Nlink = uint32(n.nlink)
				e.Size = uint64(len(n.data))
				e.Data = fmt.Sprintf("%x", sha256.Sum256(n.data))
			case S_IFLNK:
				e.Nlink = uint32(n.nlink)
				e.Size = uint64(len(n.target))
				e.Target = n.target
			default:
				e.Nlink = uint32(n.nlink)
			}
			out[prefix+name] = e
			if n.isDir() {
				walk(n, prefix+name+"/")
			}
		}
	}
	walk(m.root, "/")
	return out
}

// isAncestor reports whether a is d or above it.
func (a *mNode) isAncestorOf(d *mNode) bool {
	for ; d != nil; d = d.parent {
		if d == a {
			return true
		}
		if d.parent == d {
			break
		}
	}
	return false
}

type simulator struct {
	stats map[string]int
	t     *testing.T
	r     *rand.Rand
	fs    *FS
	env   *testEnv
	m     *model
	spill uint64 // files spilled to the disk by the FSs before the last reopen
}

func (s *simulator) paths(filter func(*mNode) bool) []string {
	var out []string
	var walk func(d *mNode, prefix string)
	walk = func(d *mNode, prefix string) {
		for name, n := range d.kids {
			if n.fixed {
				continue
			}
			if filter(n) {
				out = append(out, prefix+name)
			}
			if n.isDir() {
				walk(n, prefix+name+"/")
			}
		}
	}
	if filter(s.m.root) {
		out = append(out, "/")
	}
	walk(s.m.root, "/")
	sort.Strings(out)
	return out
}

func (s *simulator) pick(filter func(*mNode) bool) string {
	ps := s.paths(filter)
	if len(ps) == 0 || s.r.Intn(20) == 0 {
		return "/nonexistent/" + s.name()
	}
	return ps[s.r.Intn(len(ps))]
}

func (s *simulator) name() string { return string(rune('a' + s.r.Intn(6))) }

func anyNode(*mNode) bool    { return true }
func dirNode(n *mNode) bool  { return n.isDir() }
func fileNode(n *mNode) bool { return n.mode&S_IFMT == S_IFREG }

func join(dir, name string) string { return strings.TrimSuffix(dir, "/") + "/" + name }

// fsParent resolves the parent directory of p in the FS.
func (s *simulator) fsParent(p string) (Ino, string, error) {
	dir, name := splitPath(p)
	d, err := resolve(s.fs, dir)
	return d, name, err
}

func (s *simulator) agree(op string, fsErr, modelErr error) bool {
	s.t.Helper()
	if (fsErr == nil) != (modelErr == nil) || fsErr != nil && !errors.Is(fsErr, modelErr) {
		s.t.Fatalf("%s: FS says %v, model says %v", op, fsErr, modelErr)
	}
	if s.stats != nil {
		k := strings.Fields(op)[0]
		if modelErr != nil {
			k += ":" + strings.TrimPrefix(modelErr.Error(), "conquest: ")
		}
		s.stats[k]++
	}
	return modelErr == nil
}

func (s *simulator) step(i int) {
	r, m, fs := s.r, s.m, s.fs
	switch k := r.Intn(14); k {
	case 0, 1: // create
		dir := s.pick(dirNode)
		if r.Intn(10) == 0 {
			dir = s.pick(fileNode)
		}
		name := s.name()
		p := join(dir, name)
		var fsErr error
		var at Attr
		d, _, err := s.fsParent(p)
		if fsErr = err; err == nil {
			var h Handle
			at, h, fsErr = fs.Create(d, name, 0o644, O_CREAT|O_EXCL|O_RDWR, user)
			if fsErr == nil {
				fs.Release(at.Ino, h)
				fs.Forget(at.Ino, 1)
			}
		}
		md, mErr := m.dir(dir)
		if mErr == nil && md.kids[name] != nil {
			mErr = ErrExists
		}
		if s.agree("create "+p, fsErr, mErr) {
			md.kids[name] = &mNode{ino: at.Ino, mode: S_IFREG | 0o644, nlink: 1, xattr: map[string]string{}}
		}
	case 2: // mkdir
		dir, name := s.pick(dirNode), s.name()
		p := join(dir, name)
		var at Attr
		d, _, fsErr := s.fsParent(p)
		if fsErr == nil {
			if at, fsErr = fs.Mkdir(d, name, 0o755, user); fsErr == nil {
				fs.Forget(at.Ino, 1)
			}
		}
		md, mErr := m.dir(dir)
		if mErr == nil && md.kids[name] != nil {
			mErr = ErrExists
		}
		if s.agree("mkdir "+p, fsErr, mErr) {
			md.kids[name] = &mNode{ino: at.Ino, mode: S_IFDIR | 0o755, kids: map[string]*mNode{}, parent: md, xattr: map[string]string{}}
		}
	case 3: // unlink
		p := s.pick(anyNode)
		if p == "/" {
			return
		}
		d, name, fsErr := s.fsParent(p)
		if fsErr == nil {
			fsErr = fs.Unlink(d, name)
		}
		dir, _ := splitPath(p)
		md, mErr := m.dir(dir)
		var n *mNode
		if mErr == nil {
			if n = md.kids[name]; n == nil {
				mErr = ErrNotFound
			} else if n.isDir() {
				mErr = ErrIsDir
			}
		}
		if s.agree("unlink "+p, fsErr, mErr) {
			delete(md.kids, name)
			n.nlink--
		}
	case 4: // rmdir
		p := s.pick(anyNode)
		if p == "/" {
			return
		}
		d, name, fsErr := s.fsParent(p)
		if fsErr == nil {
			fsErr = fs.Rmdir(d, name)
		}
		dir, _ := splitPath(p)
		md, mErr := m.dir(dir)
		if mErr == nil {
			n := md.kids[name]
			switch {
			case n == nil:
				mErr = ErrNotFound
			case !n.isDir():
				mErr = ErrNotDir
			case len(n.kids) > 0:
				mErr = ErrNotEmpty
			}
		}
		if s.agree("rmdir "+p, fsErr, mErr) {
			delete(md.kids, name)
		}
	case 5, 6: // rename
		from := s.pick(anyNode)
		to := join(s.pick(dirNode), s.name())
		if r.Intn(2) == 0 {
			to = s.pick(anyNode)
		}
		if from == "/" || to == "/" {
			return
		}
		flags := []uint32{0, 0, RenameNoReplace, RenameExchange}[r.Intn(4)]
		od, on, fsErr := s.fsParent(from)
		var nd Ino
		var nn string
		if fsErr == nil {
			nd, nn, fsErr = s.fsParent(to)
		}
		if fsErr == nil {
			fsErr = fs.Rename(od, on, nd, nn, flags)
		}
		mErr := s.modelRename(from, to, flags)
		s.agree(sprintf("rename %s %s %d", from, to, flags), fsErr, mErr)
	case 7: // link
		src, dir, name := s.pick(anyNode), s.pick(dirNode), s.name()
		if src == "/" {
			return
		}
		var at Attr
		ino, fsErr := resolve(fs, src)
		var d Ino
		if fsErr == nil {
			d, fsErr = resolve(fs, dir)
		}
		if fsErr == nil {
			if at, fsErr = fs.Link(ino, d, name); fsErr == nil {
				fs.Forget(at.Ino, 1)
			}
		}
		n, mErr := m.lookup(src)
		var md *mNode
		if mErr == nil {
			md, mErr = m.dir(dir)
		}
		if mErr == nil {
			switch {
			case md.kids[name] != nil:
				mErr = ErrExists
			case n.isDir():
				mErr = ErrPerm
			}
		}
		if s.agree("link "+src+" "+join(dir, name), fsErr, mErr) {
			md.kids[name] = n
			n.nlink++
		}
	case 8, 9: // write
		p := s.pick(fileNode)
		off := []int{0, 10, 2000, 2048, 4096, 5000, 70000}[r.Intn(7)]
		data := pattern([]int{1, 100, 2000, 4096, 9000}[r.Intn(5)], byte(i))
		ino, fsErr := resolve(fs, p)
		if fsErr == nil {
			var n int
			n, fsErr = fs.Write(ino, 0, int64(off), data, false)
			if fsErr == nil && n != len(data) {
				s.t.Fatalf("short write %d", n)
			}
		}
		n, mErr := m.lookup(p)
		if mErr == nil && n.isDir() {
			mErr = ErrIsDir
		}
		if s.agree("write "+p, fsErr, mErr) {
			if off+len(data) > len(n.data) {
				n.data = append(n.data, make([]byte, off+len(data)-len(n.data))...)
			}
			copy(n.data[off:], data)
		}
	case 10: // truncate
		p := s.pick(fileNode)
		size := []int{0, 1, 2048, 4097, 10000, 100000}[r.Intn(6)]
		ino, fsErr := resolve(fs, p)
		if fsErr == nil {
			_, fsErr = fs.SetAttr(ino, SetAttr{Valid: SetSize, Size: uint64(size)}, user)
		}
		n, mErr := m.lookup(p)
		if mErr == nil && n.isDir() {
			mErr = ErrIsDir
		}
		if s.agree("truncate "+p, fsErr, mErr) {
			if size > len(n.data) {
				n.data = append(n.data, make([]byte, size-len(n.data))...)
			}
			n.data = n.data[:size]
		}
	case 11: // xattr
		p, name := s.pick(anyNode), "user."+s.name()
		val := string(pattern(r.Intn(200), byte(i)))
		flags := []uint32{0, XattrCreate, XattrReplace}[r.Intn(3)]
		del := r.Intn(3) == 0
		ino, fsErr := resolve(fs, p)
		if fsErr == nil {
			if del {
				fsErr = fs.RemoveXattr(ino, name)
			} else {
				fsErr = fs.SetXattr(ino, name, []byte(val), flags)
			}
		}
		n, mErr := m.lookup(p)
		if mErr == nil {
			_, has := n.xattr[name]
			switch {
			case !n.isDir() && n.mode&S_IFMT != S_IFREG:
				mErr = ErrPerm
			case del && !has:
				mErr = ErrNoData
			case !del && has && flags == XattrCreate:
				mErr = ErrExists
			case !del && !has && flags == XattrReplace:
				mErr = ErrNoData
			}
		}
		if s.agree("xattr "+p, fsErr, mErr) {
			if del {
				delete(n.xattr, name)
			} else {
				n.xattr[name] = val
			}
		}
	case 12: // symlink
		dir, name := s.pick(dirNode), s.name()
		target := strings.Repeat("t", 1+r.Intn(100))
		var at Attr
		d, fsErr := resolve(fs, dir)
		if fsErr == nil {
			if at, fsErr = fs.Symlink(d, name, target, user); fsErr == nil {
				fs.Forget(at.Ino, 1)
			}
		}
		md, mErr := m.dir(dir)
		if mErr == nil && md.kids[name] != nil {
			mErr = ErrExists
		}
		if s.agree("symlink "+join(dir, name), fsErr, mErr) {
			md.kids[name] = &mNode{ino: at.Ino, mode: S_IFLNK | 0o777, target: target, nlink: 1, xattr: map[string]string{}}
		}
	case 13:
		if r.Intn(4) == 0 {
			s.spill += s.fs.spills
			s.fs = s.env.reopen(s.fs)
		}
	}
}

// modelRename applies rename(2) semantics to the model.
func (s *simulator) modelRename(from, to string, flags uint32) error {
	m := s.m
	fd, fn := splitPath(from)
	td, tn := splitPath(to)
	od, err := m.dir(fd)
	if err != nil {
		return err
	}
	nd, err := m.dir(td)
	if err != nil {
		return err
	}
	src := od.kids[fn]
	if src == nil {
		return ErrNotFound
	}
	dst := nd.kids[tn]
	switch {
	case dst != nil && flags&RenameNoReplace != 0:
		return ErrExists
	case dst == nil && flags&RenameExchange != 0:
		return ErrNotFound
	case dst == src:
		return nil
	}
	if flags&RenameExchange != 0 {
		if od != nd && (src.isDir() && src.isAncestorOf(nd) || dst.isDir() && dst.isAncestorOf(od)) {
			return ErrInvalid
		}
		od.kids[fn], nd.kids[tn] = dst, src
		if src.isDir() {
			src.parent = nd
		}
		if dst.isDir() {
			dst.parent = od
		}
		return nil
	}
	if src.isDir() {
		if dst != nil && !dst.isDir() {
			return ErrNotDir
		}
		if dst != nil && len(dst.kids) > 0 {
			return ErrNotEmpty
		}
		if od != nd && src.isAncestorOf(nd) {
			return ErrInvalid
		}
	} else if dst != nil && dst.isDir() {
		return ErrIsDir
	}
	if dst != nil && !dst.isDir() {
		dst.nlink--
	}
	delete(od.kids, fn)
	nd.kids[tn] = src
	if src.isDir() {
		src.parent = nd
	}
	return nil
}

func TestSimulation(t *testing.T) { runSimulation(t, fsOpt{}, 3000) }

// TestSimulationDisk runs the simulation with a large-file disk and a 16
// KiB threshold, so files cross it both ways (writes up to 79 KB, truncates
// from 100 KB down to 0), syncing the disk every 256 KiB written.
func TestSimulationDisk(t *testing.T) {
	runSimulation(t, fsOpt{disk: true, threshold: 16 << 10, diskSize: 16 << 20,
		diskOpts: diskstore.Options{MaxExtent: 64 << 10, SyncBytes: 256 << 10}}, 1500)
}

// TestSimulationDiskGather: the same with writes gathered in memory.
func TestSimulationDiskGather(t *testing.T) {
	runSimulation(t, fsOpt{disk: true, threshold: 16 << 10, diskSize: 16 << 20,
		diskOpts: diskstore.Options{Durability: diskstore.GatherInMemory, FileBuffer: 24 << 10, TotalBuffer: 64 << 10, MaxExtent: 64 << 10}}, 1500)
}

// TestSimulationSpill: the same in a 3 MiB arena, which the simulation's
// files fill, so that files below the threshold spill to the disk
// (spill.go) and come back when truncated with room again.
func TestSimulationSpill(t *testing.T) {
	n := runSimulation(t, fsOpt{size: 4 << 20, disk: true, threshold: 16 << 10, diskSize: 16 << 20,
		diskOpts: diskstore.Options{MaxExtent: 64 << 10, SyncBytes: 256 << 10}}, 1500, ballast)
	t.Logf("%d spills", n)
	if n == 0 {
		t.Error("no file spilled to the disk")
	}
}

// ballast fills the arena down to 32 KiB above its spill reserve with
// 12 KiB files in /ballast, which the model holds too but no operation
// picks.
func ballast(s *simulator) {
	t, fs := s.t, s.fs
	at, err := fs.Mkdir(RootIno, "ballast", 0o755, user)
	must(t, err)
	fs.Forget(at.Ino, 1)
	d := &mNode{ino: at.Ino, mode: S_IFDIR | 0o755, kids: map[string]*mNode{}, parent: s.m.root, xattr: map[string]string{}, fixed: true}
	s.m.root.kids["ballast"] = d
	for i := 0; ; i++ {
		var low bool
		_ = fs.read(func() error { st := fs.h.Stats(); low = st.AvailBytes < fs.spillReserve(st)+32<<10; return nil })
		if low {
			return
		}
		name, data := sprintf("b%d", i), pattern(12<<10, byte(i))
		f, h, err := fs.Create(d.ino, name, 0o644, O_CREAT|O_EXCL|O_RDWR, user)
		must(t, err)
		_, err = fs.Write(f.Ino, h, 0, data, false)
		must(t, err)
		fs.Release(f.Ino, h)
		fs.Forget(f.Ino, 1)
		d.kids[name] = &mNode{ino: f.Ino, mode: S_IFREG | 0o644, nlink: 1, data: data, xattr: map[string]string{}}
	}
}

// runSimulation runs steps random operations against a new FS and the
// model (after prepare, if given), comparing them every 25 steps, and
// returns how many files spilled to the disk (spill.go).
func runSimulation(t *testing.T, o fsOpt, steps int, prepare ...func(*simulator)) (spills uint64) {
	seed := int64(rand.Uint32())
	t.Logf("seed %d", seed)
	fs, env := newTestFSOpt(t, o)
	s := &simulator{stats: map[string]int{}, t: t, r: rand.New(rand.NewSource(seed)), fs: fs, env: env, m: newModel()}
	if testing.Short() {
		steps = 500
	}
	for _, f := range prepare {
		f(s)
	}
	large := uint64(0) // large files seen at the checkpoints
	for i := 0; i < steps; i++ {
		s.step(i)
		if i%25 == 0 || i == steps-1 {
			got, want := snapshot(t, s.fs), s.m.snapshot()
			for p, e := range got {
				e.Blocks = 0
				got[p] = e
			}
			if !equalSnap(got, want) {
				t.Fatalf("step %d: FS and model differ:\n%s", i, diffSnap(want, got))
			}
			if errs := s.fs.Check(); len(errs) > 0 {
				t.Fatalf("step %d: Check: %v", i, errs)
			}
			large += s.fs.Usage().LargeFiles
		}
	}
	if o.disk && large == 0 {
		t.Error("no file ever moved to disk")
	}
	var keys []string
	for k, v := range s.stats {
		keys = append(keys, sprintf("%s=%d", k, v))
	}
	sort.Strings(keys)
	t.Logf("outcomes: %s", strings.Join(keys, " "))
	return s.spill + s.fs.spills
}
