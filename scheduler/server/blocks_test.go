package server

import (
	"strings"
	"testing"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"

	"github.com/llmesh/llmesh/kvblock"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/policy/fifo"
)

// A Start's blocks become the request's; too many of them, or a 0 among
// them, is an InvalidArgument naming start.blocks.
func TestStartBlocksValidation(t *testing.T) {
	sched, err := scheduler.New(scheduler.Config{
		Pools:   []scheduler.PoolConfig{{Name: "gpu", MaxInflight: 1, Policy: fifo.New()}},
		Classes: []scheduler.ClassConfig{{Name: "batch"}},
	}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer sched.Close()
	srv := New(sched, nil)

	var ok startMsg
	for i := range 3 {
		ok.addBlock(uint64(i + 1))
	}
	req, err := srv.request(&ok)
	if err != nil || len(req.Blocks) != 3 || req.Blocks[2] != kvblock.Hash(3) {
		t.Fatalf("request = %+v, %v; want blocks 1, 2, 3", req, err)
	}

	var many startMsg
	for i := range scheduler.MaxBlocks + 10 {
		many.addBlock(uint64(i + 1))
	}
	if len(many.blocks) != scheduler.MaxBlocks+1 {
		t.Errorf("kept %d blocks of %d, want %d", len(many.blocks), many.nBlocks, scheduler.MaxBlocks+1)
	}
	zero := startMsg{blocks: []kvblock.Hash{4, 0}, nBlocks: 2}
	for _, tc := range []struct {
		m    startMsg
		want string
	}{
		{many, "start.blocks: 8202 blocks, at most 8192"},
		{zero, "start.blocks[1]: 0 is not a block hash"},
	} {
		_, err := srv.request(&tc.m)
		if status.Code(err) != codes.InvalidArgument || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("request: %v, want InvalidArgument with %q", err, tc.want)
		}
	}
}
