package schedserve_test

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/cmd/llmesh/schedserve"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/client"
	"github.com/llmesh/llmesh/testkit/proctest"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func mesh(maxInflight, policy string) string {
	return `
pools:
  - name: gpu
    protocol: openai
    endpoints: [127.0.0.1:1]
    capacity: {max_inflight: ` + maxInflight + `}
    scheduler: {policy: ` + policy + `}
classes:
  - {name: default, priority: 0, queue: {max_length: 8}}
`
}

// writeFile replaces path atomically, the way editors and config maps do.
func writeFile(t *testing.T, path, data string) {
	t.Helper()
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, []byte(data), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Rename(tmp, path); err != nil {
		t.Fatal(err)
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	res, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	b, _ := io.ReadAll(res.Body)
	if res.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d %s", url, res.StatusCode, b)
	}
	return string(b)
}

// service is a Run serving on loopback for one test.
type service struct {
	addr  string // the scheduler API
	admin string // the admin server
	log   *proctest.Buffer
	hup   chan os.Signal
}

// start runs c on loopback listeners (and an admin one) until the test
// ends.
func start(t *testing.T, c schedserve.Config) *service {
	t.Helper()
	s := &service{log: &proctest.Buffer{}, hup: make(chan os.Signal, 1)}
	proctest.ShowOnFailure(t, "service log", s.log)
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	admin, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s.admin = admin.Addr().String()
	ready := make(chan string, 1)
	c.Log, c.Admin, c.Hangup = s.log, admin, s.hup
	c.Ready = func(a net.Addr) { ready <- a.String() }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- schedserve.Run(ctx, l, c) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case s.addr = <-ready:
	case err := <-done:
		admin.Close()
		t.Fatalf("Run ended early: %v", err)
	}
	return s
}

func (s *service) metrics(t *testing.T) string { return get(t, "http://"+s.admin+"/metrics") }

func admit(t *testing.T, c *client.Client, class string) (scheduler.Lease, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	return c.Admit(ctx, scheduler.Request{Pool: "gpu", Class: class, PromptTokens: 1, MaxTokens: 1})
}

func newClient(t *testing.T, addr string, o client.Options) *client.Client {
	t.Helper()
	o.Timeout = 2 * time.Second
	c, err := client.New(addr, o)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Close() })
	return c
}

// The admin server serves the service's metrics, the process's and the Go
// runtime's, and /healthz.
func TestRunAdmin(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeFile(t, path, mesh("1", "fifo"))
	s := start(t, schedserve.Config{ConfigPath: path})
	l, err := admit(t, newClient(t, s.addr, client.Options{}), "default")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Release(scheduler.Done)
	body := s.metrics(t)
	for _, want := range []string{
		`llmesh_scheduler_inflight{pool="gpu"} 1`,
		"llmesh_scheduler_service_sessions 1\n",
		"# TYPE process_cpu_seconds_total counter\nprocess_cpu_seconds_total ",
		"# TYPE go_goroutines gauge\n",
	} {
		if !strings.Contains(body, want) {
			t.Errorf("/metrics lacks %q:\n%s", want, body)
		}
	}
	if got := get(t, "http://"+s.admin+"/healthz"); got != "ok\n" {
		t.Errorf("/healthz = %q", got)
	}
	if !strings.Contains(s.log.String(), "scheduler: pool gpu: policy fifo, max_inflight 1\n") {
		t.Errorf("no pool line in the log:\n%s", s.log.String())
	}
}

// The mesh file is watched: a valid change is applied and logged, an
// invalid one is logged with its field and changes nothing, and SIGHUP
// reads the file again.
func TestRunReloadsConfigFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	writeFile(t, path, mesh("1", "fifo"))
	s := start(t, schedserve.Config{ConfigPath: path})

	writeFile(t, path, mesh("2", "fifo"))
	proctest.WaitMatch(t, s.log, regexp.MustCompile(`scheduler: config reloaded; 1 pool\(s\) rebuilt\nscheduler: pool gpu: policy fifo, max_inflight 2\n`))
	wait.Until(t, "the new limit in /metrics", func() bool {
		return strings.Contains(s.metrics(t), `llmesh_scheduler_limit{pool="gpu"} 2`)
	})

	writeFile(t, path, mesh("3", "lottery"))
	proctest.WaitMatch(t, s.log, regexp.MustCompile(`scheduler: config change rejected; keeping the running config: (.*\n)*.*pools\[0\]\.scheduler\.policy`))
	if !strings.Contains(s.metrics(t), `llmesh_scheduler_limit{pool="gpu"} 2`) {
		t.Error("an invalid file changed the running config")
	}

	// SIGHUP reads the file again (here: valid, so applied at once).
	writeFile(t, path, mesh("4", "fifo"))
	s.hup <- syscall.SIGHUP
	proctest.WaitMatch(t, s.log, regexp.MustCompile(`scheduler: SIGHUP received; still serving, reloading the config file and the identities file\n`))
	wait.Until(t, "the limit after SIGHUP", func() bool {
		return strings.Contains(s.metrics(t), `llmesh_scheduler_limit{pool="gpu"} 4`)
	})
}

