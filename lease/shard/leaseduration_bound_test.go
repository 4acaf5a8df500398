package shard_test

import (
	"math"
	"strings"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/lease/shard"
)

// A LeaseDuration past an int32 of seconds cannot be recorded in a Lease
// (spec.leaseDurationSeconds): shard.New refuses it, as the manager's
// config does (leaderElection.leaseDuration), instead of writing an
// overflowed, negative leaseDurationSeconds.
func TestNewRefusesLeaseDurationPastInt32Seconds(t *testing.T) {
	for _, c := range []struct {
		ld time.Duration
		ok bool
	}{
		{math.MaxInt32 * time.Second, true},
		{(math.MaxInt32 + 1) * time.Second, false},
		{1_000_000 * time.Hour, false},
	} {
		_, err := shard.New(shard.Config{Client: leasetest.NewServer().Client("a"), Namespace: "ns", Name: "big", Identity: "a", Shards: 1,
			LeaseDuration: c.ld, RenewDeadline: time.Second, RetryPeriod: 100 * time.Millisecond, SingleLease: true})
		if (err == nil) != c.ok {
			t.Errorf("LeaseDuration %s: want accepted=%v, got %v", c.ld, c.ok, err)
		}
		if err != nil && !strings.Contains(err.Error(), "int32 of seconds") {
			t.Errorf("LeaseDuration %s: the error does not say why: %v", c.ld, err)
		}
	}
}
