package fakesdk

import (
	"fmt"
	"strings"
	"time"

	"github.com/envoyproxy/envoy/contrib/golang/common/go/api"
)

// Pending is a callback that may still be held by the filter.
type Pending struct {
	s     *Stream
	p     *process
	ph    *phase
	async bool
	sync  api.StatusType
	after func(api.StatusType)
	res   *Result
}

// begin opens a phase for p and calls the filter synchronously, recovering
// panics the way the SDK's shim does.
func (s *Stream) begin(p *process, name string, bind func(*phase), call func() api.StatusType, after func(api.StatusType)) *Pending {
	s.mu.Lock()
	if s.destroyed || (s.reply != nil && !(s.replyEncoding && p == &s.enc)) {
		s.mu.Unlock()
		return &Pending{s: s, res: &Result{Skipped: true, Status: api.LocalReply}}
	}
	if p.cur != nil {
		s.violations = append(s.violations, name+" started while "+p.cur.name+" is still held")
	}
	ph := &phase{s: s, name: name}
	p.cur = ph
	s.mu.Unlock()
	bind(ph)
	status := s.shimCall(p, call)
	return &Pending{s: s, p: p, ph: ph, sync: status, async: status == api.Running, after: after}
}

func (s *Stream) shimCall(p *process, call func() api.StatusType) (status api.StatusType) {
	defer func() {
		if e := recover(); e != nil {
			s.sdkRecover(p, e)
			status = api.LocalReply
		}
	}()
	return call()
}

// Ready reports, without blocking, whether Wait would return at once.
func (w *Pending) Ready() bool {
	if w.res != nil || !w.async {
		return true
	}
	select {
	case <-w.s.destroyCh:
		return true
	default:
	}
	return len(w.p.done) > 0
}

// Wait waits until the callback is settled and returns how it ended.
func (w *Pending) Wait() Result {
	if w.res != nil {
		return *w.res
	}
	s, p := w.s, w.p
	r := Result{Async: w.async}
	if !w.async {
		r.Status = w.sync
		select {
		case o := <-p.done:
			if o.status != api.LocalReply || w.sync != api.LocalReply {
				s.violate("Continue or SendLocalReply in " + w.ph.name + " that returned " + statusName(w.sync))
			}
		default:
			if w.sync == api.LocalReply {
				s.violate(w.ph.name + " returned LocalReply without SendLocalReply")
			}
			s.mu.Lock()
			if p.cur == w.ph {
				p.cur = nil
			}
			s.mu.Unlock()
		}
	} else {
		t := time.NewTimer(s.opts.Timeout)
		defer t.Stop()
		select {
		case o := <-p.done:
			r.Status = o.status
		case <-s.destroyCh:
			r.Destroyed = true
			r.Status = api.LocalReply
		case <-t.C:
			r.TimedOut = true
			s.violate(w.ph.name + ": no Continue or SendLocalReply within " + s.opts.Timeout.String())
		}
	}
	if !r.Destroyed && !r.TimedOut {
		s.settle(p, w.ph, r.Status)
		if w.after != nil {
			w.after(r.Status)
		}
	}
	w.res = &r
	if r.Status == api.LocalReply && p == &s.dec {
		s.encodeReply()
	}
	return r
}

// settle closes the phase unless the status keeps it (StopAndBuffer keeps
// headers valid for the buffered data phase).
func (s *Stream) settle(p *process, ph *phase, st api.StatusType) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if st == api.StopAndBuffer || st == api.StopAndBufferWatermark {
		// Envoy keeps the data and calls again with all of it at the end.
		p.buffering = true
		if p.keep == nil && strings.HasSuffix(ph.name, "Headers") {
			p.keep = ph
			return
		}
	}
	ph.closed.Store(true)
	if st == api.Continue && p.keep != nil {
		p.keep.closed.Store(true)
		p.keep = nil
	}
}

func statusName(st api.StatusType) string {
	switch st {
	case api.Running:
		return "Running"
	case api.LocalReply:
		return "LocalReply"
	case api.Continue:
		return "Continue"
	case api.StopAndBuffer:
		return "StopAndBuffer"
	case api.StopAndBufferWatermark:
		return "StopAndBufferWatermark"
	case api.StopNoBuffer:
		return "StopNoBuffer"
	}
	return "status(" + itoa(int(st)) + ")"
}

