// Package epptest drives an ext_proc endpoint picker as Envoy's ext_proc
// filter does (source/extensions/filters/http/ext_proc/ in the Envoy
// module): request headers, request body chunks, response headers,
// response body chunks, in the order and with the waits of each body mode.
// It is the client side of the picker's conformance suite (epp's tests)
// and of its latency benchmark, over a real gRPC connection.
package epptest

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strconv"

	corev3 "github.com/envoyproxy/go-control-plane/envoy/config/core/v3"
	filterv3 "github.com/envoyproxy/go-control-plane/envoy/extensions/filters/http/ext_proc/v3"
	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/protobuf/types/known/structpb"
)

// Mode is an ext_proc body send mode.
type Mode = filterv3.ProcessingMode_BodySendMode

// The body modes the driver speaks.
const (
	Buffered   = filterv3.ProcessingMode_BUFFERED
	Streamed   = filterv3.ProcessingMode_STREAMED
	FullDuplex = filterv3.ProcessingMode_FULL_DUPLEX_STREAMED
)

// Driver plays Envoy's ext_proc filter against one picker.
type Driver struct {
	Client extprocv3.ExternalProcessorClient
	// RequestMode and ResponseMode are the filter's processing modes; the
	// first message carries them in protocol_config, as Envoy does.
	RequestMode, ResponseMode Mode
	// NoProtocolConfig leaves protocol_config out (Envoy before v1.34).
	NoProtocolConfig bool
}

// Request is one HTTP request as the data plane has it.
type Request struct {
	// Headers are the request headers, pseudo-headers included
	// (":path", ":method").
	Headers map[string]string
	// Chunks are the body as it arrives; nil or empty: no body (the
	// headers end the request).
	Chunks [][]byte
	// Subset, when SubsetSet, goes in the filter metadata
	// (envoy.lb.subset_hint / x-gateway-destination-endpoint-subset).
	Subset    []string
	SubsetSet bool
}

// Pick is the picker's answer to a request.
type Pick struct {
	// Header is x-gateway-destination-endpoint as mutated; Metadata is
	// envoy.lb / x-gateway-destination-endpoint of the dynamic metadata.
	Header, Metadata string
	// Body is the request body the data plane forwards: what the picker
	// streamed back (full duplex), the body mutation of its answer
	// (buffered), or the original body.
	Body []byte
	// Removed are the request headers the picker's answer removes.
	Removed []string
	// Immediate is set when the picker answered the request itself.
	Immediate *extprocv3.ImmediateResponse
}

// Call is one request's ext_proc stream.
type Call struct {
	d      *Driver
	stream extprocv3.ExternalProcessor_ProcessClient
	cancel context.CancelFunc
	first  bool
}

// Start opens a stream and sends the request, reading the picker's
// answers as Envoy waits for them; it returns once the request has its
// pick (or immediate response). Cancel the Call (or end the response)
// to end the stream.
func (d *Driver) Start(ctx context.Context, r Request) (*Call, Pick, error) {
	ctx, cancel := context.WithCancel(ctx)
	s, err := d.Client.Process(ctx)
	if err != nil {
		cancel()
		return nil, Pick{}, err
	}
	c := &Call{d: d, stream: s, cancel: cancel, first: true}
	p, err := c.request(r)
	if err != nil {
		cancel()
		return nil, p, err
	}
	return c, p, nil
}

func (c *Call) send(m *extprocv3.ProcessingRequest) error {
	if c.first && !c.d.NoProtocolConfig {
		m.ProtocolConfig = &extprocv3.ProtocolConfiguration{RequestBodyMode: c.d.RequestMode, ResponseBodyMode: c.d.ResponseMode}
	}
	c.first = false
	return c.stream.Send(m)
}

// next reads the picker's next answer. An immediate response, which ends
// the exchange, comes back as im (m nil).
func (c *Call) next() (m *extprocv3.ProcessingResponse, im *extprocv3.ImmediateResponse, err error) {
	m, err = c.stream.Recv()
	if err != nil {
		return nil, nil, err
	}
	if im := m.GetImmediateResponse(); im != nil {
		return nil, im, nil
	}
	return m, nil, nil
}

