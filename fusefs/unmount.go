package fusefs

import (
	"bufio"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"

	"golang.org/x/sys/unix"
)

// Unmount detaches the FUSE file system mounted on dir with fusermount3 -u
// (-z when lazy), falling back to umount(2) (MNT_DETACH when lazy) when
// fusermount3 is missing or refuses (it does for mounts of other users,
// which root may still unmount). Lazy detaches a busy mount at once; its
// daemon keeps serving the files still open and exits after the last close.
func Unmount(dir string, lazy bool) error {
	args := []string{"-u"}
	if lazy {
		args = append(args, "-z")
	}
	args = append(args, dir)
	out, ferr := exec.Command("fusermount3", args...).CombinedOutput()
	if ferr == nil {
		return nil
	}
	flags := 0
	if lazy {
		flags = unix.MNT_DETACH
	}
	uerr := unix.Unmount(dir, flags)
	if uerr == nil {
		return nil
	}
	switch {
	case errors.Is(uerr, unix.EBUSY):
		return fmt.Errorf("unmounting %s: file system is busy (files open or a process has its working directory there)", dir)
	case errors.Is(uerr, unix.EINVAL):
		return fmt.Errorf("unmounting %s: not a mount point", dir)
	}
	msg := strings.TrimSpace(string(out))
	if msg == "" {
		msg = ferr.Error()
	}
	return fmt.Errorf("unmounting %s: %s; umount(2): %v", dir, msg, uerr)
}

// MountInfo describes one mount from /proc/self/mountinfo.
type MountInfo struct {
	Dir    string // mount point
	FSType string // e.g. "fuse.conquest"
	Source string // e.g. "conquest"
	// Options are the super options, e.g. "rw,user_id=0,...,allow_other".
	Options string
	// Device is the mount's device number as "major:minor" (for FUSE, 0 and
	// the connection number: also the name of its bdi in /sys/class/bdi).
	Device string
}

// Mounted reports the mount on dir, if dir is a mount point. It resolves
// symbolic links in dir's parent first and looks at dir itself only if no
// mount is found there: looking at a mount point asks its daemon (a
// GETATTR of its root), and a daemon that is stopped or hung would hang
// the caller, `conquest umount` among them.
func Mounted(dir string) (MountInfo, bool) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return MountInfo{}, false
	}
	if r, err := filepath.EvalSymlinks(filepath.Dir(abs)); err == nil {
		abs = filepath.Join(r, filepath.Base(abs))
	}
	if mi, ok := mountedAt(abs); ok {
		return mi, true
	}
	if r, err := filepath.EvalSymlinks(abs); err == nil && r != abs {
		return mountedAt(r)
	}
	return MountInfo{}, false
}

// mountedAt reports the mount whose mount point is the resolved path abs.
func mountedAt(abs string) (MountInfo, bool) {
	f, err := os.Open("/proc/self/mountinfo")
	if err != nil {
		return MountInfo{}, false
	}
	defer f.Close()
	var found MountInfo
	ok := false
	sc := bufio.NewScanner(f)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		// id parent major:minor root mountpoint options [optional...] - fstype source superoptions
		fields := strings.Fields(sc.Text())
		sep := -1
		for i, f := range fields {
			if f == "-" {
				sep = i
				break
			}
		}
		if len(fields) < 5 || sep < 0 || sep+2 >= len(fields) {
			continue
		}
		if unescapeMount(fields[4]) == abs {
			// The last mount on a point hides earlier ones.
			found = MountInfo{Dir: abs, FSType: fields[sep+1], Source: unescapeMount(fields[sep+2]), Device: fields[2]}
			if sep+3 < len(fields) {
				found.Options = fields[sep+3]
			}
			ok = true
		}
	}
	return found, ok
}

// unescapeMount undoes the octal escapes (\040 for space...) of mountinfo.
func unescapeMount(s string) string {
	if !strings.Contains(s, `\`) {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '\\' && i+3 < len(s) {
			v := 0
			okDigits := true
			for _, c := range s[i+1 : i+4] {
				if c < '0' || c > '7' {
					okDigits = false
					break
				}
				v = v*8 + int(c-'0')
			}
			if okDigits {
				b.WriteByte(byte(v))
				i += 3
				continue
			}
		}
		b.WriteByte(s[i])
	}
	return b.String()
}
