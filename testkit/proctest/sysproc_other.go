//go:build !linux

package proctest

import (
	"os"
	"os/exec"
)

// setProcAttr is Linux-only (process group, death signal); elsewhere the
// cleanups alone stop the children.
func setProcAttr(*exec.Cmd) {}

// interrupt sends the child os.Interrupt.
func interrupt(cmd *exec.Cmd) error { return cmd.Process.Signal(os.Interrupt) }

// kill kills the child.
func kill(cmd *exec.Cmd) error { return cmd.Process.Kill() }
