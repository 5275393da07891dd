package main

import (
	"log/slog"
	"os"
	"os/signal"
	"syscall"
)

// SIGHUP. Go's default ends the process on a hangup, which would take a
// gateway, control plane, scheduler service or sim down with every stream
// in flight (a terminal closing, or an operator used to "HUP reloads").
// Every long-running command subscribes before it serves: the gateway
// reloads its config file now (the watcher's own reload path), the others
// log the signal and keep serving (they already apply config file changes
// as the file changes). docs/config.md says what each command does.

// hangups delivers SIGHUP until stop. While it is subscribed the signal
// no longer ends the process; stop ends the subscription (Go's default
// comes back when no one else subscribes).
func hangups() (ch <-chan os.Signal, stop func()) {
	c := make(chan os.Signal, 1)
	signal.Notify(c, syscall.SIGHUP)
	return c, func() { signal.Stop(c) }
}

// logHangups is for commands with nothing to reload on demand: each SIGHUP
// is logged with what the command does instead (why). The goroutine it
// starts belongs to the command: stop ends it and the subscription, and
// returns once it has ended.
func logHangups(log *slog.Logger, why string) (stop func()) {
	ch, unsubscribe := hangups()
	quit, done := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(done)
		for {
			select {
			case <-quit:
				return
			case <-ch:
				log.Info("SIGHUP received; still serving", "reload", why)
			}
		}
	}()
	return func() {
		unsubscribe()
		close(quit)
		<-done
	}
}
