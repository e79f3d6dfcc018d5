package posixtest

import (
	"crypto/sha256"
	"hash"

	"golang.org/x/sys/unix"
)

// ReadFile and WriteFile are os.ReadFile and os.WriteFile made of plain
// system calls; ReadFile opens with O_NONBLOCK, so it never blocks on a
// FIFO.
// They were first written to keep the suite off the Go netpoller, whose
// epoll_ctl on a FUSE file could deadlock an in-process server with the
// garbage collector; fusefs.Mount now prevents that itself (fusefs/poll.go),
// so the os package is safe on Conquest mounts too.

// ReadFile reads the whole file at path.
func ReadFile(path string) ([]byte, error) {
	var out []byte
	err := readChunks(path, func(b []byte) { out = append(out, b...) })
	if out == nil && err == nil {
		out = []byte{}
	}
	return out, err
}

// WriteFile writes data to path, creating it with perm (before umask) or
// truncating it, in as many write calls as needed.
func WriteFile(path string, data []byte, perm uint32) error {
	fd, err := unix.Open(path, unix.O_WRONLY|unix.O_CREAT|unix.O_TRUNC|unix.O_CLOEXEC, perm)
	if err != nil {
		return err
	}
	for len(data) > 0 && err == nil {
		var n int
		n, err = unix.Write(fd, data)
		data = data[n:]
	}
	if cerr := unix.Close(fd); err == nil {
		err = cerr
	}
	return err
}

// readChunks opens path (not following a final symlink, never blocking on
// a FIFO) and passes its content to fn in chunks.
func readChunks(path string, fn func([]byte)) error {
	fd, err := unix.Open(path, unix.O_RDONLY|unix.O_CLOEXEC|unix.O_NONBLOCK, 0)
	if err != nil {
		return err
	}
	defer unix.Close(fd)
	buf := make([]byte, 256<<10)
	for {
		n, err := unix.Read(fd, buf)
		if err == unix.EINTR {
			continue
		}
		if err != nil {
			return err
		}
		if n == 0 {
			return nil
		}
		fn(buf[:n])
	}
}

func fileSum(p string) ([sha256.Size]byte, error) {
	var sum [sha256.Size]byte
	var h hash.Hash = sha256.New()
	err := readChunks(p, func(b []byte) { h.Write(b) })
	copy(sum[:], h.Sum(nil))
	return sum, err
}