// roundTrip sends msg and reads the picker's answer to it (next).
func (c *Call) roundTrip(msg *extprocv3.ProcessingRequest) (*extprocv3.ProcessingResponse, *extprocv3.ImmediateResponse, error) {
	if err := c.send(msg); err != nil {
		return nil, nil, err
	}
	return c.next()
}

// headerMap is the headers (or trailers) kv as Envoy sends them, raw
// values, after the pseudo-headers given first.
func headerMap(kv map[string]string, pseudo ...*corev3.HeaderValue) *corev3.HeaderMap {
	hm := &corev3.HeaderMap{Headers: pseudo}
	for k, v := range kv {
		hm.Headers = append(hm.Headers, &corev3.HeaderValue{Key: k, RawValue: []byte(v)})
	}
	return hm
}

func (c *Call) request(r Request) (Pick, error) {
	var p Pick
	hasBody := len(r.Chunks) > 0
	msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestHeaders{
		RequestHeaders: &extprocv3.HttpHeaders{Headers: headerMap(r.Headers), EndOfStream: !hasBody}}}
	if r.SubsetSet {
		vals := make([]any, len(r.Subset))
		for i, s := range r.Subset {
			vals[i] = s
		}
		l, err := structpb.NewList(vals)
		if err != nil {
			return p, err
		}
		msg.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb.subset_hint": {Fields: map[string]*structpb.Value{
				"x-gateway-destination-endpoint-subset": structpb.NewListValue(l)}}}}
	}
	if err := c.send(msg); err != nil {
		return p, err
	}
	var body []byte
	for _, ch := range r.Chunks {
		body = append(body, ch...)
	}
	p.Body = body
	mode := c.d.RequestMode
	if !hasBody || mode != FullDuplex {
		// Envoy waits for the headers answer.
		done, err := c.expect(&p, "request_headers")
		if err != nil || done || !hasBody {
			return p, err
		}
	}
	switch mode {
	case Buffered:
		if err := c.send(bodyMsg(body, true, false)); err != nil {
			return p, err
		}
		_, err := c.expect(&p, "request_body")
		return p, err
	case Streamed:
		for i, ch := range r.Chunks {
			if err := c.send(bodyMsg(ch, i == len(r.Chunks)-1, false)); err != nil {
				return p, err
			}
			if done, err := c.expect(&p, "request_body"); err != nil || done {
				return p, err
			}
		}
		return p, nil
	case FullDuplex:
		for i, ch := range r.Chunks {
			if err := c.send(bodyMsg(ch, i == len(r.Chunks)-1, false)); err != nil {
				return p, err
			}
		}
		if done, err := c.expect(&p, "request_headers"); err != nil || done {
			return p, err
		}
		// The body goes upstream as the picker streams it back.
		p.Body = nil
		for {
			m, im, err := c.next()
			if err != nil || im != nil {
				p.Immediate = im
				return p, err
			}
			sr := m.GetRequestBody().GetResponse().GetBodyMutation().GetStreamedResponse()
			if sr == nil {
				return p, fmt.Errorf("epptest: full duplex: want a streamed request body, got %T", m.GetResponse())
			}
			p.Body = append(p.Body, sr.GetBody()...)
			if sr.GetEndOfStream() {
				return p, nil
			}
		}
	}
	return p, fmt.Errorf("epptest: request mode %v not supported", mode)
}

func bodyMsg(b []byte, eos, response bool) *extprocv3.ProcessingRequest {
	hb := &extprocv3.HttpBody{Body: b, EndOfStream: eos}
	if response {
		return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseBody{ResponseBody: hb}}
	}
	return &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_RequestBody{RequestBody: hb}}
}

