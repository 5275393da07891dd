package fakesdk

import (
	"strconv"
	"strings"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// encodeReply runs a local reply the filter sent while decoding through
// the filter's own encode callbacks, as Envoy does: the filter manager
// sends a reply that comes before any response through the encoder filter
// chain (filter_manager.cc sendLocalReply → sendLocalReplyViaFilterChain
// → encodeHeaders over every encoder filter; golang_filter.cc
// encodeHeaders "may enter encodeHeaders in any state"), after the decoder
// callback that sent it returned (prepareLocalReplyViaFilterChain). A reply
// after the upstream's response headers reached the filter goes to the
// client directly, past the filters; one sent while encoding is the
// filter's own answer to the response and does not come back either.
// It runs once, on the goroutine that drives the stream.
func (s *Stream) encodeReply() {
	s.mu.Lock()
	r := s.reply
	if r == nil || r.Reset || s.replyEncoded || s.destroyed || s.respHeaders != nil {
		s.mu.Unlock()
		return
	}
	s.replyEncoded = true
	grpc := s.reqHeaders != nil && strings.HasPrefix(s.reqHeaders.Peek("content-type"), "application/grpc")
	s.replyEncoding = true
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.replyEncoding = false
		s.mu.Unlock()
	}()
	h, body := replyHeaders(r, grpc)
	res := s.EncodeHeaders(h, body == "")
	if body != "" && res.Status == api.Continue {
		s.EncodeData([]byte(body), true)
	}
}

// replyHeaders are a local reply's response headers as Envoy's
// Utility::prepareLocalReply builds them (the same as the C++ host's,
// testkit/envoyhost/host/manager.cc Stream::sendLocalReply): the status,
// the filter's headers, then for gRPC the trailers-only form (HTTP 200,
// grpc-status, the body as a percent-encoded grpc-message, no body), else
// the body's length and a text/plain type when the filter gave none. body
// is what follows the headers, "" when none.
func replyHeaders(r *LocalReply, grpc bool) (h *HeaderMap, body string) {
	h = ResponseHeaders(r.Code)
	for k, vs := range r.Headers {
		for _, v := range vs {
			h.h[strings.ToLower(k)] = append(h.h[strings.ToLower(k)], v)
		}
	}
	switch {
	case grpc:
		h.h[":status"] = []string{"200"}
		h.h["content-type"] = []string{"application/grpc"}
		if v := h.h["grpc-status"]; len(v) == 0 || v[0] == "" {
			gs := r.GRPCStatus
			if gs < 0 {
				gs = HTTPToGRPCStatus(r.Code)
			}
			h.h["grpc-status"] = []string{strconv.FormatInt(gs, 10)}
		}
		if r.Body != "" {
			h.h["grpc-message"] = []string{percentEncode(r.Body)}
		}
		delete(h.h, "content-length")
	case r.Body != "":
		h.h["content-length"] = []string{strconv.Itoa(len(r.Body))}
		if len(h.h["content-type"]) == 0 {
			h.h["content-type"] = []string{"text/plain"}
		}
		body = r.Body
	default:
		delete(h.h, "content-length")
		delete(h.h, "content-type")
	}
	return h, body
}

// HTTPToGRPCStatus is Envoy's Grpc::Utility::httpToGrpcStatus: the gRPC
// status of a local reply sent with an HTTP code and no grpc-status.
func HTTPToGRPCStatus(code int) int64 {
	switch code {
	case 400:
		return 13
	case 401:
		return 16
	case 403:
		return 7
	case 404:
		return 12
	case 429, 502, 503, 504:
		return 14
	}
	return 2
}

// percentEncode is Envoy's PercentEncoding::encode for grpc-message:
// bytes outside ' '..'~', and '%', become %XX.
func percentEncode(s string) string {
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c < ' ' || c > '~' || c == '%' {
			b.WriteString("%" + strings.ToUpper(strconv.FormatUint(uint64(c)|0x100, 16)[1:]))
			continue
		}
		b.WriteByte(c)
	}
	return b.String()
}
