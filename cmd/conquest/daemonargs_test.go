package main

import (
	"slices"
	"testing"

	"conquest/fusefs"
)

// The settings of a mount reach the daemon it starts in the background as
// flags (daemonArgs); each setting must have its flag there.
func TestDaemonArgs(t *testing.T) {
	ms := mountSettings{
		fuse: fusefs.Options{AllowOther: true, WritebackCache: true, CachedWrites: true,
			NoSUID: true, NoDev: true, NoExec: true, ReadOnly: true},
		noAtime: true,
	}
	args := ms.daemonArgs()
	for _, f := range []string{"--allow-other", "--writeback-cache", "--cached-writes", "--nosuid",
		"--nodev", "--noexec", "--read-only", "--noatime"} {
		if !slices.Contains(args, f) {
			t.Errorf("daemonArgs %v: no %s", args, f)
		}
	}
	args = mountSettings{}.daemonArgs()
	for _, f := range []string{"--allow-other", "--writeback-cache", "--cached-writes", "--noatime"} {
		if slices.Contains(args, f) {
			t.Errorf("daemonArgs of the zero settings %v: %s", args, f)
		}
	}
}
