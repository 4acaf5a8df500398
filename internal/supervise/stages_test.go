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
}
