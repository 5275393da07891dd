package scheduler

// Hooks for the external tests of this package (package scheduler_test),
// which can import the registered policies that the internal ones cannot.
var (
	// StepUngated is Step without the preemptCanAct guard.
	StepUngated = stepUngated
	// FleetConfig is the internal tests' fleet pool (fleetConfig).
	FleetConfig = fleetConfig
	// PlainPreemptor is the internal tests' Preemptor (prioPolicy).
	PlainPreemptor Policy = prioPolicy{}
)
