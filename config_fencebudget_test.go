package controllermanager_test

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// A fence budget (leaseDuration − renewDeadline − retryPeriod) under 400ms
// is refused by the constructor, naming leaderElection.leaseDuration; every
// timing the repository uses (defaults, controller-runtime's, tests,
// examples, e2e, docs, internal/testkit) is still accepted.
func TestConfigMinFenceBudget(t *testing.T) {
	const ms = time.Millisecond
	s := time.Second
	for _, c := range []struct {
		where      string
		ld, rd, rp time.Duration
		ok         bool
	}{
		{"defaults (30s/15s/5s)", 0, 0, 0, true},
		{"docs/leader-election.md, contract_test.go", 30 * s, 15 * s, 5 * s, true},
		{"controller-runtime, ctrlruntime.DefaultManager*, bench_test.go", 15 * s, 10 * s, 2 * s, true},
		{"election_test.go, internal/testkit/statespace, liveview, internal/elector", 2 * s, s, 100 * ms, true},
		{"ctrlruntime/fleet/attack_reelect_test.go", 2 * s, s, 200 * ms, true},
		{"examples/demo", 2 * s, s, 250 * ms, true},
		{"ctrlruntime/examples/mirror, config_fuzz_test.go (budget 500ms)", 3 * s, 2 * s, 500 * ms, true},
		{"e2e replica, internal/election", 4 * s, 2 * s, 500 * ms, true},
		{"ctrlruntime/manager_failover_test.go (budget 400ms, the least accepted)", 2 * s, 1500 * ms, 100 * ms, true},
		{"budget 399ms", 2 * s, 1500 * ms, 101 * ms, false},
		{"budget 100ms", 3 * s, 2 * s, 900 * ms, false},
		{"budget 10ms", 2 * s, 1200 * ms, 790 * ms, false},
	} {
		t.Run(c.where, func(t *testing.T) {
			_, err := cm.NewControllerManager(cm.NewContext(nil), cm.ControllerManagerConfigSpec{
				LeaderElection: &cm.LeaderElectionSpec{Enabled: ptr.To(true), LeaseNamespace: "ns",
					LeaseDuration: metav1.Duration{Duration: c.ld}, RenewDeadline: metav1.Duration{Duration: c.rd}, RetryPeriod: metav1.Duration{Duration: c.rp}},
			}, "x", cm.WithLeaderElectionClient(leasetest.NewServer().Client("a")))
			if (err == nil) != c.ok {
				t.Fatalf("%s/%s/%s: want accepted=%v, got err=%v", c.ld, c.rd, c.rp, c.ok, err)
			}
			if err != nil && (!strings.Contains(err.Error(), "leaderElection.leaseDuration") || !strings.Contains(err.Error(), "fence budget")) {
				t.Errorf("the error does not name leaderElection.leaseDuration and the fence budget: %v", err)
			}
		})
	}
}
