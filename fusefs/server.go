package fusefs

import (
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"

	"conquest/conquest"
	"conquest/pram"
)

// Server is one mounted Conquest file system and its serve loop.
//
// Lock order: Server.mu is a leaf; it is never held across a core call or a
// device read or write.
type Server struct {
	fs   *conquest.FS
	conn *fuse.Conn
	dir  string
	opt  Options
	raw  *rawWriter // nil when the device fd could not be found (see reply.go)
	// connID names the connection in fusectl (/sys/fs/fuse/connections),
	// for Abort; "" when the mount could not be found.
	connID atomic.Pointer[string] // set once, while the loop may already run: use connNumber

	readMu  sync.Mutex // held across ReadRequest and frees.register (reader)
	mu      sync.Mutex // protects readers, idle, blocked
	readers int        // reader goroutines running
	idle    int        // readers waiting in ReadRequest (or for readMu)
	blocked int        // calls in dropPages or waiting for a dropLock (each lets one more reader run)
	wg      sync.WaitGroup

	done         chan struct{} // closed when the loop has ended and the device is closed (finish)
	doneOnce     sync.Once
	endOnce      sync.Once // connEnded's timer
	errMu        sync.Mutex
	err          error // first fatal error of the loop
	unmapped     atomic.Int32
	pollTid      atomic.Uint32 // thread priming POLL (poll.go), 0 when none
	frees        frees         // RELEASEs and FORGETs being served (STATFS waits for them)
	capRemoved   sync.Map      // conquest.Ino → capRemoval (killpriv.go)
	statfsWaits  atomic.Uint64 // STATFS requests that waited in awaitFrees
	directDrops  atomic.Uint64 // ranges dropped after direct writes (dropRaced)
	lateDrops    atomic.Uint64 // of those, replies that did not wait for the drop's end (dropWait)
	dropsWaiting atomic.Int64  // replies waiting in dropRaced (congestedDrops)
	bgSlots      atomic.Int64  // the connection's background slots, as last read (congestedDrops)
	bgReadAt     atomic.Int64  // when they were read (ns since monoStart; 0: never)
	syncWrites   atomic.Uint64 // direct O_SYNC/O_DSYNC writes synced (syncDirect)
	stats        counters
	dropMu       [64]sync.Mutex // dropLock's stripes (file.go)
	listed       listedDirs     // directories whose listing the kernel may cache (dircache.go)
	waiting      atomic.Int64   // requests in service that a caller waits for (callerWaits)
	busy         atomic.Int64   // requests read while BusyCallers were waiting (Options.OnBusy)
}

