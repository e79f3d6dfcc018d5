package dirhash

import (
	"errors"
	"fmt"

	"conquest/alloc"
)

// Sentinel errors. Callers test them with errors.Is; ErrCorrupt is returned
// wrapped with the offset and detail. Lack of space is reported with errors
// that wrap alloc.ErrNoSpace.
var (
	// ErrExists: Insert of a name the directory already holds (EEXIST).
	ErrExists = errors.New("dirhash: name exists")
	// ErrNotFound: Delete or Replace of a name the directory does not hold
	// (ENOENT).
	ErrNotFound = errors.New("dirhash: name not found")
	// ErrNameTooLong: a name longer than MaxName bytes (ENAMETOOLONG).
	ErrNameTooLong = errors.New("dirhash: name longer than 255 bytes")
	// ErrBadName: an empty name, ".", "..", or a name holding '/' or NUL.
	ErrBadName = errors.New("dirhash: invalid name")
	// ErrCorrupt: the directory's structure in the arena is damaged.
	ErrCorrupt = errors.New("dirhash: directory is corrupt")
	// ErrCollision: more than 127 names of one directory share the top 55
	// bits of their hash, so a new one has no key. It wraps alloc.ErrNoSpace
	// (ENOSPC): the directory cannot hold the name.
	ErrCollision = fmt.Errorf("%w: dirhash: too many names share a hash", alloc.ErrNoSpace)
)
