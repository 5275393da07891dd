package main

import (
	"bytes"
	"context"
	"errors"
	"strings"
	"testing"
)

func TestGatewayFlagErrorsAllAtOnce(t *testing.T) {
	var out, errOut bytes.Buffer
	err := runGateway(context.Background(), []string{"--max-body", "-1", "--drain", "-1s", "extra"}, &out, &errOut)
	var ec *exitCode
	if !errors.As(err, &ec) || ec.code != 2 {
		t.Fatalf("err = %v, want exit code 2", err)
	}
	for _, want := range []string{"unexpected arguments", "--max-body", "--drain", "--upstream", "--listen"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("error %q does not mention %s", err, want)
		}
	}
	err = runGateway(context.Background(), []string{"--config", "mesh.yaml", "--upstream", "http://x"}, &out, &errOut)
	if err == nil || !strings.Contains(err.Error(), "quick-mode flags") {
		t.Errorf("--config with --upstream: %v", err)
	}
}
