package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/urfave/cli/v2"
	"golang.org/x/sys/unix"
)

// Sizes of the embedded default's image files (sparse: they take disk space
// only as they fill) and of images mkfs creates when no size is given.
const (
	defaultPramSize = 1 << 30
	defaultDiskSize = 4 << 30
)

// images is a pram arena and its large-file disk.
type images struct {
	pram, disk string
	// dataDir holds the embedded default's images and the daemon's log.
	dataDir string
	// embedded: no --pram/--disk were given; the images live in dataDir.
	embedded bool
}

func deviceFlags() []cli.Flag {
	return []cli.Flag{
		&cli.StringFlag{Name: "pram", Usage: "persistent-RAM arena: an image file, a device-DAX or a block device (default: the embedded image in the data directory)"},
		&cli.StringFlag{Name: "disk", Usage: "large-file disk: an image file or a block device (given together with --pram)"},
	}
}

// dataDir is $CONQUEST_HOME, else $XDG_DATA_HOME/conquest, else
// ~/.local/share/conquest.
func dataDir() (string, error) {
	if d := os.Getenv("CONQUEST_HOME"); d != "" {
		return filepath.Abs(d)
	}
	if d := os.Getenv("XDG_DATA_HOME"); d != "" && filepath.IsAbs(d) {
		return filepath.Join(d, "conquest"), nil
	}
	home, err := os.UserHomeDir()
	if err != nil {
		return "", fmt.Errorf("cannot choose a data directory (%v): set CONQUEST_HOME", err)
	}
	return filepath.Join(home, ".local", "share", "conquest"), nil
}

// resolveImages reads --pram and --disk, or picks the embedded default.
func resolveImages(c *cli.Context) (images, error) {
	dir, err := dataDir()
	if err != nil {
		return images{}, err
	}
	im := images{pram: c.String("pram"), disk: c.String("disk"), dataDir: dir}
	switch {
	case im.pram == "" && im.disk == "":
		im.embedded = true
		im.pram = filepath.Join(dir, "pram.img")
		im.disk = filepath.Join(dir, "disk.img")
		return im, nil
	case im.pram == "":
		return images{}, errors.New("--disk given without --pram: give both, or neither for the embedded default")
	case im.disk == "":
		return images{}, errors.New("--pram given without --disk: give both, or neither for the embedded default")
	}
	if im.pram, err = filepath.Abs(im.pram); err != nil {
		return images{}, err
	}
	if im.disk, err = filepath.Abs(im.disk); err != nil {
		return images{}, err
	}
	if im.pram == im.disk {
		return images{}, fmt.Errorf("%s: --pram and --disk must be different", im.pram)
	}
	return im, nil
}

// inUse reports whether a daemon (or fsck, or mkfs) holds path's arena lock.
func inUse(path string) bool {
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	err = unix.Flock(int(f.Fd()), unix.LOCK_EX|unix.LOCK_NB)
	if err == nil {
		unix.Flock(int(f.Fd()), unix.LOCK_UN)
		return false
	}
	return errors.Is(err, unix.EWOULDBLOCK)
}

func exists(path string) bool {
	_, err := os.Stat(path)
	return err == nil
}
