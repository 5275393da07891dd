package fakesdk

import (
	"strings"
	"sync"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	InstallCAPI()
	goleak.VerifyTestMain(m)
}

// funcFilter is a filter made of function fields, for testing the fake.
type funcFilter struct {
	api.PassThroughStreamFilter
	cb            api.FilterCallbackHandler
	decodeHeaders func(f *funcFilter, h api.RequestHeaderMap, end bool) api.StatusType
	decodeData    func(f *funcFilter, b api.BufferInstance, end bool) api.StatusType
	destroyed     chan struct{}
}

func (f *funcFilter) DecodeHeaders(h api.RequestHeaderMap, end bool) api.StatusType {
	if f.decodeHeaders == nil {
		return api.Continue
	}
	return f.decodeHeaders(f, h, end)
}

func (f *funcFilter) DecodeData(b api.BufferInstance, end bool) api.StatusType {
	if f.decodeData == nil {
		return api.Continue
	}
	return f.decodeData(f, b, end)
}

func (f *funcFilter) OnDestroy(api.DestroyReason) {
	if f.destroyed != nil {
		close(f.destroyed)
	}
}

func newStream(f *funcFilter) *Stream {
	return NewStream(func(_ interface{}, cb api.FilterCallbackHandler) api.StreamFilter {
		f.cb = cb
		return f
	}, nil, Options{})
}

func TestAsyncContinue(t *testing.T) {
	var kept api.RequestHeaderMap
	var wg sync.WaitGroup
	f := &funcFilter{decodeHeaders: func(f *funcFilter, h api.RequestHeaderMap, _ bool) api.StatusType {
		kept = h
		wg.Add(1)
		go func() {
			defer wg.Done()
			defer f.cb.DecoderFilterCallbacks().RecoverPanic()
			h.Set("x-added", "1") // valid: the phase is held
			f.cb.DecoderFilterCallbacks().Continue(api.Continue)
		}()
		return api.Running
	}}
	s := newStream(f)
	h := RequestHeaders("GET", "/")
	r := s.DecodeHeaders(h, true)
	wg.Wait()
	if r.Status != api.Continue || !r.Async {
		t.Fatalf("result %+v", r)
	}
	if h.Peek("x-added") != "1" {
		t.Error("header set while held was lost")
	}
	if len(s.Violations()) != 0 {
		t.Fatalf("violations: %v", s.Violations())
	}
	// The phase is over: using the map now is what the SDK forbids.
	func() {
		defer func() { _ = recover() }()
		kept.Set("x-late", "1")
	}()
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "after its phase DecodeHeaders ended") {
		t.Errorf("violations %q, want one use-after-phase", v)
	}
}

func TestContinueWithoutRunningIsAViolation(t *testing.T) {
	f := &funcFilter{decodeHeaders: func(f *funcFilter, _ api.RequestHeaderMap, _ bool) api.StatusType {
		f.cb.DecoderFilterCallbacks().Continue(api.Continue)
		return api.Continue
	}}
	s := newStream(f)
	s.DecodeHeaders(RequestHeaders("GET", "/"), true)
	if v := s.Violations(); len(v) != 1 || !strings.Contains(v[0], "returned Continue") {
		t.Errorf("violations %q", v)
	}
}

func TestContinueAfterDestroyPanicsLikeTheSDK(t *testing.T) {
	release := make(chan struct{})
	done := make(chan struct{})
	f := &funcFilter{destroyed: make(chan struct{}), decodeHeaders: func(f *funcFilter, _ api.RequestHeaderMap, _ bool) api.StatusType {
		go func() {
			defer close(done)
			defer f.cb.DecoderFilterCallbacks().RecoverPanic()
			<-release
			f.cb.DecoderFilterCallbacks().Continue(api.Continue)
			t.Error("Continue after OnDestroy returned")
		}()
		return api.Running
	}}
	s := newStream(f)
	p := s.StartDecodeHeaders(RequestHeaders("GET", "/"), true)
	s.Destroy(api.Terminate)
	<-f.destroyed
	close(release)
	<-done
	if r := p.Wait(); !r.Destroyed {
		t.Errorf("result %+v, want Destroyed", r)
	}
	if s.LateCalls() != 1 {
		t.Errorf("LateCalls = %d, want 1", s.LateCalls())
	}
	if s.Reply() != nil || len(s.Panics()) != 0 {
		t.Errorf("a destroyed-stream panic must be swallowed: reply %v panics %v", s.Reply(), s.Panics())
	}
}

