// Package disktemp points a test binary's temporary files at a file system
// on a disk when the default one is in RAM.
//
// An arena image on tmpfs or ramfs is mapped in place, never shadowed
// (pram/shadow.go), so with /tmp a tmpfs, as Debian 13 and other systems
// mount it, every test of RAM copies, checkpoints and power loss that puts
// its images in t.TempDir would find no RAM copy to test. What it owns:
// $TMPDIR, set before the tests start, only when nobody set it. What it
// must never do: override a $TMPDIR the user chose.
package disktemp
