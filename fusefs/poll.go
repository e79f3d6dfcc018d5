package fusefs

import (
	"fmt"
	"path/filepath"
	"runtime"
	"syscall"
	"time"

	"bazil.org/fuse"
	"golang.org/x/sys/unix"
)

// POLL at mount.
//
// The os package registers every file it opens with the Go netpoller. On
// Linux that is an epoll_ctl, which the runtime makes as a raw system call,
// without releasing its P; on a regular file of a FUSE mount that sends a
// POLL request (fuse_file_poll) and waits for the answer. When the daemon is
// the same process (fusefs.Mount in a test, or any program that serves and
// uses a mount) and a garbage collection starts its stop-the-world at that
// moment, the collector waits for the P held in epoll_ctl, and the readers
// that would answer POLL wait for the collector: a deadlock.
//
// The kernel asks only until a daemon answers POLL with ENOSYS (it then sets
// fc->no_poll for the connection), so Mount provokes one POLL itself before
// it returns, while its own readers serve and nothing else uses the mount.
// POLL is sent only for regular files (directories have no poll method in
// FUSE) and a fresh file system has none, so the file is a phantom: a
// LOOKUP of pollName in the root, sent by the very thread that primes,
// gets a read-only regular file with node id pollNode, which the core never
// sees. Every request for pollNode is answered here (poll.go), its entry
// and attributes are never cached, and the entry is invalidated after use,
// so nothing is left visible: at any other time, or from any other thread,
// pollName is an ordinary name served by the core. (go-fuse does the same
// with a CREATE of a reserved name.)

const (
	pollName = ".conquest-poll-prime"
	// pollNode is far beyond any inode number the core hands out.
	pollNode = ^fuse.NodeID(0)
	// pollWait bounds the priming; the serve loop answers in microseconds.
	pollWait = 10 * time.Second
)

// primePollOnMount is false only in the test that shows the deadlock this
// prevents (set before any Mount).
var primePollOnMount = true

// primePoll makes the kernel send one POLL and learn that this daemon does
// not implement it. The serve loop must be running.
func (s *Server) primePoll() error {
	done := make(chan error, 1)
	go func() {
		// The thread id identifies the priming LOOKUP (the kernel reports
		// the calling thread's id as the request's pid).
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		s.pollTid.Store(uint32(unix.Gettid()))
		defer s.pollTid.Store(0)
		done <- s.pollOnce()
	}()
	select {
	case err := <-done:
		return err
	case <-time.After(pollWait):
		// Not expected: the serve loop answers. Give up rather than block
		// Mount; the goroutine ends whenever the kernel answers.
		return fmt.Errorf("no answer to the POLL primer within %v", pollWait)
	}
}

func (s *Server) pollOnce() error {
	p := filepath.Join(s.dir, pollName)
	// unix.Open and unix.Poll are ordinary system calls (they release the
	// P), unlike the netpoller's epoll_ctl.
	fd, err := unix.Open(p, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK|unix.O_NOFOLLOW, 0)
	if err != nil {
		return fmt.Errorf("opening %s: %w", p, err)
	}
	fds := []unix.PollFd{{Fd: int32(fd), Events: unix.POLLIN}}
	for {
		_, err = unix.Poll(fds, 0)
		if err != unix.EINTR {
			break
		}
	}
	if cerr := unix.Close(fd); err == nil && cerr != nil {
		err = fmt.Errorf("closing %s: %w", p, cerr)
	}
	// The entry is not cached (TTL 0); invalidating drops the dentry now,
	// so the kernel forgets pollNode instead of keeping it until reclaim.
	if ierr := s.conn.InvalidateEntry(fuse.RootID, pollName); ierr != nil && ierr != fuse.ErrNotCached {
		s.opt.Logf("fusefs: invalidating %s: %v", pollName, ierr)
	}
	if err != nil {
		return fmt.Errorf("poll on %s: %w", p, err)
	}
	return nil
}

// pollAttr is the phantom file's attributes.
var pollAttr = fuse.Attr{
	Valid: 0,
	Inode: uint64(pollNode),
	Mode:  0o444,
	Nlink: 1,
}

// isPollLookup reports whether r is the primer's LOOKUP.
func (s *Server) isPollLookup(r *fuse.LookupRequest) bool {
	tid := s.pollTid.Load()
	return tid != 0 && r.Node == fuse.RootID && r.Name == pollName && r.Pid == tid
}

// servePoll answers the requests about the phantom file (r.Node is
// pollNode, or r is the primer's LOOKUP).
func (s *Server) servePoll(req fuse.Request) {
	switch r := req.(type) {
	case *fuse.LookupRequest:
		r.Respond(&fuse.LookupResponse{Node: pollNode, EntryValid: 0, Attr: pollAttr})
	case *fuse.GetattrRequest:
		r.Respond(&fuse.GetattrResponse{Attr: pollAttr})
	case *fuse.OpenRequest:
		if r.Dir || !r.Flags.IsReadOnly() {
			r.RespondError(syscall.EACCES)
			return
		}
		r.Respond(&fuse.OpenResponse{Handle: 1, Flags: fuse.OpenDirectIO})
	case *fuse.PollRequest:
		s.count(opPoll)
		r.RespondError(syscall.ENOSYS)
	case *fuse.ForgetRequest:
		r.Respond()
	case *fuse.ReleaseRequest:
		r.Respond()
	case *fuse.FlushRequest:
		// As dispatch does: the kernel then stops sending FLUSH.
		s.count(opFlush)
		r.RespondError(syscall.ENOSYS)
	default:
		// Only the primer knows the node; nothing else should reach it.
		req.RespondError(syscall.EIO)
	}
}
