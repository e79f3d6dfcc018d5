package pram

import (
	"errors"
	"fmt"
	"sync"

	"golang.org/x/sys/unix"
)

// reservation tracks how much of an image file is known to have blocks.
//
// An image file is sparse: its pages get blocks when first stored to. If the
// file system under it is full then (a tmpfs at its size limit, a full
// disk), the store through the mapping faults with SIGBUS, which kills the
// process, or, where the goroutine guards faults (fault.go), makes the whole
// arena lost: no error reaches the one operation, and the mount is done
// for. Reserve allocates the
// blocks with fallocate(2) before the arena hands the pages out, so a full
// file system is an error (ErrNoSpace) at the allocation that needed them.
type reservation struct {
	mu          sync.Mutex
	upTo        uint64 // [0, upTo) has blocks
	unsupported bool   // the file system has no fallocate: best effort
}

// reserveAhead is how far past the requested end Reserve allocates, to keep
// the number of fallocate calls small: 1/32 of the arena, 1..64 MiB.
func reserveAhead(size uint64) uint64 {
	return min(max(size/32, 1<<20), 64<<20)
}

// Reserve makes sure the backing file holds blocks for the arena's bytes
// [0, end) before they are first stored to (see reservation). Devices need
// nothing, but the RAM copy of a block device's arena does. It allocates somewhat past end at once; when the file system has
// no room for that, exactly up to end. ErrNoSpace (wrapped) when it has no
// room for that either; nothing is stored to the arena then. A file system
// without fallocate is trusted as it is.
func (a *Arena) Reserve(end uint64) error {
	if a.readOnly || a.kind != KindFile && a.sh == nil {
		return nil
	}
	r := &a.res
	r.mu.Lock()
	defer r.mu.Unlock()
	end = min(end, a.geo.Size)
	if end <= r.upTo || r.unsupported {
		return nil
	}
	ahead := min(a.geo.Size, (end+reserveAhead(a.geo.Size)+PageSize-1)&^(PageSize-1))
	err := a.allocate(r.upTo, ahead)
	if errors.Is(err, unix.ENOSPC) && ahead > end {
		ahead = end
		err = a.allocate(r.upTo, end)
	}
	switch {
	case err == nil:
		r.upTo = ahead
		return nil
	case errors.Is(err, unix.EOPNOTSUPP) || errors.Is(err, unix.ENOSYS):
		r.unsupported = true
		return nil
	case errors.Is(err, unix.ENOSPC):
		return fmt.Errorf("%s: %w: no room for arena bytes %d..%d", a.path, ErrNoSpace, r.upTo, end)
	default:
		return fmt.Errorf("%s: allocating arena bytes %d..%d: %w", a.path, r.upTo, end, err)
	}
}

// allocate gives [from, to) blocks in the image and, for a shadowed arena,
// in its RAM copy too: the mapping faults on the copy, and a checkpoint
// writes the page to the image later, which must not fail for lack of space.
func (a *Arena) allocate(from, to uint64) error {
	if a.sh != nil {
		err := a.sh.img.Allocate(int64(from), int64(to-from))
		if err != nil && !errors.Is(err, unix.EOPNOTSUPP) && !errors.Is(err, unix.ENOSYS) {
			return err
		}
		return fallocate(int(a.sh.f.Fd()), from, to)
	}
	return fallocate(int(a.f.Fd()), from, to)
}

func fallocate(fd int, from, to uint64) error {
	for {
		err := unix.Fallocate(fd, 0, int64(from), int64(to-from))
		if err != unix.EINTR {
			return err
		}
	}
}