func itoa(n int) string {
	if n == 0 {
		return "0"
	}
	neg := n < 0
	if neg {
		n = -n
	}
	var b [20]byte
	i := len(b)
	for n > 0 {
		i--
		b[i] = byte('0' + n%10)
		n /= 10
	}
	if neg {
		i--
		b[i] = '-'
	}
	return string(b[i:])
}

// StartDecodeHeaders calls DecodeHeaders and returns without waiting for a
// held phase to be continued.
func (s *Stream) StartDecodeHeaders(h *HeaderMap, endStream bool) *Pending {
	s.mu.Lock()
	s.reqHeaders = h
	s.mu.Unlock()
	return s.begin(&s.dec, "DecodeHeaders", func(ph *phase) { h.phase = ph },
		func() api.StatusType { return s.filter.DecodeHeaders(h, endStream) }, nil)
}

// DecodeHeaders calls DecodeHeaders and waits until it is settled.
func (s *Stream) DecodeHeaders(h *HeaderMap, endStream bool) Result {
	return s.StartDecodeHeaders(h, endStream).Wait()
}

// DecodeData delivers one request body chunk. After StopAndBuffer Envoy
// keeps the data and calls the filter again with what was buffered since
// when the body ends (a chunk the filter answered StopAndBuffer for is not
// handed back, only sent on); the fake does the same.
func (s *Stream) DecodeData(data []byte, endStream bool) Result {
	return s.data(&s.dec, "DecodeData", data, endStream, func(b *Buffer, end bool) api.StatusType {
		return s.filter.DecodeData(b, end)
	}, &s.upstream).Wait()
}

// EncodeHeaders calls EncodeHeaders and waits until it is settled.
func (s *Stream) EncodeHeaders(h *HeaderMap, endStream bool) Result {
	return s.StartEncodeHeaders(h, endStream).Wait()
}

// StartEncodeHeaders calls EncodeHeaders without waiting for a held phase.
func (s *Stream) StartEncodeHeaders(h *HeaderMap, endStream bool) *Pending {
	s.mu.Lock()
	s.respHeaders = h
	s.mu.Unlock()
	return s.begin(&s.enc, "EncodeHeaders", func(ph *phase) { h.phase = ph },
		func() api.StatusType { return s.filter.EncodeHeaders(h, endStream) },
		func(st api.StatusType) {
			if st == api.Continue {
				s.mu.Lock()
				s.respStarted = true
				s.mu.Unlock()
			}
		})
}

// EncodeData delivers one response body chunk.
func (s *Stream) EncodeData(data []byte, endStream bool) Result {
	return s.data(&s.enc, "EncodeData", data, endStream, func(b *Buffer, end bool) api.StatusType {
		return s.filter.EncodeData(b, end)
	}, &s.downstream).Wait()
}

// EncodeBuffer delivers b (reused by benchmarks via Buffer.Reuse) as one
// response chunk, without the buffering emulation, and returns the status
// the filter returned synchronously.
func (s *Stream) EncodeBuffer(b *Buffer, endStream bool) api.StatusType {
	return s.filter.EncodeData(b, endStream)
}

func (s *Stream) data(p *process, name string, data []byte, end bool, call func(*Buffer, bool) api.StatusType, sink *[]byte) *Pending {
	s.mu.Lock()
	if p.buffering {
		p.buffered = append(p.buffered, data...)
		if !end {
			s.mu.Unlock()
			return &Pending{s: s, res: &Result{Status: api.StopAndBuffer}}
		}
		data = p.buffered
		p.buffered, p.buffering = nil, false
	}
	s.mu.Unlock()
	b := NewBuffer(data)
	return s.begin(p, name, func(ph *phase) { b.phase = ph },
		func() api.StatusType { return call(b, end) },
		func(st api.StatusType) {
			s.mu.Lock()
			defer s.mu.Unlock()
			switch st {
			case api.Continue:
				*sink = append(*sink, p.kept...)
				*sink = append(*sink, b.b...)
				p.kept = nil
			case api.StopAndBuffer, api.StopAndBufferWatermark:
				// Envoy keeps this chunk and goes on with it when the
				// filter continues, but does not hand it to the filter
				// again: the next call gets only the data that followed.
				p.buffering = true
				p.kept = append(p.kept, b.b...)
			}
		})
}

