package main

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"strings"

	"conquest/diskstore"
	"conquest/pram"
)

// probeLen covers the first 64 KiB plus the btrfs superblock just past it.
const probeLen = 64<<10 + 4096

// signature is a magic number at a fixed offset.
type signature struct {
	off   int
	magic []byte
	what  string
}

var signatures = []signature{
	{0, []byte(pram.Magic), "a Conquest arena"},
	{0, []byte(diskstore.DiskMagic), "a Conquest disk"},
	{0, []byte("CONQ"), "a Conquest image"},
	{1080, []byte{0x53, 0xEF}, "an ext2/ext3/ext4 file system"},
	{0, []byte("XFSB"), "an XFS file system"},
	{65536 + 64, []byte("_BHRfS_M"), "a btrfs file system"},
	{1024, []byte{0x10, 0x20, 0xF5, 0xF2}, "an F2FS file system"},
	{0, []byte("hsqs"), "a SquashFS image"},
	{3, []byte("NTFS    "), "an NTFS file system"},
	{0, []byte("LUKS\xba\xbe"), "a LUKS encrypted volume"},
	{4086, []byte("SWAPSPACE2"), "a swap area"},
	{4086, []byte("SWAP-SPACE"), "a swap area"},
	{54, []byte("FAT"), "a FAT file system"},
	{82, []byte("FAT32"), "a FAT32 file system"},
	{512, []byte("EFI PART"), "a GPT partition table"},
	{510, []byte{0x55, 0xAA}, "a boot sector or partition table"},
}

// probe says what path holds, or "" when it is safe to format: it does not
// exist, is empty, or its first 64 KiB are all zero. Anything else (another
// file system's magic, or just data) is described for the refusal message.
func probe(path string) (string, error) {
	st, err := os.Stat(path)
	if os.IsNotExist(err) {
		return "", nil
	}
	if err != nil {
		return "", err
	}
	if st.Mode().IsRegular() && st.Size() == 0 {
		return "", nil
	}
	if st.IsDir() {
		return "a directory", nil
	}
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	buf := make([]byte, probeLen)
	n, err := io.ReadFull(f, buf)
	if err != nil && err != io.ErrUnexpectedEOF && err != io.EOF {
		return "", fmt.Errorf("%s: reading: %w", path, err)
	}
	buf = buf[:n]
	for _, s := range signatures {
		if s.off+len(s.magic) <= len(buf) && bytes.Equal(buf[s.off:s.off+len(s.magic)], s.magic) {
			if s.what == "a Conquest arena" {
				if g, err := pram.Validate(buf[:min(len(buf), pram.PageSize)], 0); err == nil {
					return fmt.Sprintf("a Conquest arena (UUID %s, %s)", g.UUIDString(), formatSize(g.Size)), nil
				}
			}
			return s.what, nil
		}
	}
	head := buf[:min(len(buf), 64<<10)]
	if i := bytes.IndexFunc(head, func(r rune) bool { return r != 0 }); i >= 0 {
		return fmt.Sprintf("data (a non-zero byte at offset %d of its first 64 KiB)", i), nil
	}
	return "", nil
}

// holdsOther says what the image at path holds, when probe recognises
// something other than the Conquest image expected (want: "a Conquest
// arena" or "a Conquest disk"): the other kind of Conquest image, or another
// file system. It is "" for zeros, for data it does not recognise (damage to
// the image expected, perhaps) and when path cannot be read: then the
// error of opening it stands as it is.
func holdsOther(path, want string) string {
	what, err := probe(path)
	if err != nil || what == "" || strings.HasPrefix(what, want) || strings.HasPrefix(what, "data ") {
		return ""
	}
	return what
}
