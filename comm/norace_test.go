//go:build !race

package comm

// raceEnabled shrinks the test matrices under the race detector.
const raceEnabled = false
