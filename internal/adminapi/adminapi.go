// Package adminapi holds the admin HTTP API's experiment endpoints, which
// the xDS control plane and the embedded gateway both serve
// (RegisterExperiments), so that listing experiments and switching an
// active arm read and answer the same on either host.
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

// ArmSwitcher is a host of the experiment endpoints: the control plane or
// the gateway.
type ArmSwitcher interface {
	// ExperimentList returns the config version and every experiment.
	ExperimentList() (version string, list []ExperimentInfo)
	// SetActiveArm makes arm take all of exp's traffic ("" splits again)
	// and returns the new version.
	SetActiveArm(exp, arm string) (version string, err error)
	// ClearActiveArm drops exp's switch and returns the new version.
	ClearActiveArm(exp string) (version string, err error)
}

// RegisterExperiments serves s's experiments on mux:
//
//	GET    /experiments                  {"version", "experiments": [ExperimentInfo]}
//	POST   /experiments/{name}/active    body {"arm": "x"} or ?arm=x; "" splits again → {"version"}
//	DELETE /experiments/{name}/active    the file's active field applies again → {"version"}
//
// A bad body or a switch s refuses answers 400 with {"error": "..."}; a
// DELETE that s fails to apply answers clearFailed (the host says whether
// that is the client's doing).
func RegisterExperiments(mux *http.ServeMux, s ArmSwitcher, clearFailed int) {
	mux.HandleFunc("GET /experiments", func(w http.ResponseWriter, _ *http.Request) {
		v, list := s.ExperimentList()
		WriteJSON(w, http.StatusOK, map[string]any{"version": v, "experiments": list})
	})
	mux.HandleFunc("POST /experiments/{name}/active", func(w http.ResponseWriter, r *http.Request) {
		arm, err := ArmFromRequest(r)
		if err == nil {
			var v string
			if v, err = s.SetActiveArm(r.PathValue("name"), arm); err == nil {
				WriteJSON(w, http.StatusOK, map[string]string{"version": v})
				return
			}
		}
		WriteJSON(w, http.StatusBadRequest, map[string]string{"error": err.Error()})
	})
	mux.HandleFunc("DELETE /experiments/{name}/active", func(w http.ResponseWriter, r *http.Request) {
		v, err := s.ClearActiveArm(r.PathValue("name"))
		if err != nil {
			WriteJSON(w, clearFailed, map[string]string{"error": err.Error()})
			return
		}
		WriteJSON(w, http.StatusOK, map[string]string{"version": v})
	})
}
