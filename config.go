package controllermanager

import (
	"errors"
	"fmt"
	"math"
	"os"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/actorkube/controllermanager/internal/defaults"
	"github.com/actorkube/controllermanager/internal/supervise"
	"github.com/actorkube/controllermanager/supervisor"
)

// ControllerManagerConfigSpec configures a ControllerManager. Its zero value
// works: election off, default supervision.
type ControllerManagerConfigSpec struct {
	LeaderElection *LeaderElectionSpec `json:"leaderElection,omitempty"`
	Supervision    *SupervisionSpec    `json:"supervision,omitempty"`
}

// LeaderElectionSpec configures leader election over a coordination.k8s.io/v1
// Lease. Every zero field takes its default.
type LeaderElectionSpec struct {
	// Enabled turns election on. Default false.
	Enabled *bool `json:"enabled,omitempty"`
	// LeaseName is the Lease's name. Default: NewControllerManager's
	// defaultLeaseName; both empty is an error.
	LeaseName string `json:"leaseName,omitempty"`
	// LeaseNamespace is the Lease's namespace. Default: $POD_NAMESPACE, else
	// the service account's namespace file, else "default".
	LeaseNamespace string `json:"leaseNamespace,omitempty"`
	// LeaseDuration is how long a standby waits after the last renewal it
	// observed before it takes the lease over. Default 30s; whole seconds,
	// at most what a Lease holds (2^31-1 s).
	LeaseDuration metav1.Duration `json:"leaseDuration,omitempty"`
	// RenewDeadline is how long the leader retries renewing before it gives
	// up leadership and fences. Default 15s; must be less than LeaseDuration.
	RenewDeadline metav1.Duration `json:"renewDeadline,omitempty"`
	// RetryPeriod is the time between attempts to acquire or renew. Default
	// 5s; at least 100ms; RenewDeadline must exceed 1.2 × RetryPeriod.
	RetryPeriod metav1.Duration `json:"retryPeriod,omitempty"`
	// OnLeaseLost is what the manager does once it has lost the lease and
	// stopped every controller and store (fencing, which always happens
	// first): "Exit" (the default) shuts the manager down, and Err() wraps
	// lease.ErrLost so that the host exits; "Reelect" goes back to Electing,
	// webhooks still serving, and once elected again recovers the stores and
	// runs the controllers afresh, without a process restart.
	OnLeaseLost LeaseLostAction `json:"onLeaseLost,omitempty"`
	// Shards splits leadership into that many shard Leases, named
	// "<leaseName>-<i>" for i = 0…Shards-1, each fenced as the single Lease
	// is; see ShardOf and docs/leader-election.md. Default 1 (0 and 1: the
	// single Lease "<leaseName>"); at most MaxShards.
	Shards int32 `json:"shards,omitempty"`
}

// LeaseLostAction is what a manager does after it has lost its lease and
// fenced: LeaseLostExit (the default) or LeaseLostReelect.
type LeaseLostAction string

// The values of LeaderElectionSpec.OnLeaseLost.
const (
	// LeaseLostExit stops the manager; Err() wraps lease.ErrLost.
	LeaseLostExit LeaseLostAction = "Exit"
	// LeaseLostReelect sends the manager back to Electing.
	LeaseLostReelect LeaseLostAction = "Reelect"
)

// SupervisionStrategy says which children restart when one fails: OneForOne
// (the default), AllForOne or RestForOne.
type SupervisionStrategy = supervisor.Strategy

// The supervision strategies.
const (
	OneForOne  = supervisor.OneForOne
	AllForOne  = supervisor.AllForOne
	RestForOne = supervisor.RestForOne
)

