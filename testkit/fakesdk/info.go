package fakesdk

import (
	"fmt"
	"sync/atomic"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"google.golang.org/protobuf/types/known/structpb"
)

// SDKTimeLayout is how the SDK formats timestamp properties such as
// "request.time".
const SDKTimeLayout = "2006-01-02T15:04:05.999999-07:00"

// StreamInfo returns the stream's info.
func (s *Stream) StreamInfo() api.StreamInfo { return streamInfo{s} }

// ClearRouteCache is counted by RouteCacheClears.
func (s *Stream) ClearRouteCache() { s.routeClears.Add(1) }

// RefreshRouteCache is counted by RouteCacheClears.
func (s *Stream) RefreshRouteCache() { s.routeClears.Add(1) }

// RouteCacheClears counts ClearRouteCache and RefreshRouteCache calls.
func (s *Stream) RouteCacheClears() int64 { return s.routeClears.Load() }

// Log logs through the installed fake CAPI.
func (s *Stream) Log(level api.LogType, msg string) { InstallCAPI().Log(level, msg) }

// LogLevel is the installed fake CAPI's level.
func (s *Stream) LogLevel() api.LogType { return InstallCAPI().LogLevel() }

// GetProperty answers from Options.Properties; "request.time" defaults to
// the stream's start. Unknown keys give api.ErrValueNotFound, as in Envoy.
func (s *Stream) GetProperty(key string) (string, error) {
	if v, ok := s.opts.Properties[key]; ok {
		return v, nil
	}
	if key == "request.time" {
		return s.start.Format(SDKTimeLayout), nil
	}
	return "", api.ErrValueNotFound
}

// SecretManager answers from Options.Secrets.
func (s *Stream) SecretManager() api.SecretManager { return secrets(s.opts.Secrets) }

type secrets map[string]string

func (m secrets) GetGenericSecret(name string) (string, bool) {
	v, ok := m[name]
	return v, ok
}

type streamInfo struct{ s *Stream }

var _ api.StreamInfo = streamInfo{}

func (i streamInfo) GetRouteName() string    { return i.s.opts.RouteName }
func (i streamInfo) FilterChainName() string { return "" }
func (i streamInfo) Protocol() (string, bool) {
	if i.s.opts.Protocol == "" {
		return "HTTP/1.1", true
	}
	return i.s.opts.Protocol, true
}

func (i streamInfo) ResponseCode() (uint32, bool) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	if i.s.reply != nil {
		return uint32(i.s.reply.Code), true
	}
	if i.s.respHeaders != nil {
		if v := i.s.respHeaders.Peek(":status"); v != "" {
			var n uint32
			if _, err := fmt.Sscan(v, &n); err == nil {
				return n, true
			}
		}
	}
	return 0, false
}

func (i streamInfo) ResponseCodeDetails() (string, bool) {
	i.s.mu.Lock()
	defer i.s.mu.Unlock()
	if i.s.reply != nil {
		return i.s.reply.Details, true
	}
	return "via_upstream", true
}

func (i streamInfo) AttemptCount() uint32                 { return 1 }
func (i streamInfo) DynamicMetadata() api.DynamicMetadata { return dynamicMetadata(i) }
func (i streamInfo) DownstreamLocalAddress() string       { return "127.0.0.1:10000" }
func (i streamInfo) DownstreamRemoteAddress() string      { return "127.0.0.1:54321" }
func (i streamInfo) UpstreamLocalAddress() (string, bool) { return "127.0.0.1:40000", true }
func (i streamInfo) UpstreamRemoteAddress() (string, bool) {
	return "127.0.0.1:8000", true
}
func (i streamInfo) UpstreamClusterName() (string, bool) {
	return i.s.opts.Cluster, i.s.opts.Cluster != ""
}
func (i streamInfo) FilterState() api.FilterState       { return filterState(i) }
func (i streamInfo) VirtualClusterName() (string, bool) { return "", false }
func (i streamInfo) WorkerID() uint32                   { return 0 }

type dynamicMetadata streamInfo

// Get returns a copy of the namespace's values.
func (d dynamicMetadata) Get(ns string) map[string]interface{} { return d.s.Metadata(ns) }

// Set stores a value; like Envoy, values structpb.NewValue rejects are an
// error (a panic in the SDK) and recorded as a violation.
func (d dynamicMetadata) Set(ns, key string, value interface{}) {
	if _, err := structpb.NewValue(value); err != nil {
		msg := fmt.Sprintf("dynamic metadata %s.%s: %v", ns, key, err)
		d.s.violate(msg)
		panic("fakesdk: " + msg)
	}
	d.s.mu.Lock()
	defer d.s.mu.Unlock()
	m := d.s.meta[ns]
	if m == nil {
		m = map[string]interface{}{}
		d.s.meta[ns] = m
	}
	m[key] = value
}

type filterState streamInfo

func (f filterState) SetString(key, value string, _ api.StateType, _ api.LifeSpan, _ api.StreamSharing) {
	f.s.mu.Lock()
	f.s.state[key] = value
	f.s.mu.Unlock()
}

func (f filterState) GetString(key string) string {
	f.s.mu.Lock()
	defer f.s.mu.Unlock()
	return f.s.state[key]
}

// routeClears is declared here to keep the Stream struct's fields about
// the lifecycle together in stream.go.
type routeCounter = atomic.Int64
