package main

import (
	"context"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// A short fleet soak: every kind of fault many times over a few members,
// then the settle, the books and the shutdown. It is what `-fleet` runs
// for hours, kept from rotting.
func TestFleetSoakShort(t *testing.T) {
	err := runFleetSoak(context.Background(), fleetSoakConfig{
		members: 6, duration: 3 * time.Second, interval: time.Second, faultRate: 60, seed: 1, quiet: true,
	})
	if err != nil {
		t.Fatal(err)
	}
}
