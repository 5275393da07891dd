package gateway

import (
	"fmt"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/exchange"
)

// CheckMesh reports whether the gateway part of c (listener, pools, arm
// pools, routes, classification) is valid, so that a host applies the
// scheduler part of a reload only when the gateway part (ApplyMesh) will
// follow. It changes nothing.
func CheckMesh(c *config.Config, listener string) error {
	cfg, err := ConfigFromMesh(c, listener)
	if err != nil {
		return err
	}
	if _, err := compile(cfg, nil); err != nil {
		return err
	}
	if _, err := exchange.NewClassifierFromConfig(c); err != nil {
		return fmt.Errorf("classification: %w", err)
	}
	return nil
}
