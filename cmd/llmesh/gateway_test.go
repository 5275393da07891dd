package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
)

func TestGatewayFlagErrorsAllAtOnce(t *testing.T) {
	var out, errOut bytes.Buffer
	err := runGateway(context.Background(), []string{"--max-body", "-1", "--drain", "-1s", "extra"}, &out, &errOut)
	wantUsage(t, err, "unexpected arguments", "--max-body", "--drain", "--upstream", "--listen")
	err = runGateway(context.Background(), []string{"--config", "mesh.yaml", "--upstream", "http://x"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "quick-mode flags") {
		t.Errorf("--config with --upstream: %v", err)
	}
}
