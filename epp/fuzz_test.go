package epp_test

import (
	"strings"
	"testing"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	"google.golang.org/protobuf/types/known/structpb"

	"github.com/llmesh/llmesh/epp"
)

// The endpoint list parser accepts exactly lists of host:port with ports in
// range, and what it returns parses again to itself.
func FuzzParseEndpointList(f *testing.F) {
	for _, s := range []string{"10.0.0.1:8000", "10.0.0.1:8000,10.0.0.2:8000", " [::1]:80 , a:1", "", ",", "10.0.0.1",
		"10.0.0.1:0", "10.0.0.1:65536", ":80", "a:b", "[::1]:99999"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		eps, err := epp.ParseEndpointList(s)
		if err != nil {
			if !strings.Contains(err.Error(), "endpoint must be host:port") {
				t.Fatalf("error %v does not name the rule", err)
			}
			return
		}
		again, err := epp.ParseEndpointList(strings.Join(eps, ","))
		if err != nil || len(again) != len(eps) {
			t.Fatalf("%q parsed to %q, which gives %q, %v", s, eps, again, err)
		}
		md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{epp.SubsetNamespace: {Fields: map[string]*structpb.Value{
			epp.SubsetKey: structpb.NewStringValue(s)}}}}
		sub, present, err := epp.Subset(md)
		if err != nil || !present || len(sub) != len(eps) {
			t.Fatalf("Subset of %q: %q %v %v", s, sub, present, err)
		}
	})
}

func TestSubsetShapes(t *testing.T) {
	list, _ := structpb.NewList([]any{"10.0.0.1:8000", 3.0})
	cases := []struct {
		name    string
		v       *structpb.Value
		want    int
		wantErr string
	}{
		{"list", structpb.NewListValue(&structpb.ListValue{Values: []*structpb.Value{structpb.NewStringValue("10.0.0.1:8000")}}), 1, ""},
		{"string", structpb.NewStringValue("10.0.0.1:8000,10.0.0.2:8000"), 2, ""},
		{"null", structpb.NewNullValue(), 0, ""},
		{"number in list", structpb.NewListValue(list), 0, "x-gateway-destination-endpoint-subset[1]: must be a string"},
		{"number", structpb.NewNumberValue(1), 0, "must be a list"},
	}
	for _, c := range cases {
		md := &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{epp.SubsetNamespace: {Fields: map[string]*structpb.Value{epp.SubsetKey: c.v}}}}
		sub, present, err := epp.Subset(md)
		if !present {
			t.Errorf("%s: not present", c.name)
		}
		if c.wantErr != "" {
			if err == nil || !strings.Contains(err.Error(), c.wantErr) {
				t.Errorf("%s: error %v, want %q", c.name, err, c.wantErr)
			}
			continue
		}
		if err != nil || len(sub) != c.want {
			t.Errorf("%s: %q %v", c.name, sub, err)
		}
	}
	if _, present, _ := epp.Subset(nil); present {
		t.Error("nil metadata: present")
	}
}