// SupervisionSpec configures supervision. Every zero field takes its default;
// negative durations and counts are errors.
type SupervisionSpec struct {
	// Strategy: "OneForOne" (default), "AllForOne", "RestForOne".
	Strategy SupervisionStrategy `json:"strategy,omitempty"`
	// MaxRestarts is each child's restart budget within RestartWindow: one
	// more failure escalates and stops the manager. Default 5.
	MaxRestarts int32 `json:"maxRestarts,omitempty"`
	// RestartWindow is the budget's window, and how long a child must run
	// without failing for its backoff to start over. Default 1m.
	RestartWindow metav1.Duration `json:"restartWindow,omitempty"`
	// InitialBackoff is the wait before the first restart, doubling with each
	// failure, with jitter. Default 100ms. It may not exceed MaxBackoff
	// (in a group, either one its own or inherited).
	InitialBackoff metav1.Duration `json:"initialBackoff,omitempty"`
	// MaxBackoff caps the backoff. Default 30s.
	MaxBackoff metav1.Duration `json:"maxBackoff,omitempty"`
	// HealthInterval is how often running controllers (and webhooks) are
	// probed. Default 10s; at least 10ms.
	HealthInterval metav1.Duration `json:"healthInterval,omitempty"`
	// HealthTimeout is how long a health answer may take; a controller
	// silent this long is unhealthy, and GetHealth returns within it.
	// Default 1s; at least 1ms.
	HealthTimeout metav1.Duration `json:"healthTimeout,omitempty"`
	// UnhealthyThreshold is how many unhealthy or silent probes in a row make
	// a failure (and so a restart). Default 3.
	UnhealthyThreshold int32 `json:"unhealthyThreshold,omitempty"`
	// ShutdownTimeout bounds each Shutdown the supervisor calls on its own
	// (restarts, escalation); a restart whose Shutdown has not returned by
	// then escalates rather than run two incarnations at once, or, inside a
	// group whose OnExhausted is "Stop", stops that group. Default 30s.
	ShutdownTimeout metav1.Duration `json:"shutdownTimeout,omitempty"`
	// OnExhausted is what a group (NewGroup) does once a child has spent
	// its restart budget: "Escalate" (default) fails the group, which its
	// parent handles as the failure of one child; "Stop" stops the group,
	// which stays stopped (its siblings run on) until StartChild starts it
	// again; a "Stop" group also stops, rather than escalate, when a
	// Shutdown of its restart outlives ShutdownTimeout. Only a group's spec reads it: the manager's own budget spent
	// always escalates.
	OnExhausted ExhaustedAction `json:"onExhausted,omitempty"`
}

// ExhaustedAction is what a group does once a child of it has spent its
// restart budget (SupervisionSpec.OnExhausted).
type ExhaustedAction string

// The ExhaustedActions.
const (
	// ExhaustedEscalate: the group has failed; its parent handles that as
	// the failure of one child (at the root, as a child's spent budget).
	ExhaustedEscalate ExhaustedAction = "Escalate"
	// ExhaustedStop: the group stops and stays stopped, reported by a
	// ChildFailed and a ChildStopped event naming it and in Status; its
	// siblings run on; StartChild starts it again.
	ExhaustedStop ExhaustedAction = "Stop"
)

// Defaults of LeaderElectionSpec (docs/defaults.md lists every default).
// With them, a leader that loses its lease has 10s (LeaseDuration −
// RenewDeadline − RetryPeriod) before another replica may take over, and
// gives its controllers 8s of it to stop.
const (
	DefaultLeaseDuration = defaults.LeaseDuration
	DefaultRenewDeadline = defaults.RenewDeadline
	DefaultRetryPeriod   = defaults.RetryPeriod
)

// minFenceBudget is the least LeaseDuration − RenewDeadline − RetryPeriod
// a spec may leave: a fence timeout of 320ms, each Shutdown given 240ms.
// The tightest timing in the repository, ctrlruntime's failover figure
// (2s/1.5s/100ms), leaves exactly this.
const minFenceBudget = 400 * time.Millisecond

// minRetryPeriod is the least RetryPeriod a spec may set. Each retry is a
// Lease request (a GET, and an UPDATE when held) per replica and per shard:
// below it a replica hammers the API server, or queues behind its client's
// rate limiter until the renewals miss RenewDeadline, for no faster
// failover (a standby still waits out LeaseDuration, whole seconds).
// client-go accepts any positive period; the tightest timing in the
// repository (election_test.go, ctrlruntime's failover figure, the
// statespace testkit) uses this one.
const minRetryPeriod = 100 * time.Millisecond

// maxLeaseDuration is the longest duration a Lease can hold: an int32 of
// seconds.
const maxLeaseDuration = math.MaxInt32 * time.Second

// The least a health probe may be configured to: below, probing costs more
// than it tells, and a timeout shorter than a goroutine's scheduling
// latency fails healthy children.
const (
	minHealthInterval = 10 * time.Millisecond
	minHealthTimeout  = time.Millisecond
)

// serviceAccountNamespaceFile is where a pod finds its namespace.
var serviceAccountNamespaceFile = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// electionConfig is a LeaderElectionSpec with its defaults filled in.
type electionConfig struct {
	name, namespace                           string
	leaseDuration, renewDeadline, retryPeriod time.Duration
	reelect                                   bool
	shards                                    int // 1: the single Lease
}

