package schedserve

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sync"

	"github.com/llmesh/llmesh/scheduler/server"
	"github.com/llmesh/llmesh/scheduler/server/identity"
)

// identitiesFile reloads the identities file, and the token files it
// names, into a serving Service. reload is called by the file watcher's
// goroutine and the hangup goroutine; mu serialises it and guards last
// and files.
type identitiesFile struct {
	path    string
	initial *identity.Set
	svc     *server.Service
	log     io.Writer

	mu    sync.Mutex
	last  [sha256.Size]byte // the Digest of the set last loaded
	files []string          // its token files
}

// openIdentities reads path (and loads it when initial is nil).
func openIdentities(path string, initial *identity.Set, log io.Writer) (*identitiesFile, error) {
	f := &identitiesFile{path: path, initial: initial, log: log}
	set, err := identity.Load(path)
	if err != nil {
		return nil, err
	}
	f.last, f.files = set.Digest(), set.TokenFiles()
	if f.initial == nil {
		f.initial = set
	}
	return f, nil
}

// paths are the files whose change reloads the identities: the file and
// the token files of the identities last loaded.
func (f *identitiesFile) paths() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]string{f.path}, f.files...)
}

// serve makes svc the service reloads go to; call it before the watcher
// and hangup goroutines start. A nil f does nothing.
func (f *identitiesFile) serve(svc *server.Service) {
	if f != nil {
		f.svc = svc
	}
}

// reload reads the identities file and its token files again and puts
// them in place; unless force, only when the file or a token it names
// changed. An invalid file or token file is logged and the running
// identities stay.
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
	set, err := identity.Parse(b, filepath.Dir(f.path))
	if err != nil {
		fmt.Fprintf(f.log, "scheduler: identities change rejected; keeping the running identities: identities: %s: %v\n", f.path, err)
		return
	}
	if set.Digest() == f.last && !force {
		return
	}
	f.last, f.files = set.Digest(), set.TokenFiles()
	closed, err := f.svc.ReplaceIdentities(set)
	if err != nil {
		fmt.Fprintf(f.log, "scheduler: identities change rejected: %v\n", err)
		return
	}
	fmt.Fprintf(f.log, "scheduler: identities reloaded from %s: %d identities; %d session(s) closed\n", f.path, len(set.All()), closed)
}
