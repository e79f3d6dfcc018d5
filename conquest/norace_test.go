//go:build !race

package conquest

const raceEnabled = false
