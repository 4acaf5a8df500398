package controllermanager_test

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// A retry period under 100ms (one Lease request each, per replica) is
// refused by the constructor, naming leaderElection.retryPeriod and the
// least accepted; 100ms, the tightest timing the repository runs, is still
// accepted (TestConfigMinFenceBudget lists the others).
func TestConfigMinRetryPeriod(t *testing.T) {
	for _, c := range []struct {
		rp time.Duration
		ok bool
	}{
		{time.Nanosecond, false},
		{time.Millisecond, false},
		{99 * time.Millisecond, false},
		{100 * time.Millisecond, true},
	} {
		t.Run(c.rp.String(), func(t *testing.T) {
			m, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{
				LeaderElection: &cm.LeaderElectionSpec{Enabled: ptr.To(true), LeaseNamespace: "ns",
					LeaseDuration: metav1.Duration{Duration: 2 * time.Second}, RenewDeadline: metav1.Duration{Duration: 1500 * time.Millisecond},
					RetryPeriod: metav1.Duration{Duration: c.rp}},
			}, "x", cm.WithLeaderElectionClient(leasetest.NewServer().Client("a")))
			if m != nil {
				m.ShutdownAndWait(context.Background())
			}
			if (err == nil) != c.ok {
				t.Fatalf("retryPeriod %s: want accepted=%v, have err=%v", c.rp, c.ok, err)
			}
			if err != nil && (!strings.Contains(err.Error(), "leaderElection.retryPeriod") || !strings.Contains(err.Error(), "at least 100ms")) {
				t.Errorf("the error does not name leaderElection.retryPeriod and its least value: %v", err)
			}
		})
	}
}
