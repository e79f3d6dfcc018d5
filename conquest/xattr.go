package conquest

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"strings"

	"conquest/pram"
)

// Extended attributes of an inode live in one blob (iXattr, 0 = none):
//
//	u32 used bytes (header included), then entries packed back to back:
//	u8 name length, u32 value length, name, value.
//
// A change builds a new blob and swaps the pointer in the Tx (copy on
// write), freeing the old one. Limits: names (with prefix) 1..255 bytes,
// values up to MaxXattrValue, all entries of one inode up to MaxXattrTotal
// encoded bytes (ErrNoSpace beyond, like ext4 when the xattr block is full).
// Namespaces user., trusted. and security. are supported; system. (ACLs)
// and anything else is ErrNotSupported. user.* exists only on regular files
// and directories: setting one elsewhere is ErrPerm, reading ErrNoData.

const xattrHeader = 4
const xattrEntryHeader = 5

type xattrEntry struct {
	name  string
	value []byte
}

// checkXattrName validates a full attribute name.
func checkXattrName(name string) error {
	if name == "" || len(name) > MaxXattrName {
		return ErrRange
	}
	for _, p := range []string{"user.", "trusted.", "security."} {
		if strings.HasPrefix(name, p) {
			if len(name) == len(p) {
				return ErrInvalid
			}
			return nil
		}
	}
	return ErrNotSupported
}

// userXattrAllowed reports whether in may carry user.* attributes.
func userXattrAllowed(in inode, name string) bool {
	return !strings.HasPrefix(name, "user.") || in.isReg() || in.isDir()
}

// xattrs decodes the blob of in (copies).
// Preconditions: fs.mu held.
func (fs *FS) xattrs(in inode) ([]xattrEntry, error) {
	off := in.xattr()
	if off == 0 {
		return nil, nil
	}
	if !fs.a.InHeap(off, xattrHeader) {
		return nil, fmt.Errorf("%w: xattr blob of inode %d at %d", ErrIO, in.ino, off)
	}
	used := uint64(fs.a.U32(off))
	if used < xattrHeader || used > MaxXattrTotal+xattrHeader || !fs.a.InHeap(off, used) {
		return nil, fmt.Errorf("%w: xattr blob of inode %d: %d bytes", ErrIO, in.ino, used)
	}
	b := fs.a.View(off, used)[xattrHeader:]
	var es []xattrEntry
	for len(b) > 0 {
		if len(b) < xattrEntryHeader {
			return nil, fmt.Errorf("%w: xattr blob of inode %d: truncated entry", ErrIO, in.ino)
		}
		nl, vl := uint64(b[0]), uint64(binary.LittleEndian.Uint32(b[1:]))
		b = b[xattrEntryHeader:]
		if nl == 0 || nl+vl > uint64(len(b)) {
			return nil, fmt.Errorf("%w: xattr blob of inode %d: bad entry", ErrIO, in.ino)
		}
		es = append(es, xattrEntry{name: string(b[:nl]), value: append([]byte{}, b[nl:nl+vl]...)})
		b = b[nl+vl:]
	}
	return es, nil
}

func encodeXattrs(es []xattrEntry) []byte {
	n := xattrHeader
	for _, e := range es {
		n += xattrEntryHeader + len(e.name) + len(e.value)
	}
	b := make([]byte, xattrHeader, n)
	binary.LittleEndian.PutUint32(b, uint32(n))
	for _, e := range es {
		b = append(b, byte(len(e.name)))
		b = binary.LittleEndian.AppendUint32(b, uint32(len(e.value)))
		b = append(b, e.name...)
		b = append(b, e.value...)
	}
	return b
}

// putXattrs replaces the blob of in by es (nil frees it).
// Preconditions: fs.mu held exclusively.
func (fs *FS) putXattrs(tx *pram.Tx, in inode, es []xattrEntry) error {
	old := in.xattr()
	var off pram.Off
	if len(es) > 0 {
		b := encodeXattrs(es)
		if len(b) > MaxXattrTotal+xattrHeader {
			return ErrNoSpace
		}
		alloc := func() error {
			var err error
			off, err = fs.h.Alloc(tx, uint64(len(b)))
			return err
		}
		var err error
		if old != 0 && uint64(len(b)) <= uint64(fs.a.U32(old)) {
			// A list that shrinks (an attribute removed, a value
			// shortened) gives back more than it takes: it may draw on
			// the heap's free reserve, so that it works on a full arena,
			// as on ext4 (which edits its attribute block in place).
			err = fs.h.UsingReserve(alloc)
		} else {
			err = alloc()
		}
		if err != nil {
			return err
		}
		copy(fs.a.Bytes(off, uint64(len(b))), b) // fresh: unlogged
	}
	in.set64(tx, iXattr, uint64(off))
	if old != 0 {
		return fs.h.Free(tx, old)
	}
	return nil
}