// supervision fills the defaults of spec and validates it; every problem is
// reported, each naming its field.
func (spec *SupervisionSpec) supervision() (supervision, error) {
	p, t := supervise.DefaultPolicy(), supervise.DefaultTiming()
	if spec == nil {
		return supervision{p, t}, nil
	}
	var errs []error
	switch spec.Strategy {
	case "":
	case OneForOne, AllForOne, RestForOne:
		p.Strategy = spec.Strategy
	default:
		errs = append(errs, fmt.Errorf("supervision.strategy: %q is not one of OneForOne, AllForOne, RestForOne", spec.Strategy))
	}
	switch spec.OnExhausted {
	case "", ExhaustedEscalate, ExhaustedStop:
		// Only a group reads it; the manager's own spent budget escalates.
	default:
		errs = append(errs, fmt.Errorf("supervision.onExhausted: %q is not one of Escalate, Stop", spec.OnExhausted))
	}
	count := func(field string, v int32, into *int) {
		switch {
		case v < 0:
			errs = append(errs, fmt.Errorf("supervision.%s: must not be negative, got %d", field, v))
		case v > 0:
			*into = int(v)
		}
	}
	count("maxRestarts", spec.MaxRestarts, &p.MaxRestarts)
	count("unhealthyThreshold", spec.UnhealthyThreshold, &t.UnhealthyThreshold)
	duration := func(field string, v metav1.Duration, into *time.Duration) {
		switch {
		case v.Duration < 0:
			errs = append(errs, fmt.Errorf("supervision.%s: must not be negative, got %s", field, v.Duration))
		case v.Duration > 0:
			*into = v.Duration
		}
	}
	duration("restartWindow", spec.RestartWindow, &p.RestartWindow)
	duration("initialBackoff", spec.InitialBackoff, &t.InitialBackoff)
	duration("maxBackoff", spec.MaxBackoff, &t.MaxBackoff)
	duration("healthInterval", spec.HealthInterval, &t.HealthInterval)
	duration("healthTimeout", spec.HealthTimeout, &t.HealthTimeout)
	if t.HealthInterval < minHealthInterval {
		errs = append(errs, fmt.Errorf("supervision.healthInterval: must be at least %s, got %s", minHealthInterval, t.HealthInterval))
	}
	if t.HealthTimeout < minHealthTimeout {
		errs = append(errs, fmt.Errorf("supervision.healthTimeout: must be at least %s, got %s", minHealthTimeout, t.HealthTimeout))
	}
	duration("shutdownTimeout", spec.ShutdownTimeout, &t.ShutdownTimeout)
	if t.InitialBackoff > t.MaxBackoff {
		errs = append(errs, fmt.Errorf("supervision.initialBackoff: %s exceeds supervision.maxBackoff %s", t.InitialBackoff, t.MaxBackoff))
	}
	return supervision{p, t}, errors.Join(errs...)
}

// supervision is a SupervisionSpec with its defaults filled in: the
// supervisor's Policy and Timing.
type supervision struct {
	policy supervise.Policy
	timing supervise.Timing
}

// defaultSupervision is the supervision of a zero SupervisionSpec.
func defaultSupervision() supervision {
	return supervision{supervise.DefaultPolicy(), supervise.DefaultTiming()}
}

