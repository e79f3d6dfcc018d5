package main

import (
	"fmt"
	"runtime/debug"

	"conquest/diskstore"
	"conquest/pram"
)

// versionText is what `conquest --version` prints after "conquest version":
// the build (the module's version, or the commit the binary was built from
// when the build recorded it) and the versions of the image formats it
// reads and writes, which are what decide whether it can mount an image.
func versionText() string {
	v := "devel"
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v = bi.Main.Version
		}
		var rev, at, dirty string
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				rev = s.Value
			case "vcs.time":
				at = s.Value
			case "vcs.modified":
				if s.Value == "true" {
					dirty = " with uncommitted changes"
				}
			}
		}
		if rev != "" {
			v += fmt.Sprintf(" (commit %.12s of %s%s)", rev, at, dirty)
		}
		v += ", built with " + bi.GoVersion
	}
	return fmt.Sprintf("%s; arena format %d, disk format %d", v, pram.Version, diskstore.DiskVersion)
}
