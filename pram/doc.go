// Package pram owns the persistent-RAM arena: a file, a device-DAX character
// device or a block device, mapped shared and writable, and addressed only by
// byte offsets (Off, 0 = nil). The arena holds no Go pointers, so after a
// restart it is used in place: no serialization.
//
// What pram owns:
//   - the mapping (Open, Create, Close) and the advisory lock that keeps one
//     daemon per arena;
//   - for an image file on a disk or an arena on a block device, the RAM
//     copy and its checkpoints (shadow.go, checkpoint.go, slot.go): the
//     arena mapped is a copy of the image in tmpfs, which survives the
//     process, and the image moves from one consistent state to the next
//     only through checkpoint slots (after the arena: in the image file, or
//     in the room Format leaves on the device), so a power loss leaves the
//     last checkpoint, never a torn mix. Every store marks its pages (Bytes,
//     PutU64, the Tx); View is the read-only accessor, and verification
//     mode (verify.go) catches a store that is not marked. Device-DAX,
//     images on tmpfs, and block devices formatted without room for the
//     slots are mapped in place;
//   - the superblock at offset 0: magic, version, UUID, sizes, feature flags,
//     clean/dirty state and a farm-hash checksum (Validate, sentinel errors in
//     errors.go), plus a small array of root slots for the layers above, and
//     the boot ID of the kernel that opened the arena, from which Open tells a
//     crash of the whole system from one of the daemon (boot.go, CheckDue);
//   - the undo journal (Tx): every metadata store goes through a Tx, which
//     records the old bytes before it changes them; Commit drops the record
//     with one 8-byte store, and recovery on the next Open rolls back any Tx
//     that had not committed. This makes each file-system operation atomic
//     with respect to a crash of the daemon at any instruction;
//   - Persist and Sync, the write-ordering points: msync of the range for
//     an arena mapped in place, a checkpoint of every change for a
//     shadowed one;
//   - Reserve, which gives a sparse image file blocks (fallocate) before
//     its pages are first stored to: a store to a page its file system
//     cannot back raises SIGBUS, so a full file system must be an error
//     (ErrNoSpace) before that (reserve.go; the heap calls it as it carves
//     new pages);
//   - faults on the mapping (fault.go): a file truncated under the mount
//     or a memory error raises SIGBUS; goroutines that call GuardFaults
//     get a panic instead, which the layers above recover and hand to
//     Fault. The first fault makes the arena lost: Persist and
//     checkpoints refuse, and Close only releases the mapping (removing a
//     RAM copy, so that the next Open starts from the image's last
//     checkpoint);
//   - read-only opens of images that cannot be written (readonly.go): a
//     private mapping, so that the stores of the layers above never reach
//     the image; only a cleanly closed image opens so.
//
// What pram must never do: interpret the heap (that is package alloc), hold a
// Go pointer inside the arena, let any other package import unsafe, or let
// the image of a shadowed arena hold anything but a checkpointed state. All
// unsafe code is in unsafe.go; turning an offset into memory happens only in
// Arena.Bytes, Arena.View and the word accessors next to them.
//
// Lock order: a checkpoint's ckptMu, then txMu (the open Tx), then loose
// (unlogged stores outside a Tx); the reservation's mutex and the
// shadow's statistics mutex are leaves.
package pram
