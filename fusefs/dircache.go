package fusefs

import (
	"sync"

	"conquest/conquest"
)

// The kernel's cached directory listings (no OPENDIR, dir.go).
//
// The kernel rereads a listing it keeps when a stream starts (opendir(3),
// rewinddir(3)) and the directory changed, but a stream already under way
// goes on from the cache: after an unlink it would go on returning every
// removed name it had cached (POSIX allows it; ext4 returned some in an
// outside review, the daemon none). So each change to a directory's
// entries drops the kernel's copy of its listing before the reply
// (dirChanged); the next getdents of any stream then finds the cache gone
// and asks here, at its position, for the entries as they are. Changes
// and getdents of one directory are serialized by the kernel's lock of it,
// so no READDIR answered before a change can refill the cache after it.
// (A rename within one parent does not lock the renamed directory itself:
// a listing of it answered just before could refill its cache after the
// drop for its new ctime, and one relatime update would be missed; an
// outside review aimed 23,000 rounds at that window and never hit it.)
// Only directories listed since their last drop are dropped: a change to
// a directory never listed (PostMark's) costs nothing.

// listedDirs is the set of directories whose listing the kernel may hold:
// a READDIR was answered since the last drop. A FORGET does not take a
// directory out: it may be served after a READDIR of the inode the kernel
// looked up again, whose listing would then go undropped. Nor does an
// rmdir (the adapter does not learn the inode number). So the set holds
// at most the inode numbers ever listed as directories and not changed
// since, a word or two each.
type listedDirs struct {
	mu sync.Mutex
	m  map[conquest.Ino]struct{}
}

// noteListed records that the kernel may cache what a READDIR of dir
// returns.
func (s *Server) noteListed(dir conquest.Ino) {
	if !noOpenDirKernel {
		return
	}
	l := &s.listed
	l.mu.Lock()
	if l.m == nil {
		l.m = map[conquest.Ino]struct{}{}
	}
	l.m[dir] = struct{}{}
	l.mu.Unlock()
}

// unlisted removes dir from the set and reports whether it was there.
func (s *Server) unlisted(dir conquest.Ino) bool {
	l := &s.listed
	l.mu.Lock()
	_, ok := l.m[dir]
	delete(l.m, dir)
	l.mu.Unlock()
	return ok
}

// dirChanged drops the kernel's listing of each of dirs whose entries the
// request just changed, if it may hold one. Call it before the reply.
func (s *Server) dirChanged(dirs ...conquest.Ino) {
	for i, d := range dirs {
		if i > 0 && d == dirs[0] {
			continue
		}
		if !s.unlisted(d) {
			continue
		}
		// Pages (and attributes) only: the kernel takes no lock for
		// this that the request in flight holds (it holds the
		// directory's i_rwsem; a READDIR waits for it).
		if err := s.dropPages(d, 0, 0); err != nil {
			s.opt.Logf("fusefs: dropping the cached listing of directory %d: %v", d, err)
		}
	}
}
