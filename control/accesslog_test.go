package control

import (
	"os"
	"testing"

	listener "github.com/envoyproxy/go-control-plane/envoy/config/listener/v3"
	filelog "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	hcm "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	"github.com/envoyproxy/go-control-plane/pkg/resource/v3"
	"github.com/envoyproxy/go-control-plane/pkg/wellknown"
	"github.com/google/go-cmp/cmp"
	"gopkg.in/yaml.v3"
)

// generatedHCM returns the HTTP connection manager of every listener Build
// generates for the example mesh.
func generatedHCM(t *testing.T, res Resources) []*hcm.HttpConnectionManager {
	t.Helper()
	var out []*hcm.HttpConnectionManager
	for _, r := range res[resource.ListenerType] {
		l := r.(*listener.Listener)
		for _, fc := range l.GetFilterChains() {
			for _, f := range fc.GetFilters() {
				if f.GetName() != wellknown.HTTPConnectionManager {
					continue
				}
				m := &hcm.HttpConnectionManager{}
				if err := f.GetTypedConfig().UnmarshalTo(m); err != nil {
					t.Fatalf("listener %s: %v", l.GetName(), err)
				}
				out = append(out, m)
			}
		}
	}
	if len(out) == 0 {
		t.Fatal("no HTTP connection manager generated")
	}
	return out
}

// staticAccessLog reads the access log of envoy-static.yaml's listener: its
// path and JSON format.
func staticAccessLog(t *testing.T) (string, map[string]string) {
	t.Helper()
	data, err := os.ReadFile("../envoy-static.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		StaticResources struct {
			Listeners []struct {
				FilterChains []struct {
					Filters []struct {
						TypedConfig struct {
							AccessLog []struct {
								TypedConfig struct {
									Path      string `yaml:"path"`
									LogFormat struct {
										JSONFormat map[string]string `yaml:"json_format"`
									} `yaml:"log_format"`
								} `yaml:"typed_config"`
							} `yaml:"access_log"`
						} `yaml:"typed_config"`
					} `yaml:"filters"`
				} `yaml:"filter_chains"`
			} `yaml:"listeners"`
		} `yaml:"static_resources"`
	}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	ls := doc.StaticResources.Listeners
	if len(ls) != 1 || len(ls[0].FilterChains) != 1 || len(ls[0].FilterChains[0].Filters) != 1 ||
		len(ls[0].FilterChains[0].Filters[0].TypedConfig.AccessLog) != 1 {
		t.Fatal("envoy-static.yaml: want one listener with one HTTP connection manager and one access log")
	}
	al := ls[0].FilterChains[0].Filters[0].TypedConfig.AccessLog[0].TypedConfig
	return al.Path, al.LogFormat.JSONFormat
}

// TestAccessLogMatchesStatic: listeners served over ADS log the same JSON
// line, with the filter's dynamic metadata, as the static configuration, so
// log consumers see one format whichever way Envoy is configured.
func TestAccessLogMatchesStatic(t *testing.T) {
	wantPath, wantFormat := staticAccessLog(t)
	if wantFormat["class"] != "%DYNAMIC_METADATA(llmesh:class)%" {
		t.Fatalf("envoy-static.yaml access log lacks the filter's class: %v", wantFormat)
	}
	res, err := Build(loadExample(t), BuildOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range generatedHCM(t, res) {
		if len(m.GetAccessLog()) != 1 {
			t.Fatalf("%s: %d access logs, want 1", m.GetStatPrefix(), len(m.GetAccessLog()))
		}
		al := m.GetAccessLog()[0]
		if al.GetName() != wellknown.FileAccessLog {
			t.Errorf("%s: access log %q, want %q", m.GetStatPrefix(), al.GetName(), wellknown.FileAccessLog)
		}
		fl := &filelog.FileAccessLog{}
		if err := al.GetTypedConfig().UnmarshalTo(fl); err != nil {
			t.Fatal(err)
		}
		if err := fl.ValidateAll(); err != nil {
			t.Errorf("%s: %v", m.GetStatPrefix(), err)
		}
		if fl.GetPath() != wantPath {
			t.Errorf("%s: access log path %q, envoy-static.yaml has %q", m.GetStatPrefix(), fl.GetPath(), wantPath)
		}
		got := map[string]string{}
		for k, v := range fl.GetLogFormat().GetJsonFormat().GetFields() {
			got[k] = v.GetStringValue()
		}
		if diff := cmp.Diff(wantFormat, got); diff != "" {
			t.Errorf("%s: access log format differs from envoy-static.yaml (-static +generated):\n%s", m.GetStatPrefix(), diff)
		}
	}
}
