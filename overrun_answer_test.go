package controllermanager_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/internal/testkit/testchild"
)

// shutdownHeldUntilItsContextEnds is a controller whose Shutdown says it
// was entered and returns once its context ends: one that honours its
// context, and so returns just after it, which overruns it by the rule.
func shutdownHeldUntilItsContextEnds() (*testchild.Controller, chan struct{}) {
	entered := make(chan struct{}, 1)
	return testchild.NewController("c", testchild.Behavior{Shutdown: func(ctx context.Context, n int) {
		entered <- struct{}{}
		<-ctx.Done()
	}}), entered
}

// One shutdown, one answer. A ShutdownAndWait whose context ended before
// the last Shutdown returned has overrun; another caller with no deadline
// used to read nil from Err when it returned, and then, once the first
// caller had reported, an *UnstoppedError (found by a review: 2 to 9 runs
// in 100). Every reader now reads the overrun.
func TestShutdownOverrunIsEveryCallersAnswer(t *testing.T) {
	c, entered := shutdownHeldUntilItsContextEnds()
	m := newManager(t, nil, nil)
	m.Add(c)
	require.NoError(t, m.Start(context.Background(), 0))
	sctx, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer scancel()
	sErr := make(chan error, 1)
	go func() { m.ShutdownAndWait(sctx); sErr <- m.Err() }()
	<-entered
	m.ShutdownAndWait(context.Background())
	lerr := m.Err()
	require.ErrorIs(t, <-sErr, cm.ErrUnstopped)
	require.ErrorIs(t, lerr, cm.ErrUnstopped, "the second caller read another answer than the first")
}

// The same, read at Done by a host and by Serve, with the overrunning
// ShutdownAndWait a preStop hook's.
func TestShutdownOverrunIsServesAndDonesAnswer(t *testing.T) {
	c, entered := shutdownHeldUntilItsContextEnds()
	m := newManager(t, nil, nil)
	m.Add(c)
	serveCtx, stop := context.WithCancel(context.Background())
	defer stop()
	served := make(chan error, 1)
	go func() { served <- m.Serve(serveCtx, time.Minute, time.Minute) }()
	require.True(t, testchild.Eventually(wait, m.IsStarted))
	sctx, scancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer scancel()
	sDone := make(chan struct{})
	go func() { m.ShutdownAndWait(sctx); close(sDone) }()
	<-entered
	<-m.Done()
	doneErr := m.Err()
	serveErr := <-served
	<-sDone
	require.ErrorIs(t, m.Err(), cm.ErrUnstopped)
	assert.ErrorIs(t, serveErr, cm.ErrUnstopped, "Serve returned another answer")
	assert.ErrorIs(t, doneErr, cm.ErrUnstopped, "Err read at Done is another answer")
}
