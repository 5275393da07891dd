package envoy_test

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	xdstype "github.com/cncf/xds/go/xds/type/v3"
	golang "github.com/envoyproxy/go-control-plane/contrib/envoy/extensions/filters/http/golang/v3alpha"
	bootstrap "github.com/envoyproxy/go-control-plane/envoy/config/bootstrap/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/access_loggers/file/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/router/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/network/http_connection_manager/v3"
	_ "github.com/envoyproxy/go-control-plane/envoy/extensions/upstreams/http/v3"
	"google.golang.org/protobuf/encoding/protojson"
	"google.golang.org/protobuf/proto"
	"google.golang.org/protobuf/reflect/protoreflect"
	"google.golang.org/protobuf/types/known/anypb"
	"gopkg.in/yaml.v3"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/envoyfilter"
	"github.com/llmesh/llmesh/testkit/fakesdk"
)

// loadBootstrap reads a YAML bootstrap into the Envoy proto the way Envoy
// does (YAML → JSON → proto, Anys resolved by type URL) and validates it
// with the generated protoc-gen-validate rules.
func loadBootstrap(t *testing.T, path string) *bootstrap.Bootstrap {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc interface{}
	if err := yaml.Unmarshal(data, &doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	js, err := json.Marshal(doc)
	if err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	var b bootstrap.Bootstrap
	if err := (protojson.UnmarshalOptions{}).Unmarshal(js, &b); err != nil {
		t.Fatalf("%s: not an Envoy v3 bootstrap: %v", path, err)
	}
	if err := b.ValidateAll(); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return &b
}

// validateDeep unpacks every google.protobuf.Any below m and validates the
// message inside (ValidateAll does not look into Anys), calling visit for
// each.
func validateDeep(t *testing.T, m protoreflect.Message, path string, visit func(path string, inner proto.Message)) {
	t.Helper()
	m.Range(func(fd protoreflect.FieldDescriptor, v protoreflect.Value) bool {
		p := path + "." + string(fd.Name())
		switch {
		case fd.IsList() && fd.Kind() == protoreflect.MessageKind:
			l := v.List()
			for i := 0; i < l.Len(); i++ {
				validateMsg(t, l.Get(i).Message(), fmt.Sprintf("%s[%d]", p, i), visit)
			}
		case fd.IsMap() && fd.MapValue().Kind() == protoreflect.MessageKind:
			v.Map().Range(func(k protoreflect.MapKey, mv protoreflect.Value) bool {
				validateMsg(t, mv.Message(), fmt.Sprintf("%s[%s]", p, k), visit)
				return true
			})
		case !fd.IsList() && !fd.IsMap() && fd.Kind() == protoreflect.MessageKind:
			validateMsg(t, v.Message(), p, visit)
		}
		return true
	})
}

func validateMsg(t *testing.T, m protoreflect.Message, path string, visit func(string, proto.Message)) {
	t.Helper()
	a, ok := m.Interface().(*anypb.Any)
	if !ok {
		validateDeep(t, m, path, visit)
		return
	}
	inner, err := a.UnmarshalNew()
	if err != nil {
		t.Errorf("%s: %s: %v", path, a.GetTypeUrl(), err)
		return
	}
	if v, ok := inner.(interface{ ValidateAll() error }); ok {
		if err := v.ValidateAll(); err != nil {
			t.Errorf("%s (%s): %v", path, a.GetTypeUrl(), err)
		}
	}
	visit(path, inner)
	validateDeep(t, inner.ProtoReflect(), path, visit)
}

func TestEnvoyStaticYAML(t *testing.T) {
	b := loadBootstrap(t, filepath.Join("..", "..", "envoy-static.yaml"))
	fakesdk.InstallCAPI()
	plugin := envoyfilter.New(envoyfilter.Env{})
	var filters, routes int
	var perRoute []interface{}
	validateDeep(t, b.ProtoReflect(), "bootstrap", func(path string, inner proto.Message) {
		switch c := inner.(type) {
		case *golang.Config:
			filters++
			if c.GetPluginName() != envoyfilter.Name || c.GetLibraryId() == "" || !strings.HasSuffix(c.GetLibraryPath(), ".so") {
				t.Errorf("%s: golang filter %q from %q, want plugin %q from a .so", path, c.GetPluginName(), c.GetLibraryPath(), envoyfilter.Name)
			}
			// The plugin config must be accepted by the filter itself.
			if _, err := plugin.Parse(c.GetPluginConfig(), fakesdk.NewConfigCallbacks()); err != nil {
				t.Errorf("%s: plugin_config rejected by the filter: %v", path, err)
			}
		case *golang.ConfigsPerRoute:
			routes++
			for name, rp := range c.GetPluginsConfig() {
				if name != envoyfilter.Name {
					t.Errorf("%s: per-route config for plugin %q", path, name)
				}
				rc, err := plugin.Parse(rp.GetConfig(), nil)
				if err != nil {
					t.Errorf("%s: %v", path, err)
				}
				perRoute = append(perRoute, rc)
			}
		}
	})
	if filters != 1 || routes != 2 {
		t.Fatalf("found %d golang filter configs and %d per-route configs, want 1 and 2", filters, routes)
	}
	// Per-route configs name pools the filter-level mesh config has:
	// Merge counts unknown ones, so the counter must stay 0.
	cb := fakesdk.NewConfigCallbacks()
	cfg, err := plugin.Parse(findGolang(t, b).GetPluginConfig(), cb)
	if err != nil {
		t.Fatal(err)
	}
	for _, rc := range perRoute {
		plugin.Merge(cfg, rc)
	}
	if n, _ := cb.Counter(envoyfilter.StatRouteConfigErrors); n != 0 {
		t.Errorf("%d per-route configs name unknown pools or classes", n)
	}
	names := map[string]bool{}
	for _, c := range b.GetStaticResources().GetClusters() {
		names[c.GetName()] = true
	}
	for _, want := range []string{"sim", "sim-grpc"} {
		if !names[want] {
			t.Errorf("cluster %q missing", want)
		}
	}
}

func findGolang(t *testing.T, b *bootstrap.Bootstrap) *golang.Config {
	t.Helper()
	var found *golang.Config
	validateDeep(t, b.ProtoReflect(), "bootstrap", func(_ string, inner proto.Message) {
		if c, ok := inner.(*golang.Config); ok {
			found = c
		}
	})
	if found == nil {
		t.Fatal("no golang filter config")
	}
	return found
}

func TestEnvoyADSYAML(t *testing.T) {
	b := loadBootstrap(t, filepath.Join("..", "..", "envoy.yaml"))
	validateDeep(t, b.ProtoReflect(), "bootstrap", func(string, proto.Message) {})
	ads := b.GetDynamicResources().GetAdsConfig()
	if ads == nil || len(ads.GetGrpcServices()) != 1 {
		t.Fatal("no ADS config")
	}
	cluster := ads.GetGrpcServices()[0].GetEnvoyGrpc().GetClusterName()
	if b.GetDynamicResources().GetLdsConfig().GetAds() == nil || b.GetDynamicResources().GetCdsConfig().GetAds() == nil {
		t.Error("listeners and clusters must come over ADS")
	}
	var ok bool
	for _, c := range b.GetStaticResources().GetClusters() {
		if c.GetName() == cluster {
			ok = c.GetTypedExtensionProtocolOptions()["envoy.extensions.upstreams.http.v3.HttpProtocolOptions"] != nil
		}
	}
	if !ok {
		t.Errorf("ADS cluster %q missing or not HTTP/2", cluster)
	}
}

// TestEnvoyStaticBufferLimit: the static listener's buffer limit covers
// the largest JSON body the filter's mesh config accepts, because the
// filter buffers bodies to relocate prompts into them and Envoy refuses a
// buffered body past the connection's limit (413).
func TestEnvoyStaticBufferLimit(t *testing.T) {
	b := loadBootstrap(t, filepath.Join("..", "..", "envoy-static.yaml"))
	var ts xdstype.TypedStruct
	if err := findGolang(t, b).GetPluginConfig().UnmarshalTo(&ts); err != nil {
		t.Fatal(err)
	}
	js, err := ts.GetValue().GetFields()["mesh"].MarshalJSON()
	if err != nil {
		t.Fatal(err)
	}
	mesh, err := config.Load(js)
	if err != nil {
		t.Fatalf("the filter's mesh config: %v", err)
	}
	if len(mesh.Relocation.HTTP) == 0 {
		t.Fatal("the static mesh has no relocation.http rule; this test checks the limit that rule needs")
	}
	ls := b.GetStaticResources().GetListeners()
	if len(ls) == 0 {
		t.Fatal("no static listener")
	}
	for _, l := range ls {
		got := l.GetPerConnectionBufferLimitBytes()
		if got == nil || int64(got.GetValue()) < int64(mesh.Relocation.MaxBody) {
			t.Errorf("listener %s: per_connection_buffer_limit_bytes %v is below relocation.max_body %d", l.GetName(), got, mesh.Relocation.MaxBody)
		}
	}
}
