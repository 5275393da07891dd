// Package proctest is the harness that llmesh's end-to-end and command tests
// share: it builds Go packages once per test binary, runs processes (and
// in-process servers) for the length of a test, and waits for them to become
// ready by polling — an HTTP endpoint, a line in their output, any
// condition — never by sleeping. Only tests import it.
//
// Everything started here belongs to the test that started it and ends with
// it: Start and Go register a cleanup that stops what they started, waits
// for it, and (Start, ShowOnFailure) prints its output only when the test
// failed. A wait fails at once when a watched process or goroutine ends
// before the condition holds, naming it and its exit error.
//
// Ownership of shared state:
//   - Proc: one goroutine per process waits for it to exit, sets its exit
//     error and closes Done; Err is read only after Done is closed. The
//     process's stdout and stderr are copied by os/exec's goroutines into a
//     Buffer, which serializes those writes with the test goroutine's reads.
//   - Task: one goroutine runs the function and, like a Proc's waiter, sets
//     its error before closing Done; Stop cancels its context and waits.
//   - Builder: its mutex guards the map of finished builds, so parallel tests
//     can ask for the same binary and build it once.
//
// On Linux each child process runs in its own process group with
// Pdeathsig=SIGKILL (sysproc_linux.go): stopping signals the whole group,
// and the kernel kills the child when the test binary dies (a timeout
// panic, SIGKILL). Elsewhere only the child itself is signalled.
package proctest
