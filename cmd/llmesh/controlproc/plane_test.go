package controlproc_test

import (
	"context"
	"encoding/json"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/cmd/llmesh/controlproc"
	"github.com/llmesh/llmesh/control"
	"github.com/llmesh/llmesh/testkit/wait"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func example(t *testing.T) string {
	t.Helper()
	b, err := os.ReadFile("../../../examples/mesh.yaml")
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

func replaceOnce(t *testing.T, s, old, new string) string {
	t.Helper()
	if strings.Count(s, old) != 1 {
		t.Fatalf("%q occurs %d times; update the test to the example", old, strings.Count(s, old))
	}
	return strings.Replace(s, old, new, 1)
}

func version(t *testing.T, admin string) control.VersionInfo {
	t.Helper()
	res, err := http.Get("http://" + admin + "/version")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var vi control.VersionInfo
	if err := json.NewDecoder(res.Body).Decode(&vi); err != nil {
		t.Fatal(err)
	}
	return vi
}

// The config file is watched: a valid change publishes a new version, an
// invalid one is rejected with its field path (shown by the admin server's
// /version) and the old snapshot stays.
func TestPlaneWatchesConfigFile(t *testing.T) {
	src := example(t)
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := controlproc.New(controlproc.Config{ConfigPath: path, Debounce: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	xl, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	al, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- p.Serve(ctx, xl, al) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Serve: %v", err)
		}
	}()
	admin := al.Addr().String()
	wait.Until(t, "the admin server", func() bool {
		res, err := http.Get("http://" + admin + "/healthz")
		if err != nil {
			return false
		}
		res.Body.Close()
		return res.StatusCode == http.StatusOK
	})
	if v := version(t, admin).Version; !strings.HasPrefix(v, "1-") {
		t.Fatalf("first version %q, want 1-…", v)
	}

	changed := replaceOnce(t, src, "endpoints: [127.0.0.1:9000]", "endpoints: [127.0.0.1:9000, 127.0.0.2:9000]")
	if err := os.WriteFile(path, []byte(changed), 0o644); err != nil {
		t.Fatal(err)
	}
	wait.Until(t, "version 2", func() bool { return strings.HasPrefix(p.Server.Version(), "2-") })
	v2 := p.Server.Version()

	bad := replaceOnce(t, changed, "ttft: 500ms", "ttft: -5ms")
	if err := os.WriteFile(path, []byte(bad), 0o644); err != nil {
		t.Fatal(err)
	}
	var vi control.VersionInfo
	wait.Until(t, "rejection reported", func() bool {
		vi = version(t, admin)
		return strings.Contains(vi.LastError, `classes[0].slo.ttft: "-5ms" must be positive`)
	})
	if vi.Version != v2 || vi.Rejected != 1 {
		t.Errorf("after the invalid file: %+v, want version %q kept and 1 rejection", vi, v2)
	}
}

func TestPlaneNeedsConfigFile(t *testing.T) {
	if _, err := controlproc.New(controlproc.Config{}); err == nil || !strings.Contains(err.Error(), "ConfigPath is required") {
		t.Errorf("New without a file: %v", err)
	}
	bad := filepath.Join(t.TempDir(), "bad.yaml")
	if err := os.WriteFile(bad, []byte("pools: [{name: p}]\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := controlproc.New(controlproc.Config{ConfigPath: bad}); err == nil || !strings.Contains(err.Error(), "pools[0]") {
		t.Errorf("New with an invalid file: %v", err)
	}
}
