package conquest

import (
	"fmt"
	"strings"
)

// CrashDamageError is Open's refusal of a file system whose arena was open
// when the system went down and that the check found damaged
// (Options.OnCrashCheck). It wraps ErrCorrupt; `conquest fsck --repair`
// repairs it and clears the arena's check-due mark.
type CrashDamageError struct {
	Problems []error // what the check found
	// Damage: the check was due because an operation met damage while
	// the arena was mounted (pram.Arena.MarkDamaged), not a system crash.
	Damage bool
}

func (e *CrashDamageError) Error() string {
	const show = 3
	var parts []string
	for i, p := range e.Problems {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(e.Problems)-show))
			break
		}
		parts = append(parts, p.Error())
	}
	n := fmt.Sprintf("%d problems", len(e.Problems))
	if len(e.Problems) == 1 {
		n = "1 problem"
	}
	return fmt.Sprintf("%s and is damaged: %s: %s", dueWhy(e.Damage), n, strings.Join(parts, "; "))
}

func (e *CrashDamageError) Unwrap() error { return ErrCorrupt }

// crashCheck is Open's walk of an arena that was open when the system went
// down (pram/boot.go explains why the journal cannot be trusted then). It
// reads metadata only: the data blocks written since the disk's last sync
// were verified by the store's Open (the unsynced list), and the rest were
// synced before. A consistent file system has its mark cleared; a damaged
// one keeps it, so every later mount refuses it too until fsck repairs it.
func (fs *FS) crashCheck(begin func(msg string)) error {
	damage := fs.a.DamageSeen()
	begin(dueWhy(damage) + ": checking it before use")
	if errs := fs.CheckWith(CheckOptions{crashed: true}); len(errs) > 0 {
		return &CrashDamageError{Problems: errs, Damage: damage}
	}
	if err := fs.a.ClearCheckDue(); err != nil {
		return fmt.Errorf("recording the check: %w", err)
	}
	return nil
}

// dueWhy says why a full check is due (pram.Arena.CheckDue): damage met
// while mounted, or a system crash.
func dueWhy(damage bool) string {
	if damage {
		return "met damage while it was mounted (an operation found its structures corrupt)"
	}
	return "was open when the system went down (a power loss or a kernel crash)"
}

// CheckDueWhy says why the arena's full check is due, for fsck.
func (fs *FS) CheckDueWhy() string { return dueWhy(fs.a.DamageSeen()) }
