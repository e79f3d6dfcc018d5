//go:build race

package pram

// raceEnabled: the race detector slows the power-loss runs about fourfold;
// they run fewer seeds.
const raceEnabled = true
