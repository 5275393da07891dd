package exchange

import (
	"errors"
	"net"
	"strings"
	"testing"
)

func inTwo(ep string) bool { return ep == "10.0.0.1:8000" || ep == "10.0.0.2:8000" }

func TestUpstreamPick(t *testing.T) {
	for _, tc := range []struct {
		name, header, metadata string
		want, err              string
		status                 int
	}{
		{name: "none"},
		{name: "header", header: "10.0.0.2:8000", want: "10.0.0.2:8000"},
		{name: "metadata", metadata: "10.0.0.1:8000", want: "10.0.0.1:8000"},
		{name: "metadata wins over the header", header: "10.0.0.2:8000", metadata: "10.0.0.1:8000", want: "10.0.0.1:8000"},
		{name: "a list: the first, fallbacks ignored", header: " 10.0.0.2:8000 , 10.0.0.9:8000", want: "10.0.0.2:8000"},
		{name: "not host:port", header: "10.0.0.2", status: 400,
			err: `bad request: x-gateway-destination-endpoint: "10.0.0.2" must be host:port`},
		{name: "empty first element", header: ",10.0.0.2:8000", status: 400,
			err: `bad request: x-gateway-destination-endpoint: "" must be host:port`},
		{name: "bad port", metadata: "10.0.0.2:http", status: 400,
			err: `bad request: envoy.lb metadata x-gateway-destination-endpoint: "10.0.0.2:http" has an invalid port`},
		{name: "port out of range", header: "10.0.0.2:70000", status: 400,
			err: `bad request: x-gateway-destination-endpoint: "10.0.0.2:70000" has an invalid port`},
		{name: "too long", header: strings.Repeat("1", maxPickLen+1), status: 400,
			err: `bad request: x-gateway-destination-endpoint: 4097 bytes, more than 4096`},
		{name: "not in the pool", header: "10.0.0.3:8000", status: 503,
			err: `upstream pick is not an endpoint of the pool: x-gateway-destination-endpoint: "10.0.0.3:8000"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := MapHeaders{}
			if tc.header != "" {
				h[PickHeader] = tc.header
			}
			got, err := UpstreamPick(h, tc.metadata, inTwo)
			if tc.err == "" {
				if err != nil || got != tc.want {
					t.Fatalf("UpstreamPick = %q, %v; want %q", got, err, tc.want)
				}
				return
			}
			if err == nil || err.Error() != tc.err || got != "" {
				t.Fatalf("UpstreamPick = %q, %v; want the error %q", got, err, tc.err)
			}
			if r := ReplyFor(err); r.HTTPStatus != tc.status || r.Retryable {
				t.Fatalf("reply %+v, want %d, not retryable", r, tc.status)
			}
		})
	}
	if got, err := UpstreamPick(nil, "", inTwo); got != "" || err != nil {
		t.Fatalf("no headers: %q, %v", got, err)
	}
}

// FuzzUpstreamPick: any header or metadata value gives either no pick, an
// endpoint of the pool that is host:port, or an error of one of the two
// classes; never a panic.
func FuzzUpstreamPick(f *testing.F) {
	for _, s := range []string{"", "10.0.0.1:8000", "10.0.0.2:8000,10.0.0.1:8000", "[::1]:80", ":80", "a:b:c", "10.0.0.1:0", ",", " 10.0.0.1:8000 "} {
		f.Add(s, "")
		f.Add("", s)
	}
	f.Fuzz(func(t *testing.T, header, metadata string) {
		got, err := UpstreamPick(MapHeaders{PickHeader: header}, metadata, inTwo)
		switch {
		case err != nil:
			if got != "" || !(errors.Is(err, ErrBadRequest) || errors.Is(err, errPickNotInPool)) {
				t.Fatalf("%q, %v", got, err)
			}
		case got != "":
			if !inTwo(got) {
				t.Fatalf("pick %q is not in the pool", got)
			}
			if _, _, err := net.SplitHostPort(got); err != nil {
				t.Fatalf("pick %q: %v", got, err)
			}
		case metadata != "" || header != "":
			t.Fatalf("a value (%q, %q) gave neither a pick nor an error", header, metadata)
		}
	})
}

func TestPickMetadata(t *testing.T) {
	for _, tc := range []struct {
		ns   map[string]any
		want string
		err  string
	}{
		{ns: nil},
		{ns: map[string]any{"other": "10.0.0.1:8000"}},
		{ns: map[string]any{PickKey: "10.0.0.1:8000"}, want: "10.0.0.1:8000"},
		{ns: map[string]any{PickKey: 8000.0}, err: "bad request: envoy.lb metadata x-gateway-destination-endpoint: float64, want a string"},
	} {
		got, err := PickMetadata(tc.ns)
		if got != tc.want || (err == nil) != (tc.err == "") || (err != nil && err.Error() != tc.err) {
			t.Errorf("PickMetadata(%v) = %q, %v; want %q, %q", tc.ns, got, err, tc.want, tc.err)
		}
	}
}
