package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"testing"

	"github.com/llmesh/llmesh/testkit/proctest"
)

func TestControlFlags(t *testing.T) {
	wantUsage(t, mainErr("control", "--xds", "nonsense", "--xds-key", "k", "--xds-client-ca", "ca", "extra"),
		"--config: required", `--xds: "nonsense"`, "unexpected arguments", "--xds-cert and --xds-key", "--xds-client-ca: needs")
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

var controlAdminRE = regexp.MustCompile(`admin on (http://127\.0\.0\.1:\d+)`)

func TestControlServes(t *testing.T) {
	s := serve(t, "control", "--config", "../../examples/mesh.yaml", "--xds", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	admin := proctest.WaitMatch(t, &s.stdout, controlAdminRE, s)[1]
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
	if err := s.Stop(); err != nil {
		t.Errorf("control: %v", err)
	}
}