// Mount mounts fsys on the directory dir and starts serving it. When Mount
// returns, the kernel has finished the FUSE handshake, requests are being
// served, and the kernel has learned that POLL is not implemented (poll.go:
// this makes it safe to open files on the mount with the os package from
// the serving process itself). The caller must eventually unmount
// (Server.Unmount, or `conquest umount`) and then call Wait, which returns once the loop has ended; only
// then may fsys be closed.
func Mount(fsys *conquest.FS, dir string, o Options) (*Server, error) {
	o = o.withDefaults()
	if o.WritebackCache {
		// The kernel stamps written files' times from this clock.
		fsys.UseCoarseClock()
	}
	c, err := fuse.Mount(dir, o.mountOptions()...)
	if err != nil && os.Geteuid() == 0 && !(o.NoSUID && o.NoDev) {
		// Where suid or dev is refused even to root (the root of a user
		// namespace), the mount is still made, without them.
		safe := o
		safe.NoSUID, safe.NoDev = true, true
		if c2, err2 := fuse.Mount(dir, safe.mountOptions()...); err2 == nil {
			o.Logf("fusefs: mounting with suid and dev failed (%v); mounted nosuid,nodev", err)
			c, err, o = c2, nil, safe
		}
	}
	if err != nil {
		var nx *fuse.MountpointDoesNotExistError
		if errors.As(err, &nx) {
			return nil, fmt.Errorf("mounting on %s: mount point does not exist", dir)
		}
		if why := whyNoFUSE(); why != "" {
			return nil, fmt.Errorf("mounting on %s: %w (%s)", dir, err, why)
		}
		return nil, fmt.Errorf("mounting on %s: %w", dir, err)
	}
	s := &Server{fs: fsys, conn: c, dir: dir, opt: o, done: make(chan struct{})}
	if !o.bazilReplies {
		s.raw = newRawWriter(c)
	}
	if s.raw == nil {
		o.Logf("fusefs: cannot reach the FUSE device directly; the sticky bit (S_ISVTX) will not be reported to the kernel")
	}
	s.mu.Lock()
	s.readers = o.Readers
	s.wg.Add(o.Readers)
	s.mu.Unlock()
	for range o.Readers {
		go s.reader()
	}
	// A file the disk commit moves to the disk changes st_blocks, which
	// the kernel caches with the attributes.
	fsys.SetMovedHook(s.invalidateAttr)
	go func() {
		s.wg.Wait()
		fsys.SetMovedHook(nil)
		if err := s.conn.Close(); err != nil {
			s.fail(fmt.Errorf("closing FUSE device: %w", err))
		}
		s.finish()
	}()
	if mi, ok := Mounted(dir); ok && mi.Source == o.FSName {
		// The device number of a FUSE mount is 0:N, N the connection's
		// number in fusectl. Only of this mount: another made on the
		// same directory meanwhile (its source names another arena)
		// must never be aborted for this one (Abort, ControlFiles).
		if _, n, found := strings.Cut(mi.Device, ":"); found {
			s.connID.Store(&n)
		}
	}
	if o.NoExec || (o.NoAtime && os.Geteuid() == 0) {
		var add uintptr
		if o.NoExec {
			add |= unix.MS_NOEXEC
		}
		if o.NoAtime {
			add |= unix.MS_NOATIME
		}
		if err := setMountFlags(dir, add, 0, true); err != nil {
			if uerr := s.Unmount(); uerr == nil {
				s.Wait()
			}
			if o.NoExec {
				return nil, fmt.Errorf("mounting on %s noexec (it needs root): %w", dir, err)
			}
			return nil, fmt.Errorf("mounting on %s noatime: %w", dir, err)
		}
	}
	if o.ReadaheadKB > 0 {
		// Now that requests are served (finding the mount looks the mount
		// point up) and before Mount returns: an open file keeps the
		// read-ahead it was opened with.
		if err := setReadaheadKB(dir, o.ReadaheadKB); err != nil && !errors.Is(err, fs.ErrPermission) {
			o.Logf("fusefs: setting the read-ahead to %d KiB: %v", o.ReadaheadKB, err)
		}
	}
	if !primePollOnMount {
		return s, nil
	}
	if err := s.primePoll(); err != nil {
		// Only a process that serves and opens files on the same mount
		// is at risk (see poll.go); the mount itself works.
		o.Logf("fusefs: %v; the kernel may still send POLL", err)
	}
	return s, nil
}

// Serve mounts fsys on dir and serves it until it is unmounted.
func Serve(fsys *conquest.FS, dir string, o Options) error {
	s, err := Mount(fsys, dir, o)
	if err != nil {
		return err
	}
	return s.Wait()
}

// Dir is the mount point.
func (s *Server) Dir() string { return s.dir }

// Done is closed when the serve loop has ended (the file system was
// unmounted) and the FUSE device is closed.
func (s *Server) Done() <-chan struct{} { return s.done }

// Wait blocks until the serve loop ends and returns its fatal error, if any.
// A normal unmount is not an error.
func (s *Server) Wait() error {
	<-s.done
	s.errMu.Lock()
	defer s.errMu.Unlock()
	return s.err
}

// Unmount detaches the file system; if it is busy (files open), it detaches
// it lazily, and the loop ends when the last file is closed.
func (s *Server) Unmount() error {
	_, err := s.UnmountOrDetach()
	return err
}

// UnmountOrDetach is Unmount, and reports whether the mount was busy and
// so only detached: its loop then ends when the last file open there is
// closed (or at Abort).
func (s *Server) UnmountOrDetach() (detached bool, err error) {
	err = Unmount(s.dir, false)
	if err != nil {
		if lazyErr := Unmount(s.dir, true); lazyErr == nil {
			return true, nil
		}
	}
	return false, err
}

