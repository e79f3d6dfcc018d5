package pram

import "errors"

// Sentinel errors returned by Validate, Open and the accessors. Callers test
// them with errors.Is; the returned errors wrap them with the path and detail.
var (
	// ErrNotConquest: the image does not start with the Conquest arena magic.
	// It is empty, another file system, or random bytes.
	ErrNotConquest = errors.New("not a Conquest arena (bad magic)")
	// ErrVersion: the format version is one this build cannot read.
	ErrVersion = errors.New("unsupported Conquest arena format version")
	// ErrChecksum: the superblock's checksum does not match its contents.
	ErrChecksum = errors.New("superblock checksum mismatch")
	// ErrSuperBackup: the superblock's static part is damaged and the copy
	// of it that page 0 keeps is intact; RestoreSuper writes it back.
	ErrSuperBackup = errors.New("its backup copy is intact: `conquest fsck --repair` restores it")
	// ErrSizeMismatch: the superblock records a size other than the device's.
	ErrSizeMismatch = errors.New("arena size in superblock does not match the device")
	// ErrCorrupt: a superblock or journal field is out of range.
	ErrCorrupt = errors.New("arena superblock or journal is corrupt")
	// ErrJournal: the undo journal is damaged (added to ErrCorrupt): its
	// records do not check, or a cleanly closed arena's journal is not
	// empty. Nothing is rolled back; OpenOptions.DiscardJournal empties it.
	ErrJournal = errors.New("the undo journal is damaged")
	// ErrLocked: another process has the arena open.
	ErrLocked = errors.New("arena is in use by another process")
	// ErrTooSmall: the requested or found arena size is below MinSize.
	ErrTooSmall = errors.New("arena is too small")
	// ErrOutOfRange: an offset or length lies outside the arena. Accessors
	// panic with this error (wrapped); callers that walk a damaged arena check
	// InRange first.
	ErrOutOfRange = errors.New("offset out of arena range")
	// ErrNoSpace: the file system under an image file has no room for the
	// arena's next pages (see Arena.Reserve).
	ErrNoSpace = errors.New("no space left for the arena image on its file system")
	// ErrTxFull: a transaction recorded more undo data than the journal holds.
	// Tx methods panic with it before changing anything, so recovering the
	// panic and calling Abort leaves the arena as before the transaction.
	ErrTxFull = errors.New("transaction too large for the journal")
)

// OutOfRange reports whether a recovered panic value is an ErrOutOfRange
// error: damage the arena's bounds checks caught, which callers log in one
// line, without the stack a bug would deserve.
func OutOfRange(v any) bool {
	err, ok := v.(error)
	return ok && errors.Is(err, ErrOutOfRange)
}
