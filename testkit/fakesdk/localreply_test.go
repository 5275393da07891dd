package fakesdk

import (
	"fmt"
	"strings"
	"sync"
	"testing"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// encodeLog is a filter that answers from its decode half with reply and
// logs every encode callback it gets.
type encodeLog struct {
	api.PassThroughStreamFilter
	cb    api.FilterCallbackHandler
	reply func(f *encodeLog) api.StatusType // DecodeHeaders; nil: Continue
	// replyOnEncode: EncodeHeaders answers with a local reply.
	replyOnEncode bool
	mu            sync.Mutex
	log           []string
}

func (f *encodeLog) note(format string, args ...interface{}) {
	f.mu.Lock()
	f.log = append(f.log, fmt.Sprintf(format, args...))
	f.mu.Unlock()
}

func (f *encodeLog) DecodeHeaders(api.RequestHeaderMap, bool) api.StatusType {
	if f.reply == nil {
		return api.Continue
	}
	return f.reply(f)
}

func (f *encodeLog) EncodeHeaders(h api.ResponseHeaderMap, end bool) api.StatusType {
	var kv []string
	for _, k := range []string{":status", "content-type", "content-length", "grpc-status", "grpc-message", "x-r"} {
		if v, ok := h.Get(k); ok {
			kv = append(kv, k+"="+v)
		}
	}
	f.note("EncodeHeaders end=%v %s", end, strings.Join(kv, " "))
	if f.replyOnEncode {
		f.cb.EncoderFilterCallbacks().SendLocalReply(503, "late", nil, -1, "late")
		return api.LocalReply
	}
	return api.Continue
}

func (f *encodeLog) EncodeData(b api.BufferInstance, end bool) api.StatusType {
	f.note("EncodeData end=%v %q", end, b.String())
	return api.Continue
}

func (f *encodeLog) logged() string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return strings.Join(f.log, "\n")
}

// TestLocalReplyThroughEncodeHalf: a local reply sent while decoding
// comes back through the same filter's encode callbacks, as Envoy's
// filter manager runs it through the encoder chain (from the callback or,
// posted to the worker, from a goroutine); not one sent once the response
// reached the filter.
func TestLocalReplyThroughEncodeHalf(t *testing.T) {
	sync := func(f *encodeLog) api.StatusType {
		f.cb.DecoderFilterCallbacks().SendLocalReply(429, `{"error":{}}`, map[string][]string{"content-type": {"application/json"}, "x-r": {"1"}}, -1, "full")
		return api.LocalReply
	}
	async := func(code int, body string, grpc int64) func(f *encodeLog) api.StatusType {
		return func(f *encodeLog) api.StatusType {
			go func() {
				defer f.cb.DecoderFilterCallbacks().RecoverPanic()
				f.cb.DecoderFilterCallbacks().SendLocalReply(code, body, nil, grpc, "async")
			}()
			return api.Running
		}
	}
	for _, tc := range []struct {
		name   string
		grpc   bool
		reply  func(f *encodeLog) api.StatusType
		onEnc  bool // drive the upstream's response headers after the request
		want   string
		status api.StatusType
	}{
		{name: "sync json", reply: sync, status: api.LocalReply,
			want: "EncodeHeaders end=false :status=429 content-type=application/json content-length=12 x-r=1\n" +
				`EncodeData end=true "{\"error\":{}}"`},
		{name: "async no type", reply: async(503, "wait", -1), status: api.LocalReply,
			want: "EncodeHeaders end=false :status=503 content-type=text/plain content-length=4\n" + `EncodeData end=true "wait"`},
		{name: "async empty", reply: async(503, "", -1), status: api.LocalReply,
			want: "EncodeHeaders end=true :status=503"},
		{name: "grpc trailers only", grpc: true, reply: async(429, "queue 100% full\n", 8), status: api.LocalReply,
			want: "EncodeHeaders end=true :status=200 content-type=application/grpc grpc-status=8 grpc-message=queue 100%25 full%0A"},
		{name: "grpc status mapped", grpc: true, reply: async(503, "", -1), status: api.LocalReply,
			want: "EncodeHeaders end=true :status=200 content-type=application/grpc grpc-status=14"},
		{name: "reply while encoding", onEnc: true, status: api.Continue,
			want: "EncodeHeaders end=false :status=200"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &encodeLog{reply: tc.reply, replyOnEncode: tc.onEnc}
			s := NewStream(func(_ interface{}, cb api.FilterCallbackHandler) api.StreamFilter {
				f.cb = cb
				return f
			}, nil, Options{})
			ct := "application/json"
			if tc.grpc {
				ct = "application/grpc"
			}
			if r := s.DecodeHeaders(RequestHeaders("POST", "/x", "content-type", ct), true); r.Status != tc.status {
				t.Fatalf("DecodeHeaders: %+v, want status %v", r, tc.status)
			}
			if tc.onEnc {
				if r := s.EncodeHeaders(ResponseHeaders(200), false); r.Status != api.LocalReply {
					t.Fatalf("EncodeHeaders: %+v, want a local reply", r)
				}
			}
			s.Complete()
			if got := f.logged(); got != tc.want {
				t.Errorf("encode callbacks:\n%s\nwant:\n%s", got, tc.want)
			}
			if v := s.Violations(); len(v) > 0 {
				t.Errorf("violations: %v", v)
			}
			if rep := s.Reply(); rep == nil {
				t.Error("no reply recorded")
			}
		})
	}
}

// TestLocalReplyNotAfterResponseHeaders: a reply sent from the decode half
// once the upstream's headers reached the filter goes to the client past
// the filters (Envoy: "directly to the encoder").
func TestLocalReplyNotAfterResponseHeaders(t *testing.T) {
	f := &encodeLog{}
	s := NewStream(func(_ interface{}, cb api.FilterCallbackHandler) api.StreamFilter {
		f.cb = cb
		return f
	}, nil, Options{})
	if r := s.DecodeHeaders(RequestHeaders("POST", "/x"), false); r.Status != api.Continue {
		t.Fatalf("DecodeHeaders: %+v", r)
	}
	if r := s.EncodeHeaders(ResponseHeaders(200), false); r.Status != api.Continue {
		t.Fatalf("EncodeHeaders: %+v", r)
	}
	r := s.begin(&s.dec, "DecodeData", func(*phase) {}, func() api.StatusType {
		f.cb.DecoderFilterCallbacks().SendLocalReply(503, "x", nil, -1, "late")
		return api.LocalReply
	}, nil).Wait()
	if r.Status != api.LocalReply {
		t.Fatalf("DecodeData: %+v", r)
	}
	s.Complete()
	if got, want := f.logged(), "EncodeHeaders end=false :status=200"; got != want {
		t.Errorf("encode callbacks:\n%s\nwant:\n%s", got, want)
	}
}
