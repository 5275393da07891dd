package e2e

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/llmesh/llmesh/testkit/proctest"
)

var controlAdminRE = regexp.MustCompile(`llmesh control: admin on http://(\S+) `)

// controlVersion is GET /version of `llmesh control`'s admin API.
type controlVersion struct {
	Version   string `json:"version"`
	LastError string `json:"last_error"`
	Rejected  int    `json:"rejected"`
}

// seq is the version's sequence number (versions are "<sequence>-<hash>").
func (v controlVersion) seq(t *testing.T) int {
	t.Helper()
	head, _, ok := strings.Cut(v.Version, "-")
	n, err := strconv.Atoi(head)
	if !ok || err != nil {
		t.Fatalf("control version %q is not <sequence>-<hash>", v.Version)
	}
	return n
}

func getVersion(t *testing.T, admin string) controlVersion {
	t.Helper()
	var v controlVersion
	if err := json.Unmarshal([]byte(proctest.MustGet(t, "http://"+admin+"/version")), &v); err != nil {
		t.Fatalf("control /version: %v", err)
	}
	return v
}

// serverTiming sends one short non-streaming completion through the gateway
// and returns its server-timing header ("" when absent).
func serverTiming(t *testing.T, gw *gatewayProc, model string) string {
	t.Helper()
	body := `{"model":"` + model + `","prompt":"hello","max_tokens":2}`
	client := &http.Client{Timeout: 30 * time.Second}
	resp, err := client.Post(gw.URL()+"/v1/completions", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatalf("completion through the gateway: %v", err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("completion through the gateway: %s", resp.Status)
	}
	return resp.Header.Get("Server-Timing")
}

// TestConfigReload runs a gateway and the control plane on one mesh file and
// rewrites it: a valid change is applied live by both (the gateway starts
// sending server-timing, the control plane publishes a higher version); an
// invalid change is rejected by both, naming the field path, and the last
// good config stays in force.
func TestConfigReload(t *testing.T) {
	sim := startSim(t, "sim")
	m := newMesh(sim)
	path := writeMesh(t, m)

	gw := startGateway(t, "gateway", "--config", path)
	ctl := start(t, "control", "control", "--config", path, "--xds", "127.0.0.1:0", "--admin", "127.0.0.1:0")
	ctlAdmin := ctl.WaitOutput(t, controlAdminRE)[1]
	proctest.WaitHTTP(t, "http://"+ctlAdmin+"/healthz", ctl)

	if st := serverTiming(t, gw, sim.Model); st != "" {
		t.Fatalf("server-timing %q with telemetry.server_timing false", st)
	}
	v0 := getVersion(t, ctlAdmin)
	seq0 := v0.seq(t)

	// A valid change.
	m.ServerTiming, m.TTFT = true, "750ms"
	proctest.Replace(t, path, m.yaml())
	proctest.WaitFor(t, "the gateway to send server-timing after the reload", func() bool {
		return serverTiming(t, gw, sim.Model) != ""
	}, gw.Proc)
	if st := serverTiming(t, gw, sim.Model); !strings.Contains(st, "queue") {
		t.Errorf("server-timing %q: want the queue entry", st)
	}
	// The log line follows the swap on the watcher's goroutine.
	proctest.WaitFor(t, "the gateway to log the reload", func() bool {
		return strings.Contains(gw.Output(), "config reloaded")
	}, gw.Proc)
	var v1 controlVersion
	proctest.WaitFor(t, "control to publish a new version", func() bool {
		v1 = getVersion(t, ctlAdmin)
		return v1.Version != v0.Version
	}, ctl)
	if seq1 := v1.seq(t); seq1 <= seq0 || v1.LastError != "" {
		t.Errorf("control version %s → %s (last_error %q): want a higher sequence and no error", v0.Version, v1.Version, v1.LastError)
	}
	if cfg := proctest.MustGet(t, "http://"+ctlAdmin+"/config"); !strings.Contains(cfg, "750ms") {
		t.Errorf("control /config does not serve the new TTFT SLO:\n%s", cfg)
	}

	// An invalid change, which would also turn server-timing off: it must
	// change nothing.
	bad := m
	bad.ServerTiming, bad.TTFT = false, "-5ms"
	proctest.Replace(t, path, bad.yaml())
	const field = "classes[0].slo.ttft"
	proctest.WaitFor(t, "the gateway to log the rejected field "+field, func() bool {
		return strings.Contains(gw.Output(), field)
	}, gw.Proc)
	var v2 controlVersion
	proctest.WaitFor(t, "control to report the rejected change", func() bool {
		v2 = getVersion(t, ctlAdmin)
		return v2.LastError != ""
	}, ctl)
	if !strings.Contains(v2.LastError, field) || v2.Version != v1.Version || v2.Rejected < 1 {
		t.Errorf("control after an invalid change: %+v; want version %s kept and last_error naming %s", v2, v1.Version, field)
	}
	if st := serverTiming(t, gw, sim.Model); st == "" {
		t.Errorf("the gateway dropped server-timing after an invalid change: the last good config must stay")
	}
	if gw.Exited() || ctl.Exited() {
		t.Fatalf("a process exited after an invalid config (gateway %v, control %v)", gw.Err(), ctl.Err())
	}
}
