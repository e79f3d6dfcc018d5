package main

import (
	"errors"
	"os"
	"time"

	"golang.org/x/sys/unix"
)

// Block devices are claimed the way the kernel claims a mounted file
// system's device: an exclusive open (O_EXCL on a block device, without
// O_CREAT), which fails with EBUSY while another exclusive opener holds
// the device, whichever device node either one opened it through. The
// arena's and the disk's flock(2) locks are taken on the inode of the path
// given, so a second node for the same device (mknod, a udev symlink is
// fine: it resolves to the same inode) passed them: two daemons then
// mounted one arena and corrupted its heap, and mkfs formatted a mounted
// pair through other nodes. Without a claim, mkfs.ext4 and the like also
// formatted a mounted Conquest device without a word. Every command that
// opens the file system (mount, fsck, df) claims both devices for as long
// as it has them open (lockDisk), and mkfs while it formats. Only the
// claim is exclusive: the command's own opens of the devices, and anyone
// else's non-exclusive ones, still succeed.

// claimDevice opens path exclusively if it is a block device and keeps it
// so until the returned file is closed. busy reports that another holder
// has it (a mounted file system, swap, a device mapper or RAID array, a
// Conquest command through another device node). For anything but a block
// device it returns a nil file (Close on it is harmless).
func claimDevice(path string) (f *os.File, busy bool, err error) {
	st, err := os.Stat(path)
	if err != nil || st.Mode()&os.ModeDevice == 0 || st.Mode()&os.ModeCharDevice != 0 {
		return nil, false, nil
	}
	f, err = os.OpenFile(path, os.O_RDONLY|unix.O_EXCL, 0)
	if errors.Is(err, unix.EBUSY) {
		return nil, true, nil
	}
	if err != nil {
		return nil, false, err
	}
	return f, false, nil
}

// claimDevices claims each block device among paths (claimDevice) and
// returns the function that releases them; on busy or an error it releases
// what it had claimed and reports the path it could not claim.
func claimDevices(paths ...string) (release func(), busyPath string, err error) {
	var held []*os.File
	release = func() {
		for _, f := range held {
			f.Close()
		}
		held = nil
	}
	for _, p := range paths {
		f, busy, err := claimDevice(p)
		if busy || err != nil {
			release()
			if busy {
				return nil, p, nil
			}
			return nil, "", err
		}
		if f != nil {
			held = append(held, f)
		}
	}
	return release, "", nil
}

// claimDeviceWait is claimDevice that waits, up to diskLockWait, for a busy
// device to be let go: a daemon releases its claims just after the arena's
// lock, which is what `conquest umount` and waitExited wait for, so an mkfs
// run right after them could find the devices still claimed.
func claimDeviceWait(path string) (f *os.File, busy bool, err error) {
	deadline := time.Now().Add(diskLockWait)
	for {
		f, busy, err = claimDevice(path)
		if !busy || time.Now().After(deadline) {
			return f, busy, err
		}
		time.Sleep(10 * time.Millisecond)
	}
}
