package server

import (
	"github.com/llmesh/llmesh/clock"
	"github.com/llmesh/llmesh/config"
	"github.com/llmesh/llmesh/scheduler"
	"github.com/llmesh/llmesh/scheduler/pools"
)

// The service schedules through the process's scheduler set
// (scheduler/pools); these names are that set's, under which the service's
// code and its users know it.
type (
	// Schedulers is pools.Set.
	Schedulers = pools.Set
	// MeshScheduler is pools.MeshSet.
	MeshScheduler = pools.MeshSet
)

// NewSchedulers is pools.New.
func NewSchedulers(cfg scheduler.Config, clk clock.Clock) (*Schedulers, error) {
	return pools.New(cfg, clk)
}

// NewMeshScheduler is pools.NewMesh.
func NewMeshScheduler(c *config.Config, clk clock.Clock) (*MeshScheduler, error) {
	return pools.NewMesh(c, clk)
}

// MeshConfig is pools.Config, the one place a mesh config becomes
// scheduler config.
func MeshConfig(c *config.Config) (scheduler.Config, error) { return pools.Config(c) }
