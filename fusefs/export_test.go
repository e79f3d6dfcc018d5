package fusefs

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
