package client

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/llmesh/llmesh/bench/benchtest"
	"github.com/llmesh/llmesh/bench/result"
	"github.com/llmesh/llmesh/bench/workload"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func clockFrom(start time.Time) Clock { return func() int64 { return int64(time.Since(start)) } }

func do(t *testing.T, c Client, req Request) result.Record {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var rec result.Record
	c.Do(ctx, &req, &rec, clockFrom(time.Now().Add(-time.Second)))
	return rec
}

func TestProtocols(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{TTFT: 20 * time.Millisecond, ITL: time.Millisecond, EngineTimes: true})
	for _, tc := range []struct {
		protocol, target string
		stream           bool
	}{
		{workload.ProtocolCompletions, srv.HTTPURL, true},
		{workload.ProtocolChat, srv.HTTPURL + "/v1", true},
		{workload.ProtocolCompletions, strings.TrimPrefix(srv.HTTPURL, "http://"), false},
		{workload.ProtocolGRPC, "grpc://" + srv.GRPCAddr, true},
	} {
		t.Run(tc.protocol, func(t *testing.T) {
			c, err := New(tc.protocol, tc.target, 0)
			if err != nil {
				t.Fatal(err)
			}
			defer c.Close()
			rec := do(t, c, Request{ID: "1", Model: "m", PromptTokens: 5, MaxTokens: 8, Stream: tc.stream, Headers: map[string]string{"x-a": "b"}})
			if rec.Status != result.StatusOK || rec.OutputTokens != 8 {
				t.Fatalf("record %+v", rec)
			}
			ttft, ok := rec.TTFT()
			if !ok || ttft < 20*time.Millisecond || ttft > 10*time.Second {
				t.Errorf("ttft %v %v", ttft, ok)
			}
			wantChunks := 8
			if !tc.stream {
				wantChunks = 1
			}
			if len(rec.ChunkNS) != wantChunks || rec.ChunkNS[0] != rec.FirstTokenNS || rec.DoneNS < rec.ChunkNS[len(rec.ChunkNS)-1] {
				t.Errorf("chunks %v first %d done %d", rec.ChunkNS, rec.FirstTokenNS, rec.DoneNS)
			}
			// The server sleeps 20 ms, then 1 ms between tokens; reads may
			// bunch up on a loaded machine, but never come early.
			for i := 1; i < len(rec.ChunkNS); i++ {
				if rec.ChunkNS[i] < rec.ChunkNS[i-1] {
					t.Errorf("chunk %d at %d before the previous one", i, rec.ChunkNS[i])
				}
			}
			if tc.stream && rec.ChunkNS[len(rec.ChunkNS)-1]-rec.SentNS < int64(27*time.Millisecond) {
				t.Errorf("last chunk %v after sending, want ≥ 27ms", time.Duration(rec.ChunkNS[len(rec.ChunkNS)-1]-rec.SentNS))
			}
			if rec.Engine == nil || rec.Engine.FirstTokenNS-rec.Engine.ArrivalNS < int64(20*time.Millisecond) {
				t.Errorf("engine times %+v", rec.Engine)
			}
		})
	}
}

func TestFaults(t *testing.T) {
	srv := benchtest.Start(t, benchtest.Config{})
	for _, tc := range []struct {
		protocol, fault string
		want            result.Status
		code            int
		msg             string
		tokens          int
	}{
		{workload.ProtocolCompletions, "429", result.StatusRejected, 429, "HTTP 429", 0},
		{workload.ProtocolCompletions, "503", result.StatusPreempted, 503, "HTTP 503", 0},
		{workload.ProtocolCompletions, "500", result.StatusError, 500, "boom", 0},
		{workload.ProtocolCompletions, "drop-after=3", result.StatusDropped, 0, "without data: [DONE]", 3},
		{workload.ProtocolCompletions, "error-event", result.StatusError, 0, "upstream failed", 1},
		{workload.ProtocolCompletions, "invalid", result.StatusError, 0, "invalid SSE event", 1},
		{workload.ProtocolGRPC, "429", result.StatusRejected, 8, "ResourceExhausted", 0},
		{workload.ProtocolGRPC, "503", result.StatusPreempted, 14, "Unavailable", 0},
		{workload.ProtocolGRPC, "drop-after=2", result.StatusError, 13, "stream dropped", 2},
	} {
		target := srv.HTTPURL
		if tc.protocol == workload.ProtocolGRPC {
			target = srv.GRPCAddr
		}
		c, err := New(tc.protocol, target, 0)
		if err != nil {
			t.Fatal(err)
		}
		rec := do(t, c, Request{ID: "x", MaxTokens: 5, Stream: true, Headers: map[string]string{benchtest.FaultHeader: tc.fault}})
		c.Close()
		if rec.Status != tc.want || rec.Code != tc.code || !strings.Contains(rec.Error, tc.msg) || rec.OutputTokens != tc.tokens {
			t.Errorf("%s %s: status %q code %d tokens %d error %q; want %q %d %d %q", tc.protocol, tc.fault, rec.Status, rec.Code, rec.OutputTokens, rec.Error, tc.want, tc.code, tc.tokens, tc.msg)
		}
		if rec.DoneNS < rec.SentNS || rec.SentNS == 0 {
			t.Errorf("%s %s: sent %d done %d", tc.protocol, tc.fault, rec.SentNS, rec.DoneNS)
		}
	}
}

func TestUnreachableAndTimeout(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close() // nothing listens here now
	// A dead port is told apart from a target that answered badly, so a
	// run against it can stop early and say why.
	for _, p := range []string{workload.ProtocolCompletions, workload.ProtocolGRPC} {
		c, err := New(p, addr, 0)
		if err != nil {
			t.Fatal(err)
		}
		rec := do(t, c, Request{ID: "1", MaxTokens: 2, Stream: true})
		c.Close()
		if rec.Status != result.StatusUnreachable || !strings.Contains(rec.Error, "refused") {
			t.Errorf("%s: %q %q, want unreachable mentioning connection refused", p, rec.Status, rec.Error)
		}
	}
	srv := benchtest.Start(t, benchtest.Config{TTFT: 5 * time.Second})
	c, _ := New(workload.ProtocolCompletions, srv.HTTPURL, 0)
	defer c.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	var rec result.Record
	c.Do(ctx, &Request{MaxTokens: 2, Stream: true}, &rec, clockFrom(time.Now()))
	if rec.Status != result.StatusTimeout {
		t.Errorf("status %q (%s), want timeout", rec.Status, rec.Error)
	}
}

func TestNewRejectsBadTargets(t *testing.T) {
	for _, tc := range []struct{ protocol, target, want string }{
		{workload.ProtocolCompletions, "", "target: must be set"},
		{workload.ProtocolCompletions, "ftp://x", "scheme must be http"},
		{workload.ProtocolGRPC, "http://x:1", "want host:port"},
		{workload.ProtocolGRPC, "x:99999", "port must be"},
		{"smoke-signals", "x:1", "protocol:"},
	} {
		if _, err := New(tc.protocol, tc.target, 0); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("New(%q, %q) = %v, want %q", tc.protocol, tc.target, err, tc.want)
		}
	}
}

func TestPrompt(t *testing.T) {
	p := Prompt(42, 100)
	if n := len(strings.Fields(p)); n != 100 || !strings.HasPrefix(p, "r42 ") {
		t.Errorf("Prompt(42, 100) has %d words: %.40q", n, p)
	}
	if Prompt(1, 0) != "" {
		t.Error("Prompt(1, 0) not empty")
	}
}
