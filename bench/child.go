package main

import (
	"context"
	"fmt"
	"sync/atomic"
)

// healthStatus mirrors controllermanager.HealthStatus, so that the peers build
// without the library.
type healthStatus struct {
	Name    string
	Healthy bool
	Message string
}

// child is the trivial workload every system hosts, shaped like a seed Controller:
// Run returns nil at once (it has "started"), health is always good, Shutdown returns
// at once. It owns no goroutine, so goroutines and heap measured per child are the
// hosting system's alone.
//
// Each Run signals ran, which is how the harness sees a child running; runs and
// shutdowns let it check that every run was shut down.
type child struct {
	name      string
	ran       chan struct{} // capacity 1: a Run happened since the harness last looked
	runs      atomic.Int32
	shutdowns atomic.Int32
}

// newChildren returns n fresh children named child-0 … child-(n-1).
func newChildren(n int) []*child {
	children := make([]*child, n)
	for i := range children {
		children[i] = &child{name: fmt.Sprintf("child-%d", i), ran: make(chan struct{}, 1)}
	}
	return children
}

// Run marks the child running and returns nil.
func (c *child) Run(context.Context) error {
	c.runs.Add(1)
	select {
	case c.ran <- struct{}{}:
	default:
	}
	return nil
}

// Shutdown counts the call and returns.
func (c *child) Shutdown(context.Context) { c.shutdowns.Add(1) }

// GetHealth reports the child healthy.
func (c *child) GetHealth() healthStatus { return healthStatus{Name: c.name, Healthy: true} }

// waitRunning waits until the child has run since the harness last looked.
func (c *child) waitRunning(ctx context.Context) error {
	select {
	case <-c.ran:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%s never ran: %w", c.name, ctx.Err())
	}
}

// forgetRuns clears a pending ran signal, before a restart is timed.
func (c *child) forgetRuns() {
	select {
	case <-c.ran:
	default:
	}
}
