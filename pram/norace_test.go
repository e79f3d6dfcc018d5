//go:build !race

package pram

const raceEnabled = false