// expect reads one answer of the given kind, recording a pick in p; done
// is true when the picker answered with an immediate response.
func (c *Call) expect(p *Pick, kind string) (done bool, err error) {
	m, im, err := c.next()
	if err != nil || im != nil {
		p.Immediate = im
		return im != nil, err
	}
	var common *extprocv3.CommonResponse
	switch kind {
	case "request_headers":
		if m.GetRequestHeaders() == nil {
			return false, fmt.Errorf("epptest: want a request_headers answer, got %T", m.GetResponse())
		}
		common = m.GetRequestHeaders().GetResponse()
	case "request_body":
		if m.GetRequestBody() == nil {
			return false, fmt.Errorf("epptest: want a request_body answer, got %T", m.GetResponse())
		}
		common = m.GetRequestBody().GetResponse()
	}
	if b := common.GetBodyMutation(); b.GetBody() != nil {
		p.Body = b.GetBody()
	}
	p.Removed = append(p.Removed, common.GetHeaderMutation().GetRemoveHeaders()...)
	for _, h := range common.GetHeaderMutation().GetSetHeaders() {
		if h.GetHeader().GetKey() == "x-gateway-destination-endpoint" {
			p.Header = string(h.GetHeader().GetRawValue())
			if p.Header == "" {
				p.Header = h.GetHeader().GetValue()
			}
		}
	}
	if md := m.GetDynamicMetadata(); md != nil {
		p.Metadata = md.GetFields()["envoy.lb"].GetStructValue().GetFields()["x-gateway-destination-endpoint"].GetStringValue()
	}
	return false, nil
}

// Response is the upstream's response as the data plane relays it.
type Response struct {
	Status  int
	Headers map[string]string
	// Chunks are the body as it arrives from the upstream; Body, when
	// set instead, is read piece by piece as the upstream sends it (and
	// closed, when it is an io.Closer, once the response ends: Envoy
	// resets the upstream when the picker ends the response first).
	Chunks [][]byte
	Body   io.Reader
	// Served, when set, is reported in the metadata context
	// (envoy.lb / x-gateway-destination-endpoint-served).
	Served string
	// Trailers, when set, gives the response trailers once the body has
	// ended (an HTTP response's trailers are known only then); when it
	// returns some, the body's last chunk does not end the stream and a
	// trailers message follows, as Envoy sends them.
	Trailers func() map[string]string
}

// Reply is what the client gets of a response relayed through the
// picker.
type Reply struct {
	// Body is the body the client got: the picker's streamed body in full
	// duplex mode, the upstream's otherwise.
	Body []byte
	// Immediate is the picker's immediate response, when it sent one
	// while the response was relayed. Before the response headers went
	// out (HeadersSent false) the client gets it; after, Envoy resets the
	// client's stream.
	Immediate *extprocv3.ImmediateResponse
	// HeadersSent: the response headers went on to the client.
	HeadersSent bool
	// EndedByPicker: the picker ended the body (a streamed body with
	// end_of_stream) before the upstream's end; Envoy ends the client's
	// response there and resets the upstream.
	EndedByPicker bool
}

// Respond relays the response through the picker and returns the body
// the client gets (the picker's streamed body in full duplex mode), then
// closes the stream. A response the picker cut short (an immediate
// response, or its own end of the body) is an error; Relay reports those.
func (c *Call) Respond(r Response) ([]byte, error) {
	rep, err := c.Relay(r)
	if err == nil && (rep.Immediate != nil || rep.EndedByPicker) {
		err = fmt.Errorf("epptest: the picker ended the response (immediate %v, ended %v)", rep.Immediate, rep.EndedByPicker)
	}
	return rep.Body, err
}

