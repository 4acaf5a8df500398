//go:build race

package cluster

// raceEnabled reports whether this test binary was built with -race.
const raceEnabled = true
