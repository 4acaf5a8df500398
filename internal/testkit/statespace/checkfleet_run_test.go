package statespace

import (
	"context"
	"testing"
	"time"
)

// A member rotated five seconds into an outage is said Offline by its new
// config's first probe, never Online: a sequence of a real manager that
// online-while-down judges, past its bound, and that breaks nothing. With
// the probe mutated to take any answer (a 500 too) as ready, it breaks
// online-while-down (and offline-late); so does any fleet that says a
// rotated member Online on the verdict of its old config.
func TestFleetRotatedDuringAnOutageRuns(t *testing.T) {
	if testing.Short() {
		t.Skip("a sequence of seven seconds")
	}
	sc := Scenario{Name: "rotated-during-an-outage", Seed: 1, Strategy: "OneForOne", Controllers: 1, Fleet: 1, Steps: []Step{
		{Do: DoStart},
		{Do: DoWait, Dur: 500 * time.Millisecond},
		{Do: DoClusterDown, Child: "c0"},
		{Do: DoWait, Dur: 5 * time.Second},
		{Do: DoRotate, Child: "c0"},
		{Do: DoWait, Dur: time.Second},
	}}
	res := Run(context.Background(), sc, Config{})
	for _, v := range res.Violations {
		t.Errorf("%s", v)
	}
	if t.Failed() {
		t.Logf("%s", res.Report())
	}
}
