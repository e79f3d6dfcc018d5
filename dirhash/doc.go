// Package dirhash implements Conquest directories: per-directory extendible
// hash tables (Fagin et al., 1979) in the persistent-RAM arena, mapping names
// (1 to MaxName bytes, any byte but '/' and NUL; "." and ".." are refused) to
// an inode number and a DT_* type, with readdir cursors that stay valid while
// the table resizes and across restarts.
//
// # Keys and cursors
//
// Every entry has a 62-bit key: the top 55 bits of HashFunc(name) (farm
// hash), then a 7-bit ordinal, the smallest one not used by another name of
// the directory with the same 55-bit prefix (at most 127 such names;
// another fails with ErrCollision, an alloc.ErrNoSpace). A key never changes
// while its entry exists. Scan returns entries in key order and hands out
// key+1 as the cursor to resume from, so a cursor is a position in key space,
// not in the table: it is < 1<<62 (the FUSE layer adds 2 to reserve 1 and 2
// for "." and ".."), survives every reshaping and restart, and a scan that
// runs while entries come and go returns each entry present throughout
// exactly once.
//
// # Layout (see layout.go)
//
// A root (64 bytes) holds the global depth G, the entry count, counters for
// the consistency walk and the offset of the table: 2^G bucket offsets
// indexed by the top G bits of the key, one allocation up to 2^13 slots and
// above that a top array of 64-KiB leaves (the allocator's largest block is
// 1 MiB), up to G = MaxDepth = 30. A bucket of local depth ld owns an
// aligned run of 2^(G-ld) slots and every key starting with its ld-bit
// prefix. A bucket is a slotted page of 256 B to 4 KiB (24-byte slots
// growing up, names packed down from the end); a page that fills grows to
// the next size, a full 4-KiB bucket splits down to the depth where its keys
// differ (doubling the table as needed; levels in between get empty
// buckets), and where splitting cannot separate its keys (hash
// collisions) or would grow the table past four slots per entry, it gets an
// overflow chain of 4-KiB pages. On delete, empty overflow pages are
// unlinked, short chains collapse, buddies whose entries fit half a page
// merge, sparse pages shrink, and the table halves when no bucket has depth
// G. An empty directory takes 336 bytes of arena (root, one-slot table, one
// 256-B page); with 12-byte names a large one takes 45 to 60 bytes per entry
// (BenchmarkDir reports it).
//
// # Transactions, space and failure
//
// Every store to existing memory goes through the caller's pram.Tx. A
// reshaping step allocates first, writes the fresh pages unlogged (legal:
// the transaction allocated them), then swaps them in with logged table and
// root stores and frees the old pages. So when the arena fills, Insert
// returns an alloc.ErrNoSpace error with the directory's entries unchanged
// (a split already done stays, invisible to readers); aborting the Tx also
// undoes that. Delete never needs space: tidying that would is skipped.
// Each operation's journal use is bounded: splits, doublings, merges and
// halvings go as many levels as needed in one step (so a cascade does not
// reallocate memory the same Tx freed, which the allocator logs in full),
// a page is rewritten in place at most once (4 KiB), and a step that would
// repoint more than 4096 table slots (8 bytes of undo each) chains or skips
// instead. The simulations see at most about 9 KB per operation. Tx methods
// may panic with pram.ErrTxFull; the caller recovers and aborts.
//
// # Concurrency
//
// A Dir is a value and holds no lock. Lookup, Len, Scan and Check may run
// concurrently with each other; the caller (the core's fs.mu) keeps writers
// (Insert, Delete, Replace, Destroy) exclusive.
//
// # Damage
//
// Every offset read from the arena is validated (pram.Arena.InHeap) before
// it is touched, chain walks are bounded, and Scan checks that cursors only
// move forward, so a damaged directory yields ErrCorrupt (Lookup: not found)
// rather than a panic or a loop. Check is the directory's part of the
// consistency walk.
//
// What dirhash must never do: store a Go pointer or a table-position in the
// arena or in a cursor, write existing arena memory except through the Tx,
// know about inodes beyond the number and type it is given, or import unsafe.
package dirhash
