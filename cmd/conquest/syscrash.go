package main

import (
	"fmt"
	"strings"

	"conquest/conquest"
)

// checkAfterSystemCrash walks the whole file system before it is served
// when its arena was open when the system went down (pram.Arena.CheckDue:
// a power loss or a kernel crash may have written back only part of the
// arena's pages, which the journal cannot repair). A consistent arena is
// then marked checked and served; a damaged one is refused, and stays
// marked, until `conquest fsck --repair` fixes it. The walk reads metadata
// only: the data blocks written since the disk's last sync were verified by
// Open already (the unsynced list), the rest were synced before.
func checkAfterSystemCrash(fsys *conquest.FS, im images, rep *reporter) error {
	a := fsys.Arena()
	if !a.CheckDue() {
		return nil
	}
	rep.busyf("%s was open when the system went down (a power loss or a kernel crash): checking it before mounting", im.pram)
	errs := fsys.CheckWith(conquest.CheckOptions{})
	if len(errs) > 0 {
		return fmt.Errorf("%s was open when the system went down and is damaged (%s): refusing to mount it; run `conquest fsck --repair %s`",
			im.pram, summarize(errs), imageFlags(im))
	}
	if err := a.ClearCheckDue(); err != nil {
		return fmt.Errorf("%s: recording the check: %w", im.pram, err)
	}
	rep.infof("%s: checked, consistent", im.pram)
	return nil
}

// summarize names the first problems of a check and how many there are.
func summarize(errs []error) string {
	const show = 3
	var parts []string
	for i, e := range errs {
		if i == show {
			parts = append(parts, fmt.Sprintf("and %d more", len(errs)-show))
			break
		}
		parts = append(parts, e.Error())
	}
	return fmt.Sprintf("%d problems: %s", len(errs), strings.Join(parts, "; "))
}

// imageFlags are the --pram and --disk flags naming im, for messages.
func imageFlags(im images) string {
	return fmt.Sprintf("--pram %s --disk %s", im.pram, im.disk)
}
