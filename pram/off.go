package pram

// Off is a byte offset into the arena. The zero Off is nil: offset 0 is the
// superblock and is never handed out by an allocator.
type Off uint64

// PageSize is the arena's unit of layout: the superblock, the journal and the
// heap start on page boundaries.
const PageSize = 4096

// IsNil reports whether o is the nil offset.
func (o Off) IsNil() bool { return o == 0 }

// Add returns o advanced by n bytes.
func (o Off) Add(n uint64) Off { return o + Off(n) }
