package client

import (
	"errors"

	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
)

// FromMesh returns a client for the mesh's scheduler_service (address,
// failure mode, timeout). fallback is used when it fails open (see
// Options.Fallback). It is an error when the mesh has no scheduler_service.
func FromMesh(c *config.Config, fallback scheduler.Admitter) (*Client, error) {
	s := c.SchedulerService
	if s == nil {
		return nil, errors.New("scheduler client: the mesh config has no scheduler_service")
	}
	return New(s.Address, Options{FailOpen: s.FailOpen, Fallback: fallback, Timeout: s.Timeout})
}
