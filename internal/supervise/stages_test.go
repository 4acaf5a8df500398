package supervise

import (
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
)

// Every move of a restart plan's and a lifecycle request's stage, legal
// or not: a legal one (or staying put) moves, any other panics naming
// both stages.
func TestOperationStageMoves(t *testing.T) {
	t.Run("restart plan", func(t *testing.T) {
		stages := []planStage{planStopping, planBackingOff, planStarting, planDone}
		legal := map[[2]planStage]bool{
			{planStopping, planBackingOff}: true, {planStopping, planDone}: true,
			{planBackingOff, planStarting}: true, {planBackingOff, planDone}: true,
			{planStarting, planDone}: true,
		}
		for _, from := range stages {
			for _, to := range stages {
				p := &restartPlan{stage: from}
				if from == to || legal[[2]planStage{from, to}] {
					assert.NotPanics(t, func() { p.become(to) }, "%s → %s", from, to)
					assert.Equal(t, to, p.stage)
					continue
				}
				assert.PanicsWithValue(t, fmt.Sprintf("supervisor: illegal restart plan move %s → %s", from, to), func() { p.become(to) })
				assert.Equal(t, from, p.stage, "an illegal move leaves the stage")
			}
		}
	})
	t.Run("lifecycle request", func(t *testing.T) {
		stages := []requestStage{requestStopping, requestStarting, requestDone}
		legal := map[[2]requestStage]bool{
			{requestStopping, requestStarting}: true, {requestStopping, requestDone}: true,
			{requestStarting, requestDone}: true,
		}
		for _, from := range stages {
			for _, to := range stages {
				r := &childRequest{stage: from}
				if from == to || legal[[2]requestStage{from, to}] {
					assert.NotPanics(t, func() { r.become(to) }, "%s → %s", from, to)
					assert.Equal(t, to, r.stage)
					continue
				}
				assert.PanicsWithValue(t, fmt.Sprintf("supervisor: illegal lifecycle request move %s → %s", from, to), func() { r.become(to) })
				assert.Equal(t, from, r.stage, "an illegal move leaves the stage")
			}
		}
	})

	// The other operations: each legal move (as its table lists it, the
	// table itself written out here again), staying put, and every other
	// move panicking with the operation's name and both stages.
	checkMoves(t, "start round",
		[]startStage{startPreflight, startWebhooks, startElecting, startStores, startControllers, startRunnables, startDone},
		[][2]startStage{
			{startPreflight, startWebhooks}, {startPreflight, startDone},
			{startWebhooks, startElecting}, {startWebhooks, startDone},
			{startElecting, startStores}, {startElecting, startRunnables}, {startElecting, startDone},
			{startStores, startControllers}, {startStores, startDone},
			{startControllers, startRunnables}, {startControllers, startDone},
			{startRunnables, startDone},
		},
		func(from startStage) (func(startStage), func() startStage) {
			a := &startAttempt{stage: from}
			return a.become, func() startStage { return a.stage }
		})
	checkMoves(t, "shutdown",
		[]shutdownStage{shutdownStopping, shutdownReleasing, shutdownDone},
		[][2]shutdownStage{{shutdownStopping, shutdownReleasing}, {shutdownStopping, shutdownDone}, {shutdownReleasing, shutdownDone}},
		func(from shutdownStage) (func(shutdownStage), func() shutdownStage) {
			a := &shutdownAttempt{stage: from}
			return a.become, func() shutdownStage { return a.stage }
		})
	checkMoves(t, "fencing",
		[]fenceStage{fenceStopping, fenceDone},
		[][2]fenceStage{{fenceStopping, fenceDone}},
		func(from fenceStage) (func(fenceStage), func() fenceStage) {
			f := &fencing{stage: from}
			return f.become, func() fenceStage { return f.stage }
		})
	checkMoves(t, "stop",
		[]stopStage{stopStopping, stopDone},
		[][2]stopStage{{stopStopping, stopDone}},
		func(from stopStage) (func(stopStage), func() stopStage) {
			r := &stopRequest{stage: from}
			return r.become, func() stopStage { return r.stage }
		})
	checkMoves(t, "shard hand-over",
		[]releaseStage{releaseControllers, releaseStores, releaseAfterShutdown, releaseDone},
		[][2]releaseStage{
			{releaseControllers, releaseStores}, {releaseControllers, releaseAfterShutdown}, {releaseControllers, releaseDone},
			{releaseStores, releaseDone}, {releaseAfterShutdown, releaseDone},
		},
		func(from releaseStage) (func(releaseStage), func() releaseStage) {
			r := &shardRelease{stage: from}
			return r.become, func() releaseStage { return r.stage }
		})
}

// checkMoves tries every move between stages on a fresh operation in from
// (made by at): the legal ones and staying put move, every other panics
// naming op and both stages, and leaves the stage.
func checkMoves[S interface {
	comparable
	String() string
}](t *testing.T, op string, stages []S, legal [][2]S, at func(from S) (func(S), func() S)) {
	t.Run(op, func(t *testing.T) {
		ok := map[[2]S]bool{}
		for _, m := range legal {
			ok[m] = true
		}
		for _, from := range stages {
			for _, to := range stages {
				become, stage := at(from)
				if from == to || ok[[2]S{from, to}] {
					assert.NotPanics(t, func() { become(to) }, "%s → %s", from, to)
					assert.Equal(t, to, stage())
					continue
				}
				assert.PanicsWithValue(t, fmt.Sprintf("supervisor: illegal %s move %s → %s", op, from, to), func() { become(to) })
				assert.Equal(t, from, stage(), "an illegal move leaves the stage")
			}
		}
	})
}
