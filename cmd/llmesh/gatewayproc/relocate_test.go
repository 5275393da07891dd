package gatewayproc

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/metadata"

	"github.com/llmesh/llmesh/api/llmv1"
	"github.com/llmesh/llmesh/sim/simtest"
)

// TestRunRelocatesGRPCPromptToSim: a grpc-go client sends a 2 MiB prompt in
// metadata through the gateway to the sim; the gateway's client side
// accepts the header, the prompt arrives in GenerateRequest.prompt (the
// sim counts its words), and the relocation counters move.
func TestRunRelocatesGRPCPromptToSim(t *testing.T) {
	sim := simtest.Start(t)
	mesh := strings.Replace(relocMesh, "[SIM]", "["+sim.GRPCAddr+"]", 1)
	path := filepath.Join(t.TempDir(), "mesh.yaml")
	if err := os.WriteFile(path, []byte(mesh), 0o644); err != nil {
		t.Fatal(err)
	}
	data, admin := startRun(t, Config{ConfigPath: path, Listen: "127.0.0.1:0", Admin: "127.0.0.1:0",
		Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})

	// Words of 100 letters: 2 MiB is ~21,000 tokens, within the sim's context.
	word := strings.Repeat("w", 99) + " "
	words := (2<<20)/len(word) + 1
	prompt := strings.TrimSpace(strings.Repeat(word, words))

	cc, err := grpc.NewClient(strings.TrimPrefix(data, "http://"), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		t.Fatal(err)
	}
	defer cc.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ctx = metadata.AppendToOutgoingContext(ctx, "x-prompt-raw", prompt)
	st, err := llmv1.NewGenerationClient(cc).Generate(ctx, &llmv1.GenerateRequest{Model: sim.Model, MaxTokens: 2})
	if err != nil {
		t.Fatal(err)
	}
	var promptTokens uint32
	for {
		r, err := st.Recv()
		if err == io.EOF {
			break
		}
		if err != nil {
			t.Fatalf("Recv: %v", err)
		}
		if u := r.GetUsage(); u != nil {
			promptTokens = u.GetPromptTokens()
		}
	}
	if int(promptTokens) != words {
		t.Fatalf("sim counted %d prompt tokens, want %d: the metadata prompt did not reach the body", promptTokens, words)
	}

	relocs := regexp.MustCompile(`(?m)^llmesh_relocations_total\{[^}]*\} (\S+)`)
	bytesRe := regexp.MustCompile(`(?m)^llmesh_relocated_bytes_total\{[^}]*\} (\S+)`)
	scrapes.UntilNil(t, "the relocation in the metrics", func() error {
		_, body := get(t, admin+"/metrics")
		m, b := relocs.FindStringSubmatch(body), bytesRe.FindStringSubmatch(body)
		if m == nil || b == nil {
			return fmt.Errorf("metrics:\n%s", grepLines(body, "reloc"))
		}
		n, _ := strconv.ParseFloat(m[1], 64)
		moved, _ := strconv.ParseFloat(b[1], 64)
		if n != 1 || moved != float64(len(prompt)) {
			t.Fatalf("relocations %s, bytes %s; want 1 and %d", m[1], b[1], len(prompt))
		}
		return nil
	})
}

func grepLines(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return strings.Join(out, "\n")
}
