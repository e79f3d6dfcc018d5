package fusefs

import "bazil.org/fuse"

// PollName is the phantom file's name (poll.go).
const PollName = pollName

// SetPrimePoll turns the POLL primer at Mount on or off (poll_test.go's
// child process turns it off to show the deadlock it prevents).
func SetPrimePoll(on bool) { primePollOnMount = on }

// SetFusectlDir points Abort at another fusectl mount point and returns the
// function that restores the real one.
func SetFusectlDir(dir string) (restore func()) {
	old := fusectlDir
	fusectlDir = dir
	return func() { fusectlDir = old }
}

// ConnID is the connection's number in fusectl.
func (s *Server) ConnID() string { return s.connNumber() }

// NoOpenDirKernel reports whether this kernel opens directories without
// OPENDIR once told so (dir.go).
var NoOpenDirKernel = noOpenDirKernel

// SetServeHook runs h before each request is served, until the returned
// function restores the previous hook.
func SetServeHook(h func(fuse.Request)) (restore func()) {
	old := testHookServe.Swap(&h)
	return func() { testHookServe.Store(old) }
}

// MaxPagesNegotiated reports whether the kernel accepted max_pages at INIT
// (requests of up to MaxRequestData).
func (s *Server) MaxPagesNegotiated() bool { return s.conn.Features()&fuse.InitMaxPages != 0 }

// KernelAtLeast reports whether the running kernel is major.minor or later.
var KernelAtLeast = kernelAtLeast
