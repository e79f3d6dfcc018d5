// Package loopdev gives tests a real block device: a loop device over a
// sparse file in the test's temporary directory, detached when the test
// ends. Tests that need one skip where loop devices cannot be made (not
// root, no losetup, no /dev/loop-control: a container).
package loopdev
