// Command conquest makes, mounts, checks and measures Conquest file systems.
//
//	conquest mkfs    --pram PATH --disk PATH [--pram-size SIZE] [--disk-size SIZE] [--force]
//	conquest mount   [--pram PATH --disk PATH] [--foreground] MOUNTPOINT
//	conquest umount  MOUNTPOINT
//	conquest fsck    [--repair [--zero-bad-blocks]] [--pram PATH --disk PATH]
//	conquest df      [--pram PATH --disk PATH | MOUNTPOINT]
//	conquest stat    [--pram PATH --disk PATH | MOUNTPOINT]
//	conquest bench   postmark|sprite-small|sprite-large ...
//	conquest SOURCE MOUNTPOINT -o OPTIONS   (as mount.fuse3 runs it: helper.go)
//	conquest --version
//
// Every error names the path and the problem; no Go stack trace reaches a
// user (run recovers at the top).
package main
