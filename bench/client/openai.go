package client

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"time"

	"github.com/llmesh/llmesh/bench/result"
)

// maxErrorBody bounds how much of an error response is kept.
const maxErrorBody = 512

// maxEvent bounds one SSE event; a longer line is a protocol error.
const maxEvent = 1 << 20

type openAI struct {
	chat bool
	url  string
	hc   *http.Client
}

func newOpenAI(chat bool, url string, maxConns int) *openAI {
	if maxConns <= 0 {
		maxConns = 1024
	}
	tr := &http.Transport{
		Proxy:               nil, // benchmarks talk to the target directly
		DialContext:         (&net.Dialer{Timeout: 10 * time.Second, KeepAlive: 30 * time.Second}).DialContext,
		MaxIdleConns:        maxConns,
		MaxIdleConnsPerHost: maxConns,
		IdleConnTimeout:     90 * time.Second,
		DisableCompression:  true, // compression would delay and batch chunks
		WriteBufferSize:     16 << 10,
		ReadBufferSize:      16 << 10,
	}
	return &openAI{chat: chat, url: url, hc: &http.Client{Transport: tr}}
}

func (c *openAI) Close() error {
	c.hc.CloseIdleConnections()
	return nil
}

// chunk is the part of an OpenAI completion/chat chunk (or non-streamed
// body) the harness reads.
type chunk struct {
	Choices []struct {
		Text  string `json:"text"`
		Delta struct {
			Content string `json:"content"`
		} `json:"delta"`
		Message struct {
			Content string `json:"content"`
		} `json:"message"`
	} `json:"choices"`
	Usage *struct {
		CompletionTokens int `json:"completion_tokens"`
	} `json:"usage"`
	Error *struct {
		Message string `json:"message"`
		Type    string `json:"type"`
	} `json:"error"`
	Engine *result.EngineTimes `json:"llmesh_engine"`
}

func (ch *chunk) hasToken() bool {
	for _, c := range ch.Choices {
		if c.Text != "" || c.Delta.Content != "" || c.Message.Content != "" {
			return true
		}
	}
	return false
}

func (c *openAI) body(req *Request) []byte {
	return appendBody(make([]byte, 0, 192+4*req.PromptTokens), req, c.chat)
}

func (c *openAI) Do(ctx context.Context, req *Request, rec *result.Record, now Clock) {
	hr, err := http.NewRequestWithContext(ctx, http.MethodPost, c.url, bytes.NewReader(c.body(req)))
	if err != nil {
		fail(rec, now, result.StatusError, 0, err.Error())
		return
	}
	hr.Header.Set("Content-Type", "application/json")
	if req.Stream {
		hr.Header.Set("Accept", "text/event-stream")
	}
	if req.ID != "" {
		hr.Header.Set("X-Request-Id", req.ID)
	}
	for k, v := range req.Headers {
		hr.Header.Set(k, v)
	}
	rec.SentNS = now()
	resp, err := c.hc.Do(hr)
	if err != nil {
		st := ctxStatus(ctx)
		if st == result.StatusError && unreachable(err) {
			st = result.StatusUnreachable
		}
		fail(rec, now, st, 0, err.Error())
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(io.LimitReader(resp.Body, maxErrorBody))
		msg := fmt.Sprintf("HTTP %d: %s", resp.StatusCode, bytes.TrimSpace(b))
		st := classifyHTTP(resp.StatusCode, resp.Header.Get("Retry-After") != "")
		if st == result.StatusError && preemptedText(string(b)) {
			st = result.StatusPreempted
		}
		if st == result.StatusRejected && queueFull(resp.Header.Get("X-Llmesh-Reply"), string(b)) {
			st = result.StatusQueueFull
		}
		fail(rec, now, st, resp.StatusCode, msg)
		return
	}
	readServerTiming(rec, resp.Header.Values("Server-Timing"))
	if !req.Stream {
		c.readBody(ctx, resp.Body, rec, now)
	} else {
		c.readStream(ctx, resp.Body, rec, now)
	}
	if _, announced := resp.Trailer["Server-Timing"]; announced && rec.Status == result.StatusOK {
		// Trailers arrive after the body's end, just past [DONE].
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxErrorBody))
		readServerTiming(rec, resp.Trailer.Values("Server-Timing"))
	}
}

func (c *openAI) readBody(ctx context.Context, body io.Reader, rec *result.Record, now Clock) {
	b, err := io.ReadAll(io.LimitReader(body, 64<<20))
	t := now()
	if err != nil {
		fail(rec, now, ctxStatus(ctx), 0, "reading body: "+err.Error())
		return
	}
	var ch chunk
	if err := json.Unmarshal(b, &ch); err != nil {
		fail(rec, now, result.StatusError, 0, "invalid JSON body: "+err.Error())
		return
	}
	if ch.Error != nil {
		fail(rec, now, errStatus(ch.Error.Message+" "+ch.Error.Type), 0, "error: "+ch.Error.Message)
		return
	}
	rec.Engine = ch.Engine
	if ch.Usage != nil {
		rec.OutputTokens, rec.OutputTokensSource = ch.Usage.CompletionTokens, result.SourceUsage
	}
	if ch.hasToken() || rec.OutputTokens > 0 {
		rec.FirstTokenNS = t
		rec.ChunkNS = []int64{t}
	}
	rec.DoneNS = t
	rec.Status = result.StatusOK
}