// Relay relays the response through the picker as Envoy does, message by
// message, and reports what the client gets, then closes the stream. It
// stops at the picker's immediate response or its end of the body, as
// Envoy does.
func (c *Call) Relay(r Response) (Reply, error) {
	defer c.cancel()
	if cl, ok := r.Body.(io.Closer); ok {
		defer cl.Close()
	}
	var rep Reply
	hm := headerMap(r.Headers, &corev3.HeaderValue{Key: ":status", RawValue: []byte(strconv.Itoa(r.Status))})
	msg := &extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseHeaders{
		ResponseHeaders: &extprocv3.HttpHeaders{Headers: hm, EndOfStream: len(r.Chunks) == 0 && r.Body == nil}}}
	if r.Served != "" {
		msg.MetadataContext = &corev3.Metadata{FilterMetadata: map[string]*structpb.Struct{
			"envoy.lb": {Fields: map[string]*structpb.Value{"x-gateway-destination-endpoint-served": structpb.NewStringValue(r.Served)}}}}
	}
	m, im, err := c.roundTrip(msg)
	if err != nil || im != nil {
		rep.Immediate = im
		return rep, err
	}
	if m.GetResponseHeaders() == nil {
		return rep, fmt.Errorf("epptest: want a response_headers answer, got %T", m.GetResponse())
	}
	rep.HeadersSent = true
	next := chunks(r)
	for {
		ch, last, err := next()
		if err != nil {
			return rep, err
		}
		if ch == nil && !last {
			break
		}
		var trailers map[string]string
		if last && r.Trailers != nil {
			trailers = r.Trailers()
		}
		if len(trailers) > 0 {
			if len(ch) > 0 {
				if err := c.send(bodyMsg(ch, false, true)); err != nil {
					return rep, err
				}
				if done, err := c.relayed(&rep, ch, false); err != nil || done {
					return rep, err
				}
			}
			m, im, err := c.roundTrip(&extprocv3.ProcessingRequest{Request: &extprocv3.ProcessingRequest_ResponseTrailers{
				ResponseTrailers: &extprocv3.HttpTrailers{Trailers: headerMap(trailers)}}})
			if err != nil || im != nil {
				rep.Immediate = im
				return rep, err
			}
			if m.GetResponseTrailers() == nil {
				return rep, fmt.Errorf("epptest: want a response_trailers answer, got %T", m.GetResponse())
			}
			break
		}
		if err := c.send(bodyMsg(ch, last, true)); err != nil {
			return rep, err
		}
		if done, err := c.relayed(&rep, ch, last); err != nil || done {
			return rep, err
		}
		if last {
			break
		}
	}
	if err := c.stream.CloseSend(); err != nil {
		return rep, err
	}
	// The picker ends its side once it has seen the end of the response.
	if _, err := c.stream.Recv(); err != nil && !errors.Is(err, io.EOF) {
		return rep, err
	}
	return rep, nil
}

// relayed reads the picker's answer to the response body chunk ch and
// adds what the client gets to rep; done is true when the picker ended the
// response (an immediate response, or its own end of the body).
func (c *Call) relayed(rep *Reply, ch []byte, last bool) (done bool, err error) {
	m, im, err := c.next()
	if err != nil || im != nil {
		rep.Immediate = im
		return im != nil, err
	}
	rb := m.GetResponseBody()
	if rb == nil {
		return false, fmt.Errorf("epptest: want a response_body answer, got %T", m.GetResponse())
	}
	if sr := rb.GetResponse().GetBodyMutation().GetStreamedResponse(); sr != nil {
		rep.Body = append(rep.Body, sr.GetBody()...)
		if sr.GetEndOfStream() && !last {
			rep.EndedByPicker = true
			return true, nil
		}
	} else if c.d.ResponseMode == FullDuplex {
		return false, errors.New("epptest: full duplex: response body chunk not streamed back")
	} else {
		rep.Body = append(rep.Body, ch...)
	}
	return false, nil
}

// chunks returns the response body's pieces one at a time: each with
// whether it is the last; (nil, false) when there is no body.
func chunks(r Response) func() ([]byte, bool, error) {
	if r.Body == nil {
		i := 0
		return func() ([]byte, bool, error) {
			if i >= len(r.Chunks) {
				return nil, false, nil
			}
			i++
			return r.Chunks[i-1], i == len(r.Chunks), nil
		}
	}
	// A reader's end is known only after its last piece: Envoy then sends
	// an empty chunk with end_of_stream.
	buf := make([]byte, 32<<10)
	ended := false
	return func() ([]byte, bool, error) {
		if ended {
			return nil, false, nil
		}
		n, err := r.Body.Read(buf)
		switch {
		case n > 0:
			return append([]byte(nil), buf[:n]...), false, nil
		case errors.Is(err, io.EOF):
			ended = true
			return []byte{}, true, nil
		case err != nil:
			return nil, false, err
		}
		return []byte{}, false, nil
	}
}

// Recv reads the picker's next message as it comes, for a test that
// waits for one the picker sends of its own accord (an immediate
// response after a preemption).
func (c *Call) Recv() (*extprocv3.ProcessingResponse, error) { return c.stream.Recv() }

// Cancel ends the stream as Envoy does when the client goes away.
func (c *Call) Cancel() { c.cancel() }
