//go:build race

package main

// The doc tests run the documented commands through a plain build instead
// of this race-instrumented test binary: they check the commands, not the
// data races (the package's own tests do), and run several times faster.
func init() { raceEnabled = true }