// readStream reads SSE events, timestamping each data event as its line
// arrives.
func (c *openAI) readStream(ctx context.Context, body io.Reader, rec *result.Record, now Clock) {
	br := bufio.NewReaderSize(body, 16<<10)
	var (
		ch      chunk
		counted int
		usage   = -1
		data    []byte
	)
	for {
		line, err := br.ReadSlice('\n')
		if errors.Is(err, bufio.ErrBufferFull) {
			// A long event: gather it up to maxEvent.
			buf := append([]byte(nil), line...)
			for errors.Is(err, bufio.ErrBufferFull) && len(buf) < maxEvent {
				line, err = br.ReadSlice('\n')
				buf = append(buf, line...)
			}
			if errors.Is(err, bufio.ErrBufferFull) {
				fail(rec, now, result.StatusError, 0, fmt.Sprintf("SSE event longer than %d bytes", maxEvent))
				return
			}
			line = buf
		}
		if len(line) == 0 && err != nil {
			st := result.StatusDropped
			msg := "stream ended without data: [DONE]"
			if !errors.Is(err, io.EOF) {
				st, msg = ctxStatus(ctx), "stream: "+err.Error()
				if st == result.StatusError {
					st = result.StatusDropped
				}
			}
			rec.OutputTokens = max(usage, counted)
			fail(rec, now, st, 0, msg)
			return
		}
		t := now()
		line = bytes.TrimRight(line, "\r\n")
		if !bytes.HasPrefix(line, []byte("data:")) {
			continue // blank separators, comments, event:/id: fields
		}
		data = bytes.TrimSpace(line[5:])
		if bytes.Equal(data, []byte("[DONE]")) {
			setOutput(rec, counted, usage)
			rec.DoneNS = t
			rec.Status = result.StatusOK
			return
		}
		if f, ok := fastEvent(data); ok {
			if f.hasEngine {
				e := f.engine
				rec.Engine = &e
			}
			if f.usage >= 0 {
				usage = f.usage
			}
			if f.token {
				if rec.FirstTokenNS == 0 {
					rec.FirstTokenNS = t
				}
				rec.ChunkNS = append(rec.ChunkNS, t)
				counted++
			}
			continue
		}
		ch = chunk{}
		if err := json.Unmarshal(data, &ch); err != nil {
			rec.OutputTokens = counted
			fail(rec, now, result.StatusError, 0, "invalid SSE event: "+err.Error())
			return
		}
		if ch.Error != nil {
			rec.OutputTokens = counted
			fail(rec, now, errStatus(ch.Error.Message+" "+ch.Error.Type), 0, "error event: "+ch.Error.Message)
			return
		}
		if ch.Engine != nil {
			rec.Engine = ch.Engine
		}
		if ch.Usage != nil {
			usage = ch.Usage.CompletionTokens
		}
		if ch.hasToken() {
			if rec.FirstTokenNS == 0 {
				rec.FirstTokenNS = t
			}
			rec.ChunkNS = append(rec.ChunkNS, t)
			counted++
		}
	}
}

func errStatus(msg string) result.Status {
	if preemptedText(msg) {
		return result.StatusPreempted
	}
	return result.StatusError
}

// fail records a failure at the current time.
func fail(rec *result.Record, now Clock, st result.Status, code int, msg string) {
	rec.DoneNS = now()
	if rec.SentNS == 0 {
		rec.SentNS = rec.DoneNS
	}
	rec.Status = st
	rec.Code = code
	rec.Error = msg
}

// unreachable reports an error of a connection that could not be made
// (refused, no route, an unknown host), as opposed to one that broke.
func unreachable(err error) bool {
	var op *net.OpError
	var dns *net.DNSError
	return errors.As(err, &dns) || errors.As(err, &op) && op.Op == "dial"
}

// ctxStatus tells a timeout or run cancellation from other failures.
func ctxStatus(ctx context.Context) result.Status {
	switch {
	case errors.Is(ctx.Err(), context.DeadlineExceeded):
		return result.StatusTimeout
	case ctx.Err() != nil:
		return result.StatusCancelled
	}
	return result.StatusError
}

func (r *Request) seed() int {
	n, err := strconv.Atoi(r.ID)
	if err != nil {
		h := 0
		for _, c := range r.ID {
			h = h*31 + int(c)
		}
		return h & 0x7fffffff
	}
	return n
}
