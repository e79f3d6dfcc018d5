package main

import (
	"bufio"
	"errors"
	"os"
	"strings"
)

// fuseConf is where fusermount3 reads user_allow_other.
var fuseConf = "/etc/fuse.conf"

// allowOther decides the allow_other mount option. A mounted file system is
// normally usable by every user, within its permission bits (which the
// kernel enforces: Conquest always mounts with default_permissions), so that
// is the default wherever FUSE permits it: when root mounts, or when
// fuse.conf has user_allow_other. --private opts out; --allow-other insists
// (and fails at mount where FUSE forbids it).
func allowOther(insist, private bool) (bool, error) {
	switch {
	case insist && private:
		return false, errors.New("--allow-other and --private contradict each other")
	case insist:
		return true, nil
	case private:
		return false, nil
	}
	return os.Geteuid() == 0 || userAllowOther(fuseConf), nil
}

// userAllowOther reports whether the fuse.conf at path lets non-root users
// mount with allow_other.
func userAllowOther(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		if i := strings.IndexByte(line, '#'); i >= 0 {
			line = line[:i]
		}
		if strings.TrimSpace(line) == "user_allow_other" {
			return true
		}
	}
	return false
}
