package fusefs

import (
	"errors"
	"fmt"
	"os"
	"os/exec"
)

// whyNoFUSE names what keeps this process from mounting with FUSE, if it
// can tell: bazil's error for a failed mount is only fusermount3's exit
// status (its message goes to the log), so a user would not learn that
// /dev/fuse is closed to them or that fuse3 is not installed.
func whyNoFUSE() string {
	if _, err := exec.LookPath("fusermount3"); err != nil {
		if _, err := exec.LookPath("fusermount"); err != nil {
			return "fusermount3 is not installed: apt-get install fuse3"
		}
	}
	f, err := os.OpenFile("/dev/fuse", os.O_RDWR, 0)
	if err != nil {
		mode := ""
		if st, serr := os.Stat("/dev/fuse"); serr == nil {
			mode = fmt.Sprintf(" (mode %#o)", st.Mode().Perm())
		}
		var pe *os.PathError
		if errors.As(err, &pe) {
			err = pe.Err
		}
		return fmt.Sprintf("this user cannot open /dev/fuse%s: %v; it is usually open to all (0666), or mount as root", mode, err)
	}
	f.Close()
	return ""
}
