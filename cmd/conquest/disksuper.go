package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"

	"conquest/conquest"
	"conquest/diskstore"
	"conquest/pram"
)

// rebuildDiskSuper is fsck --repair's answer to a disk whose superblock
// and its copy (both in the first 4 KiB) are lost: it builds the
// superblock from the arena (its UUID, the disk's block size and count),
// opens the pair read-only with that superblock shown in place of the
// lost one (diskstore.SuperOverlay), verifies every written block against
// the arena's checksums, and only if they verify (all of them, or all but
// a few: maxBadShare), and some data or nothing but zeros was there,
// writes it (diskstore.RebuildSuper). A disk of another file system, or of
// another pair, given by mistake fails that check (no block of it
// verifies) and is left as it is. It returns what it did, for fsck's list
// of fixes.
func rebuildDiskSuper(im images, opts conquest.Options) (string, error) {
	g, err := pram.ReadGeometry(im.pram)
	if err != nil {
		return "", err
	}
	bs, blocks := g.Params[diskstore.ParamBlockSize], g.Params[diskstore.ParamDiskBlocks]
	if g.Features&pram.FeatureDisk == 0 || !diskstore.ValidBlockSize(bs) || blocks < diskstore.MinBlocks || bs > 1<<32 {
		return "", fmt.Errorf("%s: the arena records no usable disk geometry (%d blocks of %d bytes)", im.pram, blocks, bs)
	}
	dev, err := diskstore.OpenDevice(im.disk, diskstore.DeviceOptions{})
	if err != nil {
		return "", err
	}
	defer dev.Close()
	if n := diskstore.BlockCount(dev.Size(), uint32(bs)); n < blocks {
		return "", fmt.Errorf("%s: holds %d blocks of %d bytes, the arena's disk had %d: not its disk, not rebuilding its superblock", im.disk, n, bs, blocks)
	}
	sup := diskstore.Super{Version: diskstore.DiskVersion, BlockSize: uint32(bs), UUID: g.UUID, Blocks: blocks, CreatedNs: g.CreatedNs}

	o := opts
	o.ReadOnly = true
	o.Device = diskstore.SuperOverlay(dev, sup)
	fsys, err := coreOpen(im, o)
	if err != nil {
		return "", fmt.Errorf("%s: opening the pair with a rebuilt disk superblock: %w", im.pram, err)
	}
	failed := uint64(0)
	var verified uint64
	for _, e := range fsys.CheckWith(conquest.CheckOptions{VerifyData: true, VerifiedBlocks: &verified}) {
		var dc *diskstore.DataChecksumError
		var sd *diskstore.SumDamageError
		if errors.As(e, &dc) || errors.As(e, &sd) {
			failed++
		}
	}
	used := fsys.Space().DiskUsed
	if err := fsys.Close(); err != nil {
		return "", err
	}
	if failed > 0 && (verified == 0 || failed*maxBadShare > verified) {
		return "", fmt.Errorf("%s: with a superblock rebuilt from the arena, %d of its blocks fail their checksums and %d verify: not the arena's disk (or damaged beyond its first block), not rebuilding it", im.disk, failed, verified)
	}
	if used == 0 {
		// No data to vouch for the disk: only a first page of zeros
		// (a replaced sector) is taken for the lost superblock.
		page := diskstore.AlignedBuffer(4096)
		if _, err := dev.ReadAt(page, 0); err != nil && !errors.Is(err, io.EOF) || !bytes.Equal(page, make([]byte, len(page))) {
			return "", fmt.Errorf("%s: holds no Conquest superblock, and the arena has no data on a disk to check it against: not rebuilding it", im.disk)
		}
	}
	if err := diskstore.RebuildSuper(dev, sup); err != nil {
		return "", err
	}
	if failed > 0 {
		return fmt.Sprintf("disk superblock: lost with its copy: rebuilt from the arena (%d blocks of %d bytes, UUID %s; %d written blocks verified against the arena's checksums, %d failed theirs and read as errors until `--zero-bad-blocks` makes holes of them)",
			blocks, bs, pram.FormatUUID(g.UUID), verified, failed), nil
	}
	return fmt.Sprintf("disk superblock: lost with its copy: rebuilt from the arena (%d blocks of %d bytes, UUID %s; every written block verified against the arena's checksums)",
		blocks, bs, pram.FormatUUID(g.UUID)), nil
}

// maxBadShare: a disk whose superblock is rebuilt may have one block
// failing its checksum for every maxBadShare that verify (bad sectors
// beside the lost first one: an outside review found one bad block made
// the pair unusable for good). Another disk given by mistake verifies none.
const maxBadShare = 20
