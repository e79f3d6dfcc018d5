package diskstore

// DefaultThreshold is the default large-file threshold (mkfs
// --large-threshold), stored in arena parameter ParamThreshold.
const DefaultThreshold = 1 << 20

// ToDisk reports whether a file in the arena whose size becomes size must
// move to disk: its size crosses the threshold.
func ToDisk(size int64, threshold uint64) bool { return size > 0 && uint64(size) > threshold }

// ToArena reports whether a large file truncated to size should move back
// into the arena. Only "well below" the threshold (at most half of it): a
// file that shrinks a little and grows again (a log rotated in place, a
// rewritten archive) would otherwise copy itself back and forth across the
// threshold. Moving back is cheap at that size (at most threshold/2 bytes
// copied) and frees a whole disk block for a file that would waste most of
// one.
func ToArena(size int64, threshold uint64) bool { return size >= 0 && uint64(size) <= threshold/2 }
