package shard_test

import (
	"strings"
	"testing"
	"time"

	"github.com/actorkube/controllermanager/lease/leasetest"
	"github.com/actorkube/controllermanager/lease/shard"
)

// A RetryPeriod under 100ms is refused, as the manager's config refuses
// leaderElection.retryPeriod, with an error naming the field and the value.
func TestNewRefusesRetryPeriodUnder100ms(t *testing.T) {
	for _, c := range []struct {
		rp time.Duration
		ok bool
	}{
		{100 * time.Millisecond, true},
		{99 * time.Millisecond, false},
		{time.Nanosecond, false},
		{0, false},
		{-time.Second, false},
	} {
		_, err := shard.New(shard.Config{Client: leasetest.NewServer().Client("a"), Namespace: "ns", Name: "g", Identity: "a", Shards: 2,
			LeaseDuration: 2 * time.Second, RenewDeadline: time.Second, RetryPeriod: c.rp})
		if (err == nil) != c.ok {
			t.Errorf("RetryPeriod %s: want accepted=%v, got %v", c.rp, c.ok, err)
		}
		if err != nil && (!strings.Contains(err.Error(), "RetryPeriod") || !strings.Contains(err.Error(), "got "+c.rp.String())) {
			t.Errorf("RetryPeriod %s: the error does not name the field and the value: %v", c.rp, err)
		}
	}
}