// election fills the defaults of spec and validates it, reporting every
// problem, each naming its field. It returns nil, nil when election is off;
// when it is on, the config (as far as it could be filled in) even with
// errors, so that the caller can report its own problems too.
func (spec *LeaderElectionSpec) election(defaultLeaseName string) (*electionConfig, error) {
	if spec == nil || spec.Enabled == nil || !*spec.Enabled {
		return nil, nil
	}
	var errs []error
	c := &electionConfig{name: spec.LeaseName, namespace: spec.LeaseNamespace}
	if c.name == "" {
		c.name = defaultLeaseName
	}
	if c.name == "" {
		errs = append(errs, errors.New("leaderElection.leaseName: required when leader election is enabled and no default lease name is given"))
	} else if msgs := validation.IsDNS1123Subdomain(c.name); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("leaderElection.leaseName: %q is not a valid Kubernetes name: %s", c.name, strings.Join(msgs, "; ")))
	}
	from := ""
	if c.namespace == "" {
		c.namespace, from = podNamespace()
	}
	if msgs := validation.IsDNS1123Label(c.namespace); len(msgs) > 0 {
		errs = append(errs, fmt.Errorf("leaderElection.leaseNamespace: %q%s is not a valid namespace: %s", c.namespace, from, strings.Join(msgs, "; ")))
	}
	duration := func(field string, v metav1.Duration, def time.Duration) time.Duration {
		switch {
		case v.Duration < 0:
			errs = append(errs, fmt.Errorf("leaderElection.%s: must not be negative, got %s", field, v.Duration))
			return def
		case v.Duration == 0:
			return def
		}
		return v.Duration
	}
	c.leaseDuration = duration("leaseDuration", spec.LeaseDuration, DefaultLeaseDuration)
	c.renewDeadline = duration("renewDeadline", spec.RenewDeadline, DefaultRenewDeadline)
	c.retryPeriod = duration("retryPeriod", spec.RetryPeriod, DefaultRetryPeriod)
	if c.retryPeriod < minRetryPeriod {
		errs = append(errs, fmt.Errorf("leaderElection.retryPeriod: must be at least %s (each retry is a Lease request), got %s", minRetryPeriod, c.retryPeriod))
	}
	switch {
	case c.leaseDuration > maxLeaseDuration:
		// A Lease stores the duration as an int32 of seconds: past it, the
		// stored duration is negative and standbys take over at once.
		errs = append(errs, fmt.Errorf("leaderElection.leaseDuration: must be at most %s (a Lease stores an int32 of seconds), got %s", maxLeaseDuration, c.leaseDuration))
	case c.leaseDuration%time.Second != 0:
		// A standby reads the duration from the Lease, in whole seconds: a
		// 1.5s lease would expire after 1s.
		errs = append(errs, fmt.Errorf("leaderElection.leaseDuration: must be a whole number of seconds (a Lease stores seconds), got %s", c.leaseDuration))
	case c.leaseDuration <= c.renewDeadline:
		errs = append(errs, fmt.Errorf("leaderElection.leaseDuration: %s must be greater than leaderElection.renewDeadline %s", c.leaseDuration, c.renewDeadline))
	case c.leaseDuration <= c.renewDeadline+c.retryPeriod:
		errs = append(errs, fmt.Errorf("leaderElection.leaseDuration: %s leaves no time to fence a lost lease: it must be greater than leaderElection.renewDeadline + leaderElection.retryPeriod (%s)",
			c.leaseDuration, c.renewDeadline+c.retryPeriod))
	case c.leaseDuration-c.renewDeadline-c.retryPeriod < minFenceBudget:
		// The fence timeout is four fifths of the budget and each
		// Shutdown's context ends at three quarters of that: below
		// minFenceBudget a controller that takes a few milliseconds to
		// stop fails the fencing, and the manager exits, Reelect or not.
		errs = append(errs, fmt.Errorf("leaderElection.leaseDuration: %s leaves a fence budget (leaseDuration − renewDeadline − retryPeriod) of %s, less than %s: a lost lease would give the controllers %s to stop",
			c.leaseDuration, c.leaseDuration-c.renewDeadline-c.retryPeriod, minFenceBudget, (c.leaseDuration-c.renewDeadline-c.retryPeriod)*4/5*3/4))
	}
	if c.renewDeadline <= time.Duration(1.2*float64(c.retryPeriod)) {
		errs = append(errs, fmt.Errorf("leaderElection.renewDeadline: %s must be greater than 1.2 × leaderElection.retryPeriod %s", c.renewDeadline, c.retryPeriod))
	}
	action := spec.OnLeaseLost
	if action == "" {
		action = defaults.OnLeaseLost
	}
	switch action {
	case LeaseLostExit:
	case LeaseLostReelect:
		c.reelect = true
	default:
		errs = append(errs, fmt.Errorf("leaderElection.onLeaseLost: %q is not one of %s, %s", spec.OnLeaseLost, LeaseLostExit, LeaseLostReelect))
	}
	errs = append(errs, c.validateShards(spec.Shards)...)
	return c, errors.Join(errs...)
}

// validateShards fills c.shards from shards and reports what is wrong with
// it: out of 0…MaxShards, or shard Lease names that Kubernetes refuses.
func (c *electionConfig) validateShards(shards int32) []error {
	c.shards = defaults.Shards
	switch {
	case shards < 0 || shards > MaxShards:
		return []error{fmt.Errorf("leaderElection.shards: must be between 1 and %d (each shard is a Lease renewed every retry period), got %d", MaxShards, shards)}
	case shards > 1:
		c.shards = int(shards)
		last := fmt.Sprintf("%s-%d", c.name, shards-1)
		if msgs := validation.IsDNS1123Subdomain(last); c.name != "" && len(msgs) > 0 {
			return []error{fmt.Errorf("leaderElection.shards: shard lease name %q is not a valid Kubernetes name: %s", last, strings.Join(msgs, "; "))}
		}
	}
	return nil
}

// podNamespace is the namespace the process runs in: $POD_NAMESPACE, else
// the service account's namespace file, else "default". from says where it
// came from, for error messages.
func podNamespace() (ns, from string) {
	if ns := strings.TrimSpace(os.Getenv("POD_NAMESPACE")); ns != "" {
		return ns, " (from $POD_NAMESPACE)"
	}
	if b, err := os.ReadFile(serviceAccountNamespaceFile); err == nil {
		if ns := strings.TrimSpace(string(b)); ns != "" {
			return ns, " (from " + serviceAccountNamespaceFile + ")"
		}
	}
	return defaults.LeaseNamespace, ""
}