func TestStopAndBufferDeliversWholeBody(t *testing.T) {
	var got []string
	var hdr api.RequestHeaderMap
	f := &funcFilter{
		decodeHeaders: func(_ *funcFilter, h api.RequestHeaderMap, _ bool) api.StatusType {
			hdr = h
			return api.StopAndBuffer
		},
		decodeData: func(_ *funcFilter, b api.BufferInstance, end bool) api.StatusType {
			got = append(got, b.String())
			hdr.Del("content-length") // allowed after StopAndBuffer
			_ = b.SetString(strings.ToUpper(b.String()))
			return api.Continue
		},
	}
	s := newStream(f)
	s.DecodeHeaders(RequestHeaders("POST", "/", "content-length", "6"), false)
	if r := s.DecodeData([]byte("abc"), false); r.Status != api.StopAndBuffer {
		t.Fatalf("first chunk: %+v", r)
	}
	s.DecodeData([]byte("def"), true)
	if len(got) != 1 || got[0] != "abcdef" || string(s.Upstream()) != "ABCDEF" {
		t.Errorf("filter saw %q, upstream %q", got, s.Upstream())
	}
	if v := s.Violations(); len(v) != 0 {
		t.Errorf("violations: %v", v)
	}
	func() {
		defer func() { _ = recover() }()
		hdr.Set("x", "y")
	}()
	if len(s.Violations()) != 1 {
		t.Error("header map still usable after the buffered data phase continued")
	}
}

func TestDynamicMetadataRejectsWhatEnvoyRejects(t *testing.T) {
	s := newStream(&funcFilter{})
	md := s.StreamInfo().DynamicMetadata()
	md.Set("ns", "ok", 1.5)
	func() {
		defer func() { _ = recover() }()
		md.Set("ns", "bad", struct{}{})
	}()
	if got := s.Metadata("ns"); got["ok"] != 1.5 || got["bad"] != nil {
		t.Errorf("metadata %v", got)
	}
	if len(s.Violations()) != 1 {
		t.Errorf("violations %v", s.Violations())
	}
}

func TestBufferWriteUintIsDecimal(t *testing.T) {
	b := NewBuffer(nil)
	_ = b.WriteUint32(1234)
	_ = b.WriteUint16(7)
	if b.String() != "12347" {
		t.Errorf("got %q: the SDK writes decimal text", b.String())
	}
}

func TestMetricsShareByName(t *testing.T) {
	c := NewConfigCallbacks()
	c.DefineCounterMetric("x").Increment(2)
	c.DefineCounterMetric("x").Increment(3)
	g := c.DefineGaugeMetric("g")
	g.Increment(2)
	g.Increment(-1)
	if v, _ := c.Counter("x"); v != 5 {
		t.Errorf("counter = %d", v)
	}
	if v, _ := c.Gauge("g"); v != 1 {
		t.Errorf("gauge = %d", v)
	}
	if _, ok := c.Counter("nope"); ok {
		t.Error("undefined counter reported as defined")
	}
}

func TestRequestTimeProperty(t *testing.T) {
	s := newStream(&funcFilter{})
	v, err := s.GetProperty("request.time")
	if err != nil || !strings.Contains(v, "T") {
		t.Errorf("request.time = %q, %v", v, err)
	}
	if _, err := s.GetProperty("nope"); err != api.ErrValueNotFound {
		t.Errorf("unknown property error = %v", err)
	}
}