// fusectlDir is where the kernel's fusectl file system lists connections
// (a variable for tests).
var fusectlDir = "/sys/fs/fuse/connections"

// fusectlMagic is fusectl's f_type in statfs(2).
const fusectlMagic = 0x65735543

// Abort ends serving now, through fusectl's abort: what Unmount left
// attached (files still open on a lazily detached mount) fails from then on
// with ENOTCONN, and the serve loop ends, after which Wait returns and the
// file system may be closed cleanly. Every request answered before stays
// committed. Only root may abort.
func (s *Server) Abort() error {
	if s.connNumber() == "" {
		return errors.New("aborting the FUSE connection: its number is unknown")
	}
	return abortConn(s.connNumber())
}

// MountControlFiles opens the fusectl files of the connection of the FUSE
// mount mi, found by its device number 0:N (N is the connection's number
// in fusectl), as ControlFiles does for a Server's own: for a mount whose
// daemon is gone while its connection is held open. The caller must have
// just read mi from the mount table (Mounted) and should read it again
// once the files are open: a number is reused once its connection has
// ended, and the open files name one connection only.
func MountControlFiles(mi MountInfo) (abort, waiting *os.File, err error) {
	major, n, ok := strings.Cut(mi.Device, ":")
	if !ok || major != "0" || n == "" || strings.Trim(n, "0123456789") != "" || !strings.HasPrefix(mi.FSType, "fuse") {
		return nil, nil, fmt.Errorf("%s: not a FUSE mount (%s, device %s)", mi.Dir, mi.FSType, mi.Device)
	}
	return controlFiles(n)
}

// abortConn writes to the abort file of fusectl's connection id.
func abortConn(id string) error {
	p := fusectlDir + "/" + id + "/abort"
	err := os.WriteFile(p, []byte("1\n"), 0)
	if errors.Is(err, fs.ErrNotExist) && mountFusectl() {
		// fusectl was not mounted (a container, or unmounted by hand).
		err = os.WriteFile(p, []byte("1\n"), 0)
	}
	if errors.Is(err, fs.ErrNotExist) && fusectlMounted() {
		return nil // the connection has ended already (a second abort)
	}
	if err != nil {
		return fmt.Errorf("aborting the FUSE connection: %w", err)
	}
	return nil
}

// ControlFiles opens the connection's fusectl files "abort" (for writing)
// and "waiting" (for reading), for a watchdog outside the serving process
// (`conquest mount` starts one). They name this connection for as long as
// they are open: once it has ended, a write to abort does nothing and a
// read of waiting returns no bytes, even if a later mount takes the same
// connection number. Only root may open them.
func (s *Server) ControlFiles() (abort, waiting *os.File, err error) {
	if s.connNumber() == "" {
		return nil, nil, errors.New("opening the FUSE connection's control files: its number is unknown")
	}
	return controlFiles(s.connNumber())
}

// controlFiles opens the abort and waiting files of fusectl's connection
// id.
func controlFiles(id string) (abort, waiting *os.File, err error) {
	dir := fusectlDir + "/" + id
	abort, err = os.OpenFile(dir+"/abort", os.O_WRONLY, 0)
	if errors.Is(err, fs.ErrNotExist) && mountFusectl() {
		abort, err = os.OpenFile(dir+"/abort", os.O_WRONLY, 0)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("opening the FUSE connection's control files: %w", err)
	}
	if waiting, err = os.Open(dir + "/waiting"); err != nil {
		abort.Close()
		return nil, nil, fmt.Errorf("opening the FUSE connection's control files: %w", err)
	}
	return abort, waiting, nil
}

// OnFusectl reports whether descriptor fd is a file of fusectl (such as
// one of ControlFiles', handed to another process).
func OnFusectl(fd int) bool {
	var st unix.Statfs_t
	return unix.Fstatfs(fd, &st) == nil && st.Type == fusectlMagic
}

