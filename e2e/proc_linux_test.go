package e2e

import (
	"os/exec"
	"syscall"
)

// setDeathSignal makes the kernel kill the child when the test binary dies
// (a panic on timeout, a SIGKILL), so an aborted run leaves no engine,
// gateway or Prometheus behind.
func setDeathSignal(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
