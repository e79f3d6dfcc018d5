package posixtest

import (
	"errors"
	"fmt"
	"strings"
	"sync"

	"golang.org/x/sys/unix"
)

// Workload runs random operations (from Gen) on a directory from several
// goroutines, each confined to its own subdirectory w<i>, and mirrors every
// operation on a shadow directory (a tmpfs or any other file system) right
// after it completes. If the file system under test dies (its daemon is
// killed), each worker stops with at most one operation in flight: started
// on the file system, outcome unknown. After a remount, Verify checks every
// worker's subtree against the shadow, accepting for the in-flight operation
// either the state before or after it, and nothing else.
type Workload struct {
	Dir, Shadow string
	dirfd       int // Dir, opened once: see Op.ApplyAt
	shadowfd    int
	workers     []*worker
}

type worker struct {
	prefix   string
	gen      *Gen
	inflight *Op // started on Dir, outcome unknown (Dir died)
	ops      int
	dead     bool
	mismatch error // Dir and Shadow disagreed while Dir was alive
}

// NewWorkload creates the worker directories on dir and shadow. o is the
// generator configuration; its Prefix is replaced per worker, and
// PageWrites is forced on so that every operation is one FUSE request and
// thus done or not done after a crash.
func NewWorkload(dir, shadow string, workers int, seed int64, o GenOptions) (*Workload, error) {
	w := &Workload{Dir: dir, Shadow: shadow, dirfd: -1, shadowfd: -1}
	var err error
	if w.shadowfd, err = unix.Open(shadow, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		return nil, fmt.Errorf("workload: %w", err)
	}
	if w.dirfd, err = unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
		w.Close()
		return nil, fmt.Errorf("workload: %w", err)
	}
	for i := 0; i < workers; i++ {
		prefix := fmt.Sprintf("w%d", i)
		for _, root := range []string{dir, shadow} {
			if err := unix.Mkdir(root+"/"+prefix, 0755); err != nil {
				w.Close()
				return nil, fmt.Errorf("workload: mkdir %s/%s: %w", root, prefix, err)
			}
		}
		g := o
		g.Prefix = prefix
		g.PageWrites = true
		w.workers = append(w.workers, &worker{prefix: prefix, gen: NewGen(seed+int64(i)*7919, g)})
	}
	return w, nil
}

// Close closes the workload's directory descriptors (a descriptor left
// open on a mount keeps it busy). Verify opens them again.
func (w *Workload) Close() {
	for _, fd := range []*int{&w.dirfd, &w.shadowfd} {
		if *fd >= 0 {
			unix.Close(*fd)
			*fd = -1
		}
	}
}

// connectionLost reports whether err means the FUSE daemon is gone.
func connectionLost(err error) bool {
	return errors.Is(err, unix.ENOTCONN) || errors.Is(err, unix.ECONNABORTED) || errors.Is(err, unix.ENODEV)
}

// Run runs up to ops operations per worker, all workers in parallel, and
// returns when every worker has finished, hit stop, or seen the file
// system die. It returns the number of operations completed.
func (w *Workload) Run(ops int, stop <-chan struct{}) int {
	var wg sync.WaitGroup
	for _, wk := range w.workers {
		if wk.dead || wk.mismatch != nil {
			continue
		}
		wg.Add(1)
		go func(wk *worker) {
			defer wg.Done()
			for i := 0; i < ops; i++ {
				select {
				case <-stop:
					return
				default:
				}
				op := wk.gen.Next()
				wk.inflight = &op
				got := op.ApplyAt(w.dirfd)
				if connectionLost(got) || (errors.Is(got, unix.EIO) && w.dirDead()) {
					wk.dead = true
					return
				}
				want := op.ApplyAt(w.shadowfd)
				wk.inflight = nil
				wk.gen.Observe(op, want)
				wk.ops++
				if !sameErr(got, want) {
					wk.mismatch = fmt.Errorf("%s: op %d %v: got %v, shadow %v", wk.prefix, wk.ops, op, errText(got), errText(want))
					return
				}
			}
		}(wk)
	}
	wg.Wait()
	n := 0
	for _, wk := range w.workers {
		n += wk.ops
	}
	return n
}

func (w *Workload) dirDead() bool {
	var st unix.Stat_t
	return connectionLost(unix.Fstat(w.dirfd, &st))
}

// Err returns the first disagreement between the file system and the
// shadow seen while the file system was alive.
func (w *Workload) Err() error {
	for _, wk := range w.workers {
		if wk.mismatch != nil {
			return wk.mismatch
		}
	}
	return nil
}

// InFlight returns the operations whose outcome is unknown.
func (w *Workload) InFlight() []string {
	var out []string
	for _, wk := range w.workers {
		if wk.inflight != nil {
			out = append(out, wk.prefix+": "+wk.inflight.String())
		}
	}
	return out
}

// Verify compares dir (normally the remounted file system, which may be at
// another path than Dir) with the shadow, worker by worker. A worker with an
// operation in flight may match the state before it or after it; in the
// latter case the shadow is advanced so a later Verify agrees. Afterwards
// the workload can Run again on dir.
func (w *Workload) Verify(dir string) error {
	fd, err := unix.Open(dir, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0)
	if err != nil {
		return fmt.Errorf("workload: %w", err)
	}
	if w.dirfd >= 0 {
		unix.Close(w.dirfd)
	}
	w.Dir, w.dirfd = dir, fd
	if w.shadowfd < 0 {
		if w.shadowfd, err = unix.Open(w.Shadow, unix.O_RDONLY|unix.O_DIRECTORY|unix.O_CLOEXEC, 0); err != nil {
			return fmt.Errorf("workload: %w", err)
		}
	}
	var errs []string
	for _, wk := range w.workers {
		got := dir + "/" + wk.prefix
		want := w.Shadow + "/" + wk.prefix
		err := CheckTree(got, want, Compare{Owners: true})
		if err == nil {
			wk.inflight = nil
			wk.dead = false
			continue
		}
		if wk.inflight == nil {
			errs = append(errs, fmt.Sprintf("%s (no operation in flight): %v", wk.prefix, err))
			continue
		}
		// Try the state after the in-flight operation.
		op := *wk.inflight
		res := op.ApplyAt(w.shadowfd)
		wk.gen.Observe(op, res)
		if err2 := CheckTree(got, want, Compare{Owners: true}); err2 != nil {
			errs = append(errs, fmt.Sprintf("%s: matches neither the state before nor after in-flight %v\n before: %v\n after: %v", wk.prefix, op, err, err2))
			continue
		}
		wk.inflight = nil
		wk.dead = false
	}
	if len(errs) > 0 {
		return errors.New(strings.Join(errs, "\n"))
	}
	return nil
}
