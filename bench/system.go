package main

import "context"

// system is one way to run children: a peer, or ours. A value serves one cycle:
// Start, then any number of health sweeps and failures, then Shutdown.
type system interface {
	// Name is the system's column header.
	Name() string
	// Start hosts children and starts them. It may return before every child has run:
	// the harness waits for that itself, and times both together.
	Start(ctx context.Context, children []*child) error
	// Shutdown stops every child and returns once the system has stopped.
	Shutdown(ctx context.Context) error
}

// healthSweeper is a system with a way to gather its children's health.
type healthSweeper interface {
	// HealthSweep gathers the health of every child, the way the system does it,
	// and returns how many are healthy.
	HealthSweep(ctx context.Context) (healthy int, err error)
}

// restarter is a system that supervises its children and restarts a failed one.
type restarter interface {
	// Fail makes child i fail the way the system supervises failures. It returns at
	// once; the harness times how long until the child runs again.
	Fail(ctx context.Context, i int) error
}

// allSystems are every system, in column order: the peers ours is compared with,
// then ours.
var allSystems = []func() system{
	func() system { return &seedSystem{} },
	func() system { return &controllerRuntimeSystem{} },
	func() system { return &sutureSystem{} },
	func() system { return &protoactorSystem{} },
	func() system { return &oursSystem{} },
}
