package disktemp

import (
	"os"

	"golang.org/x/sys/unix"
)

// Candidate is where the temporary files go instead: /var/tmp, which the
// FHS keeps on a disk (it survives a reboot).
const Candidate = "/var/tmp"

// Use sets $TMPDIR to Candidate when $TMPDIR is unset, the default
// temporary directory is on tmpfs or ramfs, and Candidate is a writable
// directory that is not. It returns the directory it chose, or "".
func Use() string {
	if os.Getenv("TMPDIR") != "" || !OnRAM(os.TempDir()) || OnRAM(Candidate) {
		return ""
	}
	if unix.Access(Candidate, unix.W_OK|unix.X_OK) != nil {
		return ""
	}
	os.Setenv("TMPDIR", Candidate)
	return Candidate
}

// OnRAM reports whether dir is on tmpfs or ramfs (false if it cannot tell).
func OnRAM(dir string) bool {
	var st unix.Statfs_t
	if unix.Statfs(dir, &st) != nil {
		return false
	}
	return st.Type == unix.TMPFS_MAGIC || st.Type == unix.RAMFS_MAGIC
}
