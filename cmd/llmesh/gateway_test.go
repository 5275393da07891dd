package main

import (
	"strings"
	"testing"
)

func TestGatewayFlagErrorsAllAtOnce(t *testing.T) {
	wantUsage(t, mainErr("gateway", "--max-body", "-1", "--drain", "-1s", "extra"),
		"unexpected arguments", "--max-body", "--drain", "--upstream", "--listen")
	err := mainErr("gateway", "--config", "mesh.yaml", "--upstream", "http://x")
	if err == nil || !strings.Contains(err.Error(), "quick-mode flags") {
		t.Errorf("--config with --upstream: %v", err)
	}
}
