package fusefs

import (
	"errors"
	"syscall"

	"conquest/conquest"
)

// errnoTable is the one place core errors become errno values. Order does
// not matter: the core's sentinels are distinct and never wrap each other.
var errnoTable = [...]struct {
	err   error
	errno syscall.Errno
}{
	{conquest.ErrNotFound, syscall.ENOENT},
	{conquest.ErrExists, syscall.EEXIST},
	{conquest.ErrNotDir, syscall.ENOTDIR},
	{conquest.ErrIsDir, syscall.EISDIR},
	{conquest.ErrNotEmpty, syscall.ENOTEMPTY},
	{conquest.ErrNameTooLong, syscall.ENAMETOOLONG},
	{conquest.ErrNoSpace, syscall.ENOSPC},
	{conquest.ErrInvalid, syscall.EINVAL},
	{conquest.ErrPerm, syscall.EPERM},
	{conquest.ErrAccess, syscall.EACCES},
	{conquest.ErrNoData, syscall.ENODATA},
	{conquest.ErrRange, syscall.ERANGE},
	{conquest.ErrFileTooBig, syscall.EFBIG},
	{conquest.ErrTooManyLinks, syscall.EMLINK},
	{conquest.ErrIO, syscall.EIO},
	{conquest.ErrStale, syscall.ESTALE},
	{conquest.ErrNotSupported, syscall.EOPNOTSUPP},
	{conquest.ErrBusy, syscall.EBUSY},
	{conquest.ErrXattr2Big, syscall.E2BIG},
	{conquest.ErrReadOnly, syscall.EROFS},
	{conquest.ErrNoSuchOffset, syscall.ENXIO},
}

// Errno maps an error from the core to the errno the kernel is given. A bare
// syscall.Errno passes through; anything unknown is EIO (known reports false,
// so the caller can log what leaked through unmapped).
func Errno(err error) (errno syscall.Errno, known bool) {
	if err == nil {
		return 0, true
	}
	if e, ok := err.(syscall.Errno); ok {
		return e, true
	}
	for _, t := range errnoTable {
		if errors.Is(err, t.err) {
			return t.errno, true
		}
	}
	return syscall.EIO, false
}
