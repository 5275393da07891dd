package main

import "testing"

// TestSimQuirksFlag: an unknown quirk is a usage error naming it, with the
// flag, before anything listens.
func TestSimQuirksFlag(t *testing.T) {
	wantUsage(t, mainErr("sim", "--listen", "127.0.0.1:0", "--quirks", "grpc-no-usage,bogus"), "--quirks", `"bogus"`, "grpc-no-usage")
}
