package envoyhost

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
)

// Event is one line the driven host writes: what the filter let through
// to the upstream (Side "upstream": headers after mutation with the
// override host the filter set, data, trailers), what reached the client
// (Side "downstream": headers, data, trailers, reset), the filter's local
// replies (Side "filter"), and Kind "ended" when the stream ended
// (Details: why). Data and header values are raw bytes.
type Event struct {
	Stream       string      `json:"stream"`
	Seq          uint64      `json:"seq"`
	Side         string      `json:"side"`
	Kind         string      `json:"kind"`
	End          bool        `json:"end"`
	Headers      [][2]string `json:"headers"`
	Data         string      `json:"data"`
	Code         int         `json:"code"`
	Details      string      `json:"details"`
	OverrideHost string      `json:"override_host"`
}

// Header returns the first value of name in e.Headers.
func (e Event) Header(name string) string {
	for _, kv := range e.Headers {
		if kv[0] == name {
			return kv[1]
		}
	}
	return ""
}

// Options configure a driven host.
type Options struct {
	// Env is added to the host's environment (the .so reads it too).
	Env []string
	// Files are passed as file descriptors 3, 4, … (exec.Cmd.ExtraFiles).
	Files []*os.File
	// Stderr receives the host's stderr; nil discards it.
	Stderr io.Writer
	// Verbose runs the host with -v (logs and violations on stderr).
	Verbose bool
}

// Driver runs the host in driven mode (envoyhost -i): one process, one Go
// runtime in the .so, for many streams. Steps are the scenario language's
// lines (docs/envoy-testing.md); events come back per stream as they
// happen.
//
// Goroutines: one reader owns the host's stdout and hands each event to
// its stream's channel; wmu serializes writes to stdin; mu guards the
// stream channels and the notes. A write never holds mu: the host may be
// blocked writing events until the reader takes them, and the reader
// takes mu to hand them on.
type Driver struct {
	cmd  *exec.Cmd
	wmu  sync.Mutex
	in   io.WriteCloser
	done chan struct{} // closed when the reader has returned

	mu      sync.Mutex
	streams map[string]chan Event
	notes   []Event
	syncs   map[string]chan struct{}
	nsync   int
	report  []byte
	readErr error
}

// Start runs host -i so.
func Start(host, so string, o Options) (*Driver, error) {
	args := []string{"-i"}
	if o.Verbose {
		args = append(args, "-v")
	}
	cmd := exec.Command(host, append(args, so)...)
	cmd.Env = append(os.Environ(), o.Env...)
	cmd.ExtraFiles = o.Files
	cmd.Stderr = o.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	d := &Driver{cmd: cmd, in: in, done: make(chan struct{}), streams: map[string]chan Event{}, syncs: map[string]chan struct{}{}}
	go d.read(out)
	return d, nil
}

func (d *Driver) read(out io.Reader) {
	defer close(d.done)
	r := bufio.NewReaderSize(out, 1<<16)
	for {
		line, err := r.ReadBytes('\n')
		if len(bytes.TrimSpace(line)) > 0 {
			var e Event
			if jerr := json.Unmarshal(line, &e); jerr != nil {
				d.setErr(fmt.Errorf("host wrote %q: %v", line, jerr))
				continue
			}
			if e.Kind == "report" && e.Stream == "" {
				rest, rerr := io.ReadAll(r)
				d.mu.Lock()
				d.report = rest
				d.mu.Unlock()
				if rerr != nil {
					d.setErr(rerr)
				}
				return
			}
			d.dispatch(e)
		}
		if err != nil {
			if !errors.Is(err, io.EOF) {
				d.setErr(err)
			}
			return
		}
	}
}

func (d *Driver) setErr(err error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.readErr == nil {
		d.readErr = err
	}
}

func (d *Driver) dispatch(e Event) {
	e.Data = bytesOf(e.Data)
	for i := range e.Headers {
		e.Headers[i][1] = bytesOf(e.Headers[i][1])
	}
	d.mu.Lock()
	if e.Stream == "" {
		defer d.mu.Unlock()
		if e.Kind == "sync" {
			if ch := d.syncs[e.Details]; ch != nil {
				close(ch)
				delete(d.syncs, e.Details)
			}
			return
		}
		d.notes = append(d.notes, e)
		return
	}
	ch := d.streams[e.Stream]
	d.mu.Unlock()
	if ch != nil {
		// Only this goroutine sends on it, in the host's order.
		ch <- e
	}
}

// bytesOf undoes the host's JSON escaping of raw bytes (\u00XX).
func bytesOf(s string) string {
	b := make([]byte, 0, len(s))
	for _, r := range s {
		b = append(b, byte(r))
	}
	return string(b)
}

// Send writes steps, one a line.
func (d *Driver) Send(lines ...string) error {
	d.wmu.Lock()
	defer d.wmu.Unlock()
	var b strings.Builder
	for _, l := range lines {
		b.WriteString(l)
		b.WriteByte('\n')
	}
	_, err := io.WriteString(d.in, b.String())
	return err
}

// Config sends the filter config (the plugin_config as JSON).
func (d *Driver) Config(js string) error {
	return d.Send("config <<END_OF_CONFIG", js, "END_OF_CONFIG")
}

// Open creates a stream and returns its events; they stop after the
// "ended" event once Drop was called.
func (d *Driver) Open(name string) (<-chan Event, error) {
	ch := make(chan Event, 512)
	d.mu.Lock()
	if d.streams[name] != nil {
		d.mu.Unlock()
		return nil, fmt.Errorf("stream %s exists", name)
	}
	d.streams[name] = ch
	d.mu.Unlock()
	return ch, d.Send("stream " + name)
}

// Drop forgets an ended stream, here and in the host.
func (d *Driver) Drop(name string) error {
	d.mu.Lock()
	delete(d.streams, name)
	d.mu.Unlock()
	return d.Send("drop " + name)
}

// Sync returns once every step sent before it has run in the host.
func (d *Driver) Sync() error {
	d.mu.Lock()
	d.nsync++
	tok := fmt.Sprint(d.nsync)
	ch := make(chan struct{})
	d.syncs[tok] = ch
	d.mu.Unlock()
	if err := d.Send("sync " + tok); err != nil {
		return err
	}
	select {
	case <-ch:
		return nil
	case <-d.done:
		return errors.New("the host ended")
	}
}

// TakeNotes returns the violation and error lines since the last call.
func (d *Driver) TakeNotes() []Event {
	d.mu.Lock()
	defer d.mu.Unlock()
	n := d.notes
	d.notes = nil
	return n
}

// Close ends stdin, so that the host ends its streams, lets Go finalize
// what it holds and writes its report, which Close returns (the same JSON
// as a scenario run's) with the host's exit status as the error.
func (d *Driver) Close() ([]byte, error) {
	d.wmu.Lock()
	_ = d.in.Close()
	d.wmu.Unlock()
	<-d.done
	err := d.cmd.Wait()
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.readErr != nil {
		err = errors.Join(d.readErr, err)
	}
	return d.report, err
}

// Quote makes s one token of a step: a quoted string with every byte
// outside printable ASCII escaped.
func Quote(s string) string {
	var b strings.Builder
	b.WriteByte('"')
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == '"' || c == '\\':
			b.WriteByte('\\')
			b.WriteByte(c)
		case c < 0x20 || c >= 0x7f:
			fmt.Fprintf(&b, "\\x%02x", c)
		default:
			b.WriteByte(c)
		}
	}
	b.WriteByte('"')
	return b.String()
}
