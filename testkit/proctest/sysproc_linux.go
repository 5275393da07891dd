package proctest

import (
	"os/exec"
	"syscall"
)

// setProcAttr puts the child in a process group of its own, so that a stop
// reaches everything it started, and makes the kernel kill it when the
// test binary dies (a panic on timeout, a SIGKILL), so an aborted run
// leaves no engine, gateway or Envoy behind.
func setProcAttr(cmd *exec.Cmd) {
	if cmd.SysProcAttr == nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{}
	}
	cmd.SysProcAttr.Setpgid = true
	cmd.SysProcAttr.Pdeathsig = syscall.SIGKILL
}

// interrupt sends SIGINT to the child's process group.
func interrupt(cmd *exec.Cmd) error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGINT) }

// kill sends SIGKILL to the child's process group.
func kill(cmd *exec.Cmd) error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL) }
