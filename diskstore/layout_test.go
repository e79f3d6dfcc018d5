package diskstore

import "testing"

// TestLayoutPinned pins the stored formats: changing any of these numbers
// changes the format of existing disks and arenas and needs a new version.
func TestLayoutPinned(t *testing.T) {
	pins := []struct {
		name      string
		got, want int
	}{
		{"SuperSize", SuperSize, 56},
		{"superOffVersion", superOffVersion, 8},
		{"superOffBlockSize", superOffBlockSize, 12},
		{"superOffUUID", superOffUUID, 16},
		{"superOffBlocks", superOffBlocks, 32},
		{"superOffCreated", superOffCreated, 40},
		{"superOffChecksum", superOffChecksum, 48},
		{"xlistHeaderSize", xlistHeaderSize, 32},
		{"xhDir", xhDir, 0},
		{"xhNLeaves", xhNLeaves, 8},
		{"xhDirCap", xhDirCap, 12},
		{"xhCount", xhCount, 16},
		{"xhWords", xhWords, 24},
		{"dirEntrySize", dirEntrySize, 16},
		{"leafHeaderSize", leafHeaderSize, 16},
		{"minLeafBytes", minLeafBytes, 128},
		{"maxLeafBytes", maxLeafBytes, 4096},
		{"maxDirEntries", maxDirEntries, 4096},
		{"freeMapSize", freeMapSize, 128},
		{"fmOffBlockSize", fmOffBlockSize, 8},
		{"fmOffBlocks", fmOffBlocks, 16},
		{"fmOffFree", fmOffFree, 24},
		{"fmOffList", fmOffList, 32},
		{"statsSize", statsSize, 64},
		{"stOffFiles", stOffFiles, 8},
		{"stOffChecksumEr", stOffChecksumEr, 16},
		{"stOffIOErr", stOffIOErr, 24},
		{"stOffEpoch", stOffEpoch, 32},
		{"stOffQuarantined", stOffQuarantined, 40},
		{"stOffIntents", stOffIntents, 48},
		{"intentSlots", intentSlots, 16},
		{"intentWords", intentWords, 5},
		{"intentSize", intentSize, 656},
		{"fmOffUnsynced", fmOffUnsynced, 64},
		{"fmOffQuarantine", fmOffQuarantine, 96},
		{"slOffUnsynced", slOffUnsynced, 96},
		{"unsyncedWords", unsyncedWords, 5},
		{"unsyncedFWords", unsyncedFWords, 1},
		{"quarantineWords", quarantineWords, 3},
		{"segListSize", segListSize, 128},
		{"slOffOwner", slOffOwner, 8},
		{"slOffSeed", slOffSeed, 16},
		{"slOffBlocks", slOffBlocks, 24},
		{"slOffSegs", slOffSegs, 32},
		{"slOffSums", slOffSums, 64},
		{"segWords", segWords, 3},
		{"sumWordsPlain", sumWordsPlain, 3},
		{"sumWordsChecked", sumWordsChecked, 4},
		{"sumFormatChecked", sumFormatChecked, 2},
		{"sumsPerPage", sumsPerPage, 512},
		{"RootFreeMap", RootFreeMap, 5},
		{"RootStats", RootStats, 6},
		{"ParamThreshold", ParamThreshold, 0},
		{"ParamBlockSize", ParamBlockSize, 1},
		{"ParamDiskBlocks", ParamDiskBlocks, 2},
	}
	for _, p := range pins {
		if p.got != p.want {
			t.Errorf("%s = %d, pinned at %d", p.name, p.got, p.want)
		}
	}
	if DiskMagic != "CONQDISK" || DiskVersion != 1 {
		t.Errorf("disk magic %q version %d", DiskMagic, DiskVersion)
	}
	// Headers fit their allocations.
	if slOffSums+xlistHeaderSize > slOffUnsynced || slOffUnsynced+xlistHeaderSize > segListSize ||
		fmOffList+xlistHeaderSize > fmOffUnsynced || fmOffUnsynced+xlistHeaderSize > fmOffQuarantine ||
		fmOffQuarantine+xlistHeaderSize > freeMapSize || stOffQuarantined+8 > statsSize {
		t.Error("header overflows its allocation")
	}
	for _, m := range []uint64{freeMapMagic, statsMagic, segListMagic} {
		if m == 0 {
			t.Error("zero magic")
		}
	}
}
