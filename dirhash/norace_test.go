//go:build !race

package dirhash

const raceEnabled = false
