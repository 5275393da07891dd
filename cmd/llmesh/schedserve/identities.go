package schedserve

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

// identitiesFile reloads the identities file into a serving Service.
// reload is called by the file watcher's goroutine and the hangup
// goroutine; mu serialises it and guards last.
type identitiesFile struct {
	path    string
	initial *identity.Set
	svc     *server.Service
	log     io.Writer

	mu   sync.Mutex
	last [sha256.Size]byte // the file's bytes as last loaded
}

// openIdentities reads path (and loads it when initial is nil).
func openIdentities(path string, initial *identity.Set, log io.Writer) (*identitiesFile, error) {
	f := &identitiesFile{path: path, initial: initial, log: log}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("identities: %w", err)
	}
	f.last = sha256.Sum256(b)
	if f.initial == nil {
		if f.initial, err = identity.Load(path); err != nil {
			return nil, err
		}
	}
	return f, nil
}

// serve makes svc the service reloads go to; call it before the watcher
// and hangup goroutines start. A nil f does nothing.
func (f *identitiesFile) serve(svc *server.Service) {
	if f != nil {
		f.svc = svc
	}
}

// reload reads the identities file again and puts it in place; unless
// force, only when its bytes changed. An invalid file is logged and the
// running identities stay.
func (f *identitiesFile) reload(force bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if err == nil && len(bytes.TrimSpace(b)) == 0 {
		// Writers truncate before writing: most likely a write in progress.
		err = fmt.Errorf("identities: %s is empty", f.path)
	}
	if err != nil {
		fmt.Fprintf(f.log, "scheduler: identities change rejected; keeping the running identities: %v\n", err)
		return
	}
	h := sha256.Sum256(b)
	if h == f.last && !force {
		return
	}
	set, err := identity.Load(f.path)
	if err != nil {
		fmt.Fprintf(f.log, "scheduler: identities change rejected; keeping the running identities: %v\n", err)
		return
	}
	f.last = h
	closed, err := f.svc.ReplaceIdentities(set)
	if err != nil {
		fmt.Fprintf(f.log, "scheduler: identities change rejected: %v\n", err)
		return
	}
	fmt.Fprintf(f.log, "scheduler: identities reloaded from %s: %d identities; %d session(s) closed\n", f.path, len(set.All()), closed)
}
