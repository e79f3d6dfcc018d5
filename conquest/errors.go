package conquest

import "errors"

// Sentinel errors returned by the core. Callers test them with errors.Is;
// fusefs maps each to one errno in a single table (shown after each one).
// Returned errors may wrap them with detail.
var (
	ErrNotFound     = errors.New("conquest: no such file or directory")        // ENOENT
	ErrExists       = errors.New("conquest: file exists")                      // EEXIST
	ErrNotDir       = errors.New("conquest: not a directory")                  // ENOTDIR
	ErrIsDir        = errors.New("conquest: is a directory")                   // EISDIR
	ErrNotEmpty     = errors.New("conquest: directory not empty")              // ENOTEMPTY
	ErrNameTooLong  = errors.New("conquest: file name too long")               // ENAMETOOLONG
	ErrNoSpace      = errors.New("conquest: no space left on device")          // ENOSPC
	ErrInvalid      = errors.New("conquest: invalid argument")                 // EINVAL
	ErrPerm         = errors.New("conquest: operation not permitted")          // EPERM
	ErrAccess       = errors.New("conquest: permission denied")                // EACCES
	ErrNoData       = errors.New("conquest: no such attribute")                // ENODATA
	ErrRange        = errors.New("conquest: result too large for the buffer")  // ERANGE
	ErrFileTooBig   = errors.New("conquest: file too large")                   // EFBIG
	ErrTooManyLinks = errors.New("conquest: too many links")                   // EMLINK
	ErrIO           = errors.New("conquest: input/output error")               // EIO
	ErrStale        = errors.New("conquest: stale inode number")               // ESTALE
	ErrNotSupported = errors.New("conquest: operation not supported")          // EOPNOTSUPP
	ErrBusy         = errors.New("conquest: device or resource busy")          // EBUSY
	ErrXattr2Big    = errors.New("conquest: extended attribute list too long") // E2BIG
	ErrReadOnly     = errors.New("conquest: read-only file system")            // EROFS
	ErrNoSuchOffset = errors.New("conquest: no data or hole at that offset")   // ENXIO
)