const identitiesV1 = `identities:
  - name: keep
    token_files: [keep.token]
  - name: gone
    token_files: [gone.token]
`

const identitiesV2 = `identities:
  - name: keep
    token_files: [keep.token]
`

// The identities file is watched and read again at SIGHUP: a session whose
// identity was removed is closed, an invalid file is logged with its field
// and changes nothing, a token file changed on disk is read again without
// a signal though the identities file is as it was, and SIGHUP reads both
// again.
func TestRunReloadsIdentitiesFile(t *testing.T) {
	dir := t.TempDir()
	for name, tok := range map[string]string{"keep.token": "keep-token", "gone.token": "gone-token"} {
		writeFile(t, filepath.Join(dir, name), tok+"\n")
	}
	meshPath, idPath := filepath.Join(dir, "mesh.yaml"), filepath.Join(dir, "identities.yaml")
	writeFile(t, meshPath, mesh("4", "fifo"))
	writeFile(t, idPath, identitiesV1)
	s := start(t, schedserve.Config{ConfigPath: meshPath, IdentitiesPath: idPath})
	keep := newClient(t, s.addr, client.Options{Token: "keep-token"})
	gone := newClient(t, s.addr, client.Options{Token: "gone-token"})
	for name, c := range map[string]*client.Client{"keep": keep, "gone": gone} {
		l, err := admit(t, c, "default")
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		defer l.Release(scheduler.Done)
	}

	writeFile(t, idPath, identitiesV2)
	proctest.WaitMatch(t, s.log, regexp.MustCompile(`scheduler: identities reloaded from \S+: 1 identities; 1 session\(s\) closed\n`))
	if _, err := admit(t, gone, "default"); !errors.Is(err, scheduler.ErrRejected) || !strings.Contains(err.Error(), "belongs to no identity") {
		t.Errorf("gone after the reload: %v, want its token refused", err)
	}

	writeFile(t, idPath, strings.Replace(identitiesV2, "token_files: [keep.token]", "token_files: [keep.token]\n    max_leases: -1", 1))
	proctest.WaitMatch(t, s.log, regexp.MustCompile(`scheduler: identities change rejected; keeping the running identities: .*identities\[0\]\.max_leases: -1 must not be negative`))
	if l, err := admit(t, keep, "default"); err != nil {
		t.Errorf("keep after the invalid file: %v", err)
	} else {
		l.Release(scheduler.Done)
	}

	// The file as it was (the same identities as last loaded: no reload),
	// then keep's token file rotated with no signal: the watch reads it
	// and keep's session, opened with the old token, is closed.
	writeFile(t, idPath, identitiesV2)
	writeFile(t, filepath.Join(dir, "keep.token"), "keep-new\n")
	proctest.WaitMatch(t, s.log, regexp.MustCompile(`scheduler: identities reloaded from \S+: 1 identities; 1 session\(s\) closed\n(.*\n)*.*identities reloaded from \S+: 1 identities; 1 session\(s\) closed\n`))
	if l, err := admit(t, newClient(t, s.addr, client.Options{Token: "keep-new"}), "default"); err != nil {
		t.Errorf("keep with its new token: %v", err)
	} else {
		l.Release(scheduler.Done)
	}

	// SIGHUP reads the files again though nothing changed.
	s.hup <- syscall.SIGHUP
	proctest.WaitMatch(t, s.log, regexp.MustCompile(`SIGHUP received[^\n]*\n(.*\n)*.*identities reloaded from \S+: 1 identities; 0 session\(s\) closed`))
}

// Bad files are errors before anything serves.
func TestRunFileErrors(t *testing.T) {
	dir := t.TempDir()
	good, bad := filepath.Join(dir, "mesh.yaml"), filepath.Join(dir, "bad.yaml")
	writeFile(t, good, mesh("1", "fifo"))
	writeFile(t, bad, mesh("1", "lottery"))
	for _, tc := range []struct {
		name string
		c    schedserve.Config
		want string
	}{
		{"no mesh", schedserve.Config{}, "scheduler server: a mesh config is required"},
		{"invalid mesh", schedserve.Config{ConfigPath: bad}, "pools[0].scheduler.policy"},
		{"missing identities", schedserve.Config{ConfigPath: good, IdentitiesPath: filepath.Join(dir, "none.yaml")}, "scheduler server: identities: "},
	} {
		t.Run(tc.name, func(t *testing.T) {
			l, err := net.Listen("tcp", "127.0.0.1:0")
			if err != nil {
				t.Fatal(err)
			}
			defer l.Close()
			if err := schedserve.Run(context.Background(), l, tc.c); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("Run: %v, want an error with %q", err, tc.want)
			}
		})
	}
}
