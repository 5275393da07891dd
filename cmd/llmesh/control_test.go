package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

func TestControlFlags(t *testing.T) {
	var out, errOut bytes.Buffer
	err := Main(context.Background(), []string{"control", "--xds", "nonsense", "--xds-key", "k", "--xds-client-ca", "ca", "extra"}, &out, &errOut)
	var ec *exitCode
	if !errors.As(err, &ec) || ec.code != 2 {
		t.Fatalf("err = %v, want exit code 2", err)
	}
	for _, want := range []string{"--config: required", `--xds: "nonsense"`, "unexpected arguments", "--xds-cert and --xds-key", "--xds-client-ca: needs"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %q", err, want)
		}
	}
}

func TestControlDump(t *testing.T) {
	var out, errOut bytes.Buffer
	if err := Main(context.Background(), []string{"control", "--config", "../../examples/mesh.yaml", "--dump"}, &out, &errOut); err != nil {
		t.Fatal(err)
	}
	var res map[string][]json.RawMessage
	if err := json.Unmarshal(out.Bytes(), &res); err != nil {
		t.Fatalf("dump is not JSON: %v", err)
	}
	if len(res["Listener"]) != 1 || len(res["Cluster"]) != 4 {
		t.Errorf("dump has %d listeners, %d clusters", len(res["Listener"]), len(res["Cluster"]))
	}
}

// syncBuffer is an io.Writer the command writes while the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

func TestControlServes(t *testing.T) {
	var out, errOut syncBuffer
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Main(ctx, []string{"control", "--config", "../../examples/mesh.yaml", "--xds", "127.0.0.1:0", "--admin", "127.0.0.1:0"}, &out, &errOut)
	}()
	adminRE := regexp.MustCompile(`admin on (http://127\.0\.0\.1:\d+)`)
	var admin string
	deadline := time.Now().Add(30 * time.Second)
	for admin == "" {
		if m := adminRE.FindStringSubmatch(out.String()); m != nil {
			admin = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("control exited early: %v\n%s", err, errOut.String())
		default:
		}
		if time.Now().After(deadline) {
			t.Fatalf("no admin address in output:\n%s\n%s", out.String(), errOut.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
	resp, err := http.Get(admin + "/version")
	if err != nil {
		t.Fatal(err)
	}
	var v struct{ Version string }
	err = json.NewDecoder(resp.Body).Decode(&v)
	resp.Body.Close()
	if err != nil || !strings.HasPrefix(v.Version, "1-") {
		t.Errorf("/version: %+v %v", v, err)
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("control: %v", err)
	}
}
