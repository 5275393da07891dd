package proctest

import (
	"io"
	"net"
	"sync"
	"testing"
)

// Killable is a TCP forwarder in front of an engine's listener, so that a
// test can make the engine look dead from the network the way a killed
// process does: Kill closes the port (new connections are refused) and
// every open connection through it at once.
//
// Goroutines: one accepts, two per connection copy; mu guards conns and
// dead; Kill waits for all of them.
type Killable struct {
	// Reset makes Kill reset the open connections (RST, as a dying
	// process's kernel sends for unread data) instead of closing them.
	Reset bool

	ln     net.Listener
	target string
	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	dead   bool
	wg     sync.WaitGroup
}

// NewKillable forwards a new loopback port to target until Kill or the
// end of the test.
func NewKillable(t testing.TB, target string) *Killable {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	k := &Killable{ln: ln, target: target, conns: map[net.Conn]struct{}{}}
	k.wg.Add(1)
	go k.accept()
	t.Cleanup(k.Kill)
	return k
}

// Addr is the forwarder's host:port.
func (k *Killable) Addr() string { return k.ln.Addr().String() }

func (k *Killable) accept() {
	defer k.wg.Done()
	for {
		c, err := k.ln.Accept()
		if err != nil {
			return
		}
		up, err := net.Dial("tcp", k.target)
		if err != nil {
			c.Close()
			continue
		}
		if !k.track(c, up) {
			return
		}
		k.wg.Add(2)
		go k.pipe(c, up)
		go k.pipe(up, c)
	}
}

// track registers cs, or closes them when the forwarder is dead.
func (k *Killable) track(cs ...net.Conn) bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.dead {
		for _, c := range cs {
			c.Close()
		}
		return false
	}
	for _, c := range cs {
		k.conns[c] = struct{}{}
	}
	return true
}

func (k *Killable) pipe(dst, src net.Conn) {
	defer k.wg.Done()
	_, _ = io.Copy(dst, src)
	dst.Close()
	src.Close()
}

// Kill closes the port and every connection through it, then waits for
// the forwarder's goroutines. Calling it again does nothing more.
func (k *Killable) Kill() {
	k.mu.Lock()
	if !k.dead {
		k.dead = true
		k.ln.Close()
		for c := range k.conns {
			if tc, ok := c.(*net.TCPConn); ok && k.Reset {
				tc.SetLinger(0)
			}
			c.Close()
		}
	}
	k.mu.Unlock()
	k.wg.Wait()
}