// fusectlMounted reports whether fusectl is mounted on fusectlDir.
func fusectlMounted() bool {
	var st unix.Statfs_t
	return unix.Statfs(fusectlDir, &st) == nil && st.Type == fusectlMagic
}

// mountFusectl mounts fusectl on fusectlDir unless it is there already,
// and reports whether it mounted it.
func mountFusectl() bool {
	var st unix.Statfs_t
	if err := unix.Statfs(fusectlDir, &st); err != nil || st.Type == fusectlMagic {
		return false
	}
	return unix.Mount("fusectl", fusectlDir, "fusectl", 0, "") == nil
}

// Features reports the FUSE features the kernel agreed to.
func (s *Server) Features() fuse.InitFlags { return s.conn.Features() }

// Busy returns how many requests were read while BusyCallers requests
// that callers wait for, themselves included, were in service
// (Options.OnBusy).
func (s *Server) Busy() int64 { return s.busy.Load() }

func (s *Server) fail(err error) {
	s.errMu.Lock()
	if s.err == nil {
		s.err = err
	}
	s.errMu.Unlock()
	s.opt.Logf("fusefs: %v", err)
}

// reader is one serve-loop goroutine: read a request, serve it, repeat.
// ReadRequest may be called concurrently; the kernel hands each request to
// exactly one reader.
func (s *Server) reader() {
	defer s.wg.Done()
	// A fault on the arena's mapping becomes a panic that serve recovers
	// (conquest/lost.go), not the end of the daemon.
	pram.GuardFaults()
	for {
		s.mu.Lock()
		if s.idle >= s.opt.Readers {
			// Enough readers are already waiting: retire this extra one.
			s.readers--
			s.mu.Unlock()
			return
		}
		s.idle++
		s.mu.Unlock()

		// readMu: a request that may free an inode is registered before
		// the next request is read (frees.go), so one read after it
		// (STATFS, an OPEN) finds it.
		s.readMu.Lock()
		req, err := s.conn.ReadRequest()
		var ticket uint64
		if err == nil {
			if h := testHookRead.Load(); h != nil {
				(*h)(req)
			}
			ticket = s.frees.register(req)
		}
		s.readMu.Unlock()

		s.mu.Lock()
		s.idle--
		if err == nil && s.idle == 0 && s.readers < s.opt.MaxReaders+s.blocked {
			// Every reader is now busy: keep one waiting, so a slow
			// operation cannot starve FORGET, INTERRUPT or the rest.
			s.readers++
			s.wg.Add(1)
			go s.reader()
		}
		s.mu.Unlock()

		if err != nil {
			var errno syscall.Errno
			switch {
			case err == io.EOF:
				// Unmounted: the kernel closed the connection.
				s.retire()
				s.connEnded()
				return
			case errors.As(err, &errno) && (errno == syscall.EINTR || errno == syscall.EAGAIN):
				continue
			case errors.As(err, &errno) && errno == syscall.ECONNABORTED:
				// The connection was torn down: most often the last close
				// of a lazily unmounted file system racing with a read
				// here, or an abort through fusectl. Either way nothing is
				// left to serve, and every request answered so far was
				// committed: an end, not a failure of the daemon.
				s.opt.Logf("fusefs: connection aborted by the kernel; serving ends")
				s.retire()
				s.connEnded()
				return
			case errors.As(err, &errno):
				s.fail(fmt.Errorf("reading FUSE device: %w", err))
				if s.retireStranding() {
					// The last reader, or none left waiting while a drop
					// waits for a READ that only a reader could read: with
					// the device failing, nothing would read it, and the
					// loop's end would wait for that drop. Ending the
					// connection ends both.
					if err := s.Abort(); err != nil {
						s.opt.Logf("fusefs: %v", err)
					}
				}
				return
			default:
				// A malformed message: bazil already dropped it.
				s.opt.Logf("fusefs: %v", err)
				continue
			}
		}
		waited := callerWaits(req)
		if waited && s.waiting.Add(1) >= BusyCallers {
			s.busy.Add(1)
			if f := s.opt.OnBusy; f != nil {
				f()
			}
		}
		s.serve(req, ticket)
		if waited {
			s.waiting.Add(-1)
		}
	}
}

