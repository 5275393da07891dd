package gateway

import (
	"log/slog"
	"maps"
	"net/http"
	"strconv"
	"sync"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/internal/adminapi"
)

// Experiments keeps the mesh config a gateway runs: the file's config with
// the active-arm switches made through the admin API applied, the same way
// `llmesh control` does for Envoy. A switch survives file reloads until it
// is cleared or the file drops the experiment or arm.
//
// Its mutex serialises every change (file reloads from the config
// watcher's goroutine, switches from admin requests), so apply sees them
// one at a time.
type Experiments struct {
	mu        sync.Mutex
	file      *config.Config
	cur       *config.Config
	overrides map[string]string // experiment → arm set through the admin API
	seq       int
	apply     func(c *config.Config, scheduler bool) error
	log       *slog.Logger
}

// NewExperiments starts from the file config c, which the host already
// runs. apply makes an effective config current; scheduler is true when
// the scheduler settings may have changed (a file change), false for an
// arm switch, which changes routing only. A nil log means slog.Default().
func NewExperiments(c *config.Config, apply func(c *config.Config, scheduler bool) error, log *slog.Logger) *Experiments {
	if log == nil {
		log = slog.Default()
	}
	return &Experiments{file: c, cur: c, overrides: map[string]string{}, seq: 1, apply: apply, log: log}
}

// Version counts the configs applied: "1" at start, one more per file
// change or switch.
func (e *Experiments) Version() string {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strconv.Itoa(e.seq)
}

// Config is the effective config (file plus switches).
func (e *Experiments) Config() *config.Config {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.cur
}

// FileChanged applies a new, valid file config with the standing switches.
// On error nothing changes.
func (e *Experiments) FileChanged(c *config.Config) error {
	e.mu.Lock()
	defer e.mu.Unlock()
	next, lapsed := c.WithActiveArms(e.overrides)
	keep := map[string]string{}
	for exp, arm := range e.overrides {
		if err := lapsed[exp]; err != nil {
			// The file no longer has this experiment or arm: the switch
			// lapses rather than blocking every later change.
			e.log.Warn("dropping the active-arm switch", "experiment", exp, "arm", arm, "err", err)
			continue
		}
		keep[exp] = arm
	}
	if err := e.apply(next, true); err != nil {
		return err
	}
	e.file, e.cur, e.overrides = c, next, keep
	e.seq++
	return nil
}

// SetActiveArm makes arm of experiment exp take all traffic ("" splits by
// headers and weights again, overriding the file's active field) and
// returns the new version. Requests in flight finish on their arm.
func (e *Experiments) SetActiveArm(exp, arm string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	next, err := e.cur.WithActiveArm(exp, arm)
	if err != nil {
		return "", err
	}
	if err := e.apply(next, false); err != nil {
		return "", err
	}
	e.cur = next
	e.overrides[exp] = arm
	e.seq++
	e.log.Info("experiment arm switched", "experiment", exp, "arm", arm)
	return strconv.Itoa(e.seq), nil
}

// ClearActiveArm drops the switch of exp, so the file's active field
// applies again, and returns the version.
func (e *Experiments) ClearActiveArm(exp string) (string, error) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if _, ok := e.overrides[exp]; !ok {
		return strconv.Itoa(e.seq), nil
	}
	others := maps.Clone(e.overrides)
	delete(others, exp)
	next, _ := e.file.WithActiveArms(others)
	if err := e.apply(next, false); err != nil {
		return "", err
	}
	e.cur = next
	delete(e.overrides, exp)
	e.seq++
	return strconv.Itoa(e.seq), nil
}

// ExperimentInfo is one entry of GET /experiments (the shape `llmesh
// control` serves).
type ExperimentInfo = adminapi.ExperimentInfo

// ExperimentList describes every experiment of the effective config.
func (e *Experiments) ExperimentList() (version string, out []ExperimentInfo) {
	e.mu.Lock()
	defer e.mu.Unlock()
	return strconv.Itoa(e.seq), adminapi.Experiments(e.cur, e.overrides)
}

// Register adds the admin endpoints, with the paths and bodies of `llmesh
// control`'s (adminapi.RegisterExperiments). Errors answer 400 with
// {"error": "..."}.
func (e *Experiments) Register(mux *http.ServeMux) {
	adminapi.RegisterExperiments(mux, e, http.StatusBadRequest)
}
