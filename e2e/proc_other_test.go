//go:build !linux

package e2e

import "os/exec"

// setDeathSignal is Linux-only; elsewhere cleanup alone stops the children.
func setDeathSignal(*exec.Cmd) {}