// dropPages drops the kernel's cached pages of node in [off, off+n) (n 0:
// to the end) with its attributes, as conn.InvalidateNode does, and makes
// sure that a reader waits for requests meanwhile. The kernel locks each
// page to drop it, and a page stays locked while a READ (or READDIR,
// READLINK) of it waits for its answer: with every reader busy, and as many
// as MaxReaders of them waiting in a drop like this one or behind it (the
// opens of a file whose atime is due, each dropping its pages under the
// file's dropLock), that READ was never read, and the mount hung. So a
// reader is started now if none is waiting, and each call in here, or
// waiting for a dropLock (lockDrop), lets the reader loop run one reader
// more than MaxReaders: there is always one for the next request, and
// still a bound.
func (s *Server) dropPages(node conquest.Ino, off, n int64) error {
	defer s.unblock(s.block())
	err := s.conn.InvalidateNode(fuse.NodeID(node), off, n)
	if err == fuse.ErrNotCached {
		return nil
	}
	return err
}

// block counts a call that may wait for another request's answer (see
// dropPages) and starts a reader if none is waiting and the bound allows
// (MaxReaders, plus one for each such call: this one's makes room for it);
// unblock undoes it. Not once the last reader has retired: the loop is
// ending, and a drop left running by dropRaced or dropUnstored may come
// after it.
func (s *Server) block() struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.blocked++
	if s.idle == 0 && s.readers > 0 && s.readers < s.opt.MaxReaders+s.blocked {
		s.readers++
		s.wg.Add(1)
		go s.reader()
	}
	return struct{}{}
}

func (s *Server) unblock(struct{}) {
	s.mu.Lock()
	s.blocked--
	s.mu.Unlock()
}

// lockDrop locks node's dropLock, counting the wait as blocked: its holder
// may be in dropPages, waiting for a READ that needs a reader.
func (s *Server) lockDrop(node conquest.Ino) *sync.Mutex {
	mu := s.dropLock(node)
	if mu.TryLock() {
		return mu
	}
	defer s.unblock(s.block())
	mu.Lock()
	return mu
}

// connNumber is the connection's number in fusectl, "" when unknown.
func (s *Server) connNumber() string {
	if p := s.connID.Load(); p != nil {
		return *p
	}
	return ""
}

// callerWaits reports whether a process waits for req's answer: not for
// the requests the kernel sends on its own (FORGET, the RELEASE after a
// close, INTERRUPT, and the writeback cache's WRITEs of dirty pages, many
// at once for a single writer).
func callerWaits(req fuse.Request) bool {
	switch r := req.(type) {
	case *fuse.ForgetRequest, *fuse.BatchForgetRequest, *fuse.ReleaseRequest, *fuse.InterruptRequest:
		return false
	case *fuse.WriteRequest:
		return r.Flags&fuse.WriteCache == 0
	}
	return true
}

// finish marks the loop ended (Done, Wait).
func (s *Server) finish() { s.doneOnce.Do(func() { close(s.done) }) }

// lostWait is how long the loop waits, once the connection has ended, for
// readers still in the core of a lost arena before it counts as ended.
const lostWait = 2 * time.Second

// connEnded notes that the kernel ended the connection. A reader still in
// the core then finishes its request at once, unless the arena is lost
// (conquest/lost.go): a fault may have left a lock held that it waits for
// for ever. Then the loop counts as ended lostWait later without it (its
// device closes when the process exits), so that the daemon can exit.
func (s *Server) connEnded() {
	if s.fs.Lost() == nil {
		return
	}
	s.endOnce.Do(func() { time.AfterFunc(lostWait, s.finish) })
}

func (s *Server) retire() {
	s.mu.Lock()
	s.readers--
	s.mu.Unlock()
}

// retireStranding is retire for a reader that failed, and reports whether
// it leaves none, or none waiting while a call waits in a drop (block).
func (s *Server) retireStranding() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.readers--
	return s.readers == 0 || s.idle == 0 && s.blocked > 0
}
