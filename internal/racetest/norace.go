//go:build !race

package racetest

// Enabled reports whether the binary was built with the race detector.
const Enabled = false