// DecodeTrailers delivers request trailers. A body Envoy buffered (after
// StopAndBuffer) is handed to DecodeData first, without endStream, as
// Envoy's doTrailer does; a filter that answers StopAndBuffer again is a
// violation, because Envoy then sends that body on, and with it the held
// request headers, before DecodeTrailers.
func (s *Stream) DecodeTrailers(h *HeaderMap) Result {
	s.mu.Lock()
	body := s.dec.buffered
	if s.dec.buffering && len(body) > 0 {
		s.dec.buffered, s.dec.buffering = nil, false
	} else {
		body = nil
	}
	s.mu.Unlock()
	if body != nil {
		b := NewBuffer(body)
		r := s.begin(&s.dec, "DecodeData", func(ph *phase) { b.phase = ph },
			func() api.StatusType { return s.filter.DecodeData(b, false) },
			func(st api.StatusType) {
				switch st {
				case api.Continue:
				case api.StopAndBuffer, api.StopAndBufferWatermark:
					s.violate("DecodeData before request trailers answered " + statusName(st) +
						": Envoy injects the buffered body now, which continues the held request headers (doTrailer)")
				default:
					return
				}
				s.mu.Lock()
				s.upstream = append(s.upstream, b.b...)
				s.mu.Unlock()
			}).Wait()
		if r.Status != api.Continue && r.Status != api.StopNoBuffer && r.Status != api.StopAndBuffer && r.Status != api.StopAndBufferWatermark {
			return r
		}
	}
	return s.begin(&s.dec, "DecodeTrailers", func(ph *phase) { h.phase = ph },
		func() api.StatusType { return s.filter.DecodeTrailers(h) }, nil).Wait()
}

// EncodeTrailers delivers response trailers.
func (s *Stream) EncodeTrailers(h *HeaderMap) Result {
	s.mu.Lock()
	s.respTrailer = h
	s.mu.Unlock()
	return s.begin(&s.enc, "EncodeTrailers", func(ph *phase) { h.phase = ph },
		func() api.StatusType { return s.filter.EncodeTrailers(h) }, nil).Wait()
}

// Destroy calls OnDestroy as Envoy does when the stream goes away (reason
// api.Terminate while a phase is held, for example a client reset).
// Anything the filter holds becomes invalid first.
func (s *Stream) Destroy(reason api.DestroyReason) {
	s.mu.Lock()
	if s.destroyed {
		s.mu.Unlock()
		return
	}
	s.destroyed = true
	for _, p := range []*process{&s.dec, &s.enc} {
		if p.cur != nil {
			p.cur.closed.Store(true)
		}
		if p.keep != nil {
			p.keep.closed.Store(true)
		}
	}
	close(s.destroyCh)
	s.mu.Unlock()
	func() {
		defer func() {
			if e := recover(); e != nil {
				s.mu.Lock()
				s.panics = append(s.panics, "OnDestroy: "+fmt.Sprint(e))
				s.mu.Unlock()
			}
		}()
		s.filter.OnDestroy(reason)
	}()
}

// Complete ends the stream normally: OnStreamComplete, OnLog with the
// final header maps, then OnDestroy(api.Normal), as Envoy does.
func (s *Stream) Complete() {
	s.logCall(func() { s.filter.OnStreamComplete() })
	s.mu.Lock()
	req, resp, tr := s.reqHeaders, s.respHeaders, s.respTrailer
	s.mu.Unlock()
	ph := &phase{s: s, name: "OnLog"}
	fresh := func(h *HeaderMap) *HeaderMap {
		if h == nil {
			return nil
		}
		return &HeaderMap{h: h.Snapshot(), phase: ph}
	}
	reqH, respH, respT := fresh(req), fresh(resp), fresh(tr)
	s.logCall(func() {
		// The SDK passes nil interfaces for missing maps.
		var rh api.ResponseHeaderMap
		if respH != nil {
			rh = respH
		}
		var rt api.ResponseTrailerMap
		if respT != nil {
			rt = respT
		}
		var qh api.RequestHeaderMap = NewHeaders()
		if reqH != nil {
			qh = reqH
		}
		s.filter.OnLog(qh, nil, rh, rt)
	})
	ph.closed.Store(true)
	s.Destroy(api.Normal)
}

func (s *Stream) logCall(f func()) {
	defer func() {
		if e := recover(); e != nil {
			s.mu.Lock()
			s.panics = append(s.panics, fmt.Sprint(e))
			s.mu.Unlock()
		}
	}()
	f()
}
