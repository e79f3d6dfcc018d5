package pram

import (
	"encoding/hex"
	"os"
	"strings"
)

// A daemon crash leaves the arena's pages in the kernel's page cache, in the
// RAM copy's tmpfs (shadow.go) or in the device itself (DAX), so every store
// made before it is still there, and the journal can roll back the one
// transaction it interrupted. A crash of the whole system (a power loss, a
// kernel panic) is different for an arena mapped in place on a disk file or
// a block device: the kernel writes a shared mapping back on its own
// schedule and in any order, so whatever it had not written since the last
// Persist is lost, possibly half of a transaction and its journal record
// with it. The journal cannot tell; a full consistency walk can. A
// shadowed arena comes back as its last checkpoint, consistent; it is
// walked all the same (a disk that lied about a flush can still tear it).
//
// So the superblock records the boot ID of the kernel that opened the arena
// (offBoot). An Open that finds the arena dirty (not closed) and the boot ID
// changed knows the system went down while the arena was open, and marks a
// full check due (offCheckDue). The mark stays until the layers above have
// walked the arena and found it consistent (or repaired it) and call
// ClearCheckDue: a mount that refuses a damaged arena leaves it for the next
// mount, or fsck, to see. An arena whose recorded boot ID is zero (formatted
// before it was recorded) or a kernel without a boot ID concludes nothing.

// bootIDPath is the kernel's random ID of the current boot (tests replace it).
var bootIDPath = "/proc/sys/kernel/random/boot_id"

// bootID is the current boot's ID, or zeros when it cannot be read.
func bootID() (id [16]byte) {
	b, err := os.ReadFile(bootIDPath)
	if err != nil {
		return id
	}
	s := strings.ReplaceAll(strings.TrimSpace(string(b)), "-", "")
	if len(s) != 32 {
		return id
	}
	if _, err := hex.Decode(id[:], []byte(s)); err != nil {
		return [16]byte{}
	}
	return id
}

// noteBoot is Open's part: it marks a check due when the system went down
// while the arena was open, and records the current boot.
// Preconditions: a.dirty is set; called before the superblock is persisted.
func (a *Arena) noteBoot() {
	var prev [16]byte
	copy(prev[:], a.m[offBoot:offBoot+16])
	cur := bootID()
	if a.dirty && prev != ([16]byte{}) && cur != ([16]byte{}) && prev != cur {
		a.PutU64(offCheckDue, checkDueCrash)
	}
	if cur != ([16]byte{}) {
		copy(a.Bytes(offBoot, 16), cur[:])
	}
}

// The check-due word's values: 0 none, else why a full check is due.
const (
	checkDueCrash  = 1 // open when the system went down (noteBoot)
	checkDueDamage = 2 // the layers above met damage while it was open (MarkDamaged)
)

// CheckDue reports that the arena was open when the system went down (a
// power loss or a kernel crash, not just the daemon's), so it may hold a
// torn update that the journal cannot roll back, or that the layers above
// found it damaged while it was open (MarkDamaged): it must pass a full
// consistency check before it is used. The mark survives Close.
func (a *Arena) CheckDue() bool { return a.U64(offCheckDue) != 0 }

// DamageSeen reports that the check is due because of MarkDamaged, not a
// system crash.
func (a *Arena) DamageSeen() bool { return a.U64(offCheckDue) == checkDueDamage }

// MarkDamaged records that an operation met damage in the arena while it
// was open (a corrupt structure, a wild offset), so that the next open
// checks it in full before use (CheckDue), as ext4 records an error for
// e2fsck to check at the next boot. A system crash's mark stays as it is.
// The layers above call it before Close, which persists it.
func (a *Arena) MarkDamaged() {
	if a.U64(offCheckDue) == 0 {
		a.PutU64(offCheckDue, checkDueDamage)
	}
}

// ClearCheckDue records that a full check found the arena consistent (or it
// was repaired), and persists that.
func (a *Arena) ClearCheckDue() error {
	a.PutU64(offCheckDue, 0)
	return a.Persist(0, PageSize)
}
