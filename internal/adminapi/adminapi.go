// Package adminapi holds the pieces of the admin HTTP API that the xDS
// control plane and the embedded gateway both serve, so that switching an
// experiment's active arm reads and answers the same on either host:
// POST /experiments/{name}/active with {"arm": "<name>"} or ?arm=<name>.
package adminapi

import (
	"encoding/json"
	"errors"
	"io"
	"net/http"

	"github.com/llmesh/llmesh/config"
)

// MaxBody bounds an admin request body.
const MaxBody = 4 << 10

// ArmFromRequest reads the arm from ?arm= or a JSON body {"arm": "..."}
// (at most MaxBody bytes, no other fields). "" is a valid arm: it splits
// traffic again.
func ArmFromRequest(r *http.Request) (string, error) {
	if q := r.URL.Query(); q.Has("arm") {
		return q.Get("arm"), nil
	}
	var body struct {
		Arm *string `json:"arm"`
	}
	dec := json.NewDecoder(io.LimitReader(r.Body, MaxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&body); err != nil {
		return "", errors.New(`body must be {"arm": "<name>"} (or use ?arm=<name>): ` + err.Error())
	}
	if body.Arm == nil {
		return "", errors.New(`arm: required ({"arm": "<name>"}; "" splits traffic again)`)
	}
	return *body.Arm, nil
}

// WriteJSON answers with code and v as indented JSON.
func WriteJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v) // the client is gone
}

// ExperimentInfo is one entry of GET /experiments.
type ExperimentInfo struct {
	Name   string   `json:"name"`
	Pool   string   `json:"pool"`
	Arms   []string `json:"arms"`
	Active string   `json:"active,omitempty"`
	// Switched is true when the active arm was set through the admin API.
	Switched bool `json:"switched"`
}

// Experiments describes every experiment of cfg (the effective config,
// switches applied); switched names the experiments whose active arm was
// set through the admin API.
func Experiments(cfg *config.Config, switched map[string]string) []ExperimentInfo {
	out := make([]ExperimentInfo, 0, len(cfg.Experiments))
	for _, x := range cfg.Experiments {
		ei := ExperimentInfo{Name: x.Name, Pool: x.Pool.Name}
		for _, a := range x.Arms {
			ei.Arms = append(ei.Arms, a.Name)
		}
		if x.Active != nil {
			ei.Active = x.Active.Name
		}
		_, ei.Switched = switched[x.Name]
		out = append(out, ei)
	}
	return out
}
