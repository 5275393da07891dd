package epp_test

import (
	"context"
	"net"
	"strings"
	"testing"
	"time"

	extprocv3 "github.com/envoyproxy/go-control-plane/envoy/service/ext_proc/v3"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/epp"
	"github.com/llmesh/llmesh/epp/epptest"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
)

const (
	ep1 = "10.0.0.1:8000"
	ep2 = "10.0.0.2:8000"
)

// picker is a Server on a loopback gRPC server with its scheduler and a
// client connection.
type picker struct {
	srv    *epp.Server
	sched  *pools.MeshSet
	conn   *grpc.ClientConn
	client extprocv3.ExternalProcessorClient
	done   chan epp.Record
}

func startPicker(t testing.TB, mutate func(*epp.Config)) *picker {
	t.Helper()
	return startPickerMesh(t, "testdata/mesh.yaml", mutate)
}

func startPickerMesh(t testing.TB, meshFile string, mutate func(*epp.Config)) *picker {
	t.Helper()
	mesh, err := config.LoadFile(meshFile)
	if err != nil {
		t.Fatal(err)
	}
	ms, err := pools.NewMesh(mesh, nil)
	if err != nil {
		t.Fatal(err)
	}
	p := &picker{sched: ms, done: make(chan epp.Record, 1024)}
	cfg := epp.Config{Mesh: mesh, Admitter: ms.Set, Stats: ms.Stats, OnDone: func(r epp.Record) { p.done <- r }}
	if mutate != nil {
		mutate(&cfg)
	}
	p.srv, err = epp.New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if n := epp.Misuses(p.srv); n != 0 {
			t.Errorf("%d request lifecycle calls refused (a picker bug; see the log)", n)
		}
	})
	lis, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := grpc.NewServer()
	p.srv.Register(g)
	go func() { _ = g.Serve(lis) }()
	p.conn, err = grpc.NewClient(lis.Addr().String(), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	p.client = extprocv3.NewExternalProcessorClient(p.conn)
	t.Cleanup(func() {
		_ = p.conn.Close()
		g.Stop()
		_ = ms.Close()
	})
	return p
}

func (p *picker) driver(mode epptest.Mode) *epptest.Driver {
	return &epptest.Driver{Client: p.client, RequestMode: mode, ResponseMode: mode}
}

// stats is the test pool's snapshot.
func (p *picker) stats() scheduler.PoolStats {
	for _, s := range p.sched.Stats() {
		if s.Name == "llm" {
			return s
		}
	}
	return scheduler.PoolStats{}
}

func (p *picker) record(t testing.TB) epp.Record {
	t.Helper()
	select {
	case r := <-p.done:
		return r
	case <-time.After(5 * time.Second):
		t.Fatal("no record")
	}
	return epp.Record{}
}

func chat(extra map[string]string) epptest.Request {
	h := map[string]string{":method": "POST", ":path": "/v1/chat/completions", "content-type": "application/json"}
	for k, v := range extra {
		h[k] = v
	}
	return epptest.Request{Headers: h, Chunks: [][]byte{[]byte(chatBody)}}
}

// chatBody is a streaming chat request with max_tokens 100.
const chatBody = `{"model":"m","stream":true,"max_tokens":100,"messages":[{"role":"user","content":"` +
	"0123456789012345678901234567890123456789" + `"}]}`

// split cuts b into n nearly equal chunks.
func split(b string, n int) [][]byte {
	var out [][]byte
	size := (len(b) + n - 1) / n
	for len(b) > 0 {
		k := min(size, len(b))
		out = append(out, []byte(b[:k]))
		b = b[k:]
	}
	return out
}

func sse(tokens int) string {
	var b strings.Builder
	for i := 0; i < tokens; i++ {
		b.WriteString(`data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"content":"t"}}]}` + "\n\n")
	}
	b.WriteString("data: [DONE]\n\n")
	return b.String()
}

var modes = []struct {
	name string
	mode epptest.Mode
}{{"buffered", epptest.Buffered}, {"streamed", epptest.Streamed}, {"full_duplex", epptest.FullDuplex}}

func ctx(t testing.TB) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	t.Cleanup(cancel)
	return c
}