// GetXattr returns the full value of an attribute (the caller applies the
// size of the user's buffer: ERANGE is fusefs's business).
func (fs *FS) GetXattr(ino Ino, name string) ([]byte, error) {
	if err := checkXattrName(name); err != nil {
		return nil, err
	}
	var v []byte
	err := fs.read(func() error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		if !userXattrAllowed(in, name) {
			return ErrNoData
		}
		es, err := fs.xattrs(in)
		if err != nil {
			return err
		}
		for _, e := range es {
			if e.name == name {
				v = e.value
				return nil
			}
		}
		return ErrNoData
	})
	return v, err
}

// ListXattr returns the names of all attributes. ErrXattr2Big if the list
// would exceed MaxXattrList bytes (NUL-terminated names).
func (fs *FS) ListXattr(ino Ino) ([]string, error) {
	var names []string
	err := fs.read(func() error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		es, err := fs.xattrs(in)
		if err != nil {
			return err
		}
		for _, e := range es {
			names = append(names, e.name)
		}
		if listSize(es) > MaxXattrList {
			return ErrXattr2Big // made by an older version, which allowed it
		}
		return nil
	})
	return names, err
}

// SetXattr creates or replaces an attribute; flags XattrCreate (ErrExists
// if present) and XattrReplace (ErrNoData if absent). Sets ctime, unless
// the attribute has this value already (as on ext4).
func (fs *FS) SetXattr(ino Ino, name string, value []byte, flags uint32) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	if flags&^(XattrCreate|XattrReplace) != 0 {
		return ErrInvalid
	}
	if len(value) > MaxXattrValue {
		return ErrXattr2Big
	}
	return fs.editXattrs(ino, name, func(es []xattrEntry, i int) ([]xattrEntry, error) {
		switch {
		case i >= 0 && flags&XattrCreate != 0:
			return nil, ErrExists
		case i < 0 && flags&XattrReplace != 0:
			return nil, ErrNoData
		case i >= 0 && bytes.Equal(es[i].value, value):
			// The value it has: nothing is stored and ctime stays, as on
			// ext4 (ext4_xattr_value_same).
			return nil, errXattrSame
		case i >= 0:
			es[i].value = value
		case listSize(es)+len(name)+1 > MaxXattrList:
			// A name list longer than listxattr(2) can return would
			// leave the attributes unlistable (E2BIG) to every tool
			// that copies them; refuse the name instead, as ext4 does
			// when its attribute block is full.
			return nil, ErrNoSpace
		default:
			es = append(es, xattrEntry{name: name, value: value})
		}
		return es, nil
	})
}

// listSize is the length of the NUL-terminated name list of es.
func listSize(es []xattrEntry) int {
	n := 0
	for _, e := range es {
		n += len(e.name) + 1
	}
	return n
}

// RemoveXattr deletes an attribute (ErrNoData if absent). Sets ctime.
func (fs *FS) RemoveXattr(ino Ino, name string) error {
	if err := checkXattrName(name); err != nil {
		return err
	}
	return fs.editXattrs(ino, name, func(es []xattrEntry, i int) ([]xattrEntry, error) {
		if i < 0 {
			return nil, ErrNoData
		}
		return append(es[:i], es[i+1:]...), nil
	})
}

// errXattrSame, from an edit, leaves the list and ctime as they are.
var errXattrSame = errors.New("conquest: xattr value unchanged")

// editXattrs runs edit on ino's attribute list in one transaction (i is the
// index of name, or -1), stores the list it returns and sets ctime. It
// refuses user.* names where ext4 does (ErrPerm).
func (fs *FS) editXattrs(ino Ino, name string, edit func(es []xattrEntry, i int) ([]xattrEntry, error)) error {
	return fs.write(func(tx *pram.Tx, now Timespec) error {
		in, err := fs.inode(ino)
		if err != nil {
			return err
		}
		if !userXattrAllowed(in, name) {
			return ErrPerm
		}
		es, err := fs.xattrs(in)
		if err != nil {
			return err
		}
		if es, err = edit(es, xattrIndex(es, name)); err == errXattrSame {
			return nil
		} else if err != nil {
			return err
		}
		if err := fs.putXattrs(tx, in, es); err != nil {
			return err
		}
		in.setTime(tx, iCtime, now)
		return nil
	})
}

func xattrIndex(es []xattrEntry, name string) int {
	for i, e := range es {
		if e.name == name {
			return i
		}
	}
	return -1
}
