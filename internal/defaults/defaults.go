// Package defaults is the one table of the runtime's default values: every
// package of the module that fills a zero field reads its default here, and
// docs/defaults.md lists this table (TestDocsListEveryDefault keeps the two
// the same; go test ./internal/defaults -update rewrites the list).
//
// Each constant's comment says which setting it is the default of and why it
// has this value. The exported Default… names of the public packages (for
// example controllermanager.DefaultLeaseDuration, webhook.DefaultTimeout)
// are these constants under their first-release names.
//
// Only defaults live here: a zero or unset field takes them. Bounds that
// validation enforces (the least health interval, a Lease's longest
// duration) stay beside the check that enforces them.
package defaults

import (
	"log/slog"
	"time"
)

// Supervision: controllermanager.SupervisionSpec, supervisor.Policy and supervisor.Timing.
const (
	// Strategy is SupervisionSpec.Strategy's default, "OneForOne": a
	// failure restarts only the child that failed, since controllers of one
	// manager are usually independent of each other.
	Strategy = "OneForOne"
	// MaxRestarts is SupervisionSpec.MaxRestarts's default: a child may
	// restart 5 times within RestartWindow; one more failure escalates and
	// stops the manager. Enough to ride out a flaky dependency, few enough
	// that a crash-looping child brings the process down where the kubelet
	// sees it.
	MaxRestarts = 5
	// RestartWindow is SupervisionSpec.RestartWindow's default: the restart
	// budget counts the last minute, and a child that ran a minute without
	// failing starts its backoff over.
	RestartWindow = time.Minute
	// InitialBackoff is SupervisionSpec.InitialBackoff's default: the first
	// restart waits 100ms (doubling with each failure, with jitter), long
	// enough not to spin on an instant failure, short enough to be unnoticed.
	InitialBackoff = 100 * time.Millisecond
	// MaxBackoff is SupervisionSpec.MaxBackoff's default: backoff stops
	// doubling at 30s, the scale of the lease durations and of the API
	// server's own retry intervals.
	MaxBackoff = 30 * time.Second
	// HealthInterval is SupervisionSpec.HealthInterval's default: running
	// controllers and webhooks are probed every 10s, the kubelet's default
	// probe period.
	HealthInterval = 10 * time.Second
	// HealthTimeout is SupervisionSpec.HealthTimeout's default: a health
	// answer may take 1s, the kubelet's default probe timeout; a controller
	// silent that long is unhealthy, and GetHealth returns within it.
	HealthTimeout = time.Second
	// UnhealthyThreshold is SupervisionSpec.UnhealthyThreshold's default: 3
	// unhealthy or silent probes in a row make a failure, the kubelet's
	// default failureThreshold, so that one slow answer restarts nothing.
	UnhealthyThreshold = 3
	// ShutdownTimeout is SupervisionSpec.ShutdownTimeout's default: each
	// Shutdown the supervisor calls by itself (restarts, escalation) may take
	// 30s, the kubelet's default termination grace period; past it the
	// restart escalates rather than run two incarnations at once.
	ShutdownTimeout = 30 * time.Second
)

// Logging: WithLogger, webhook.ServerConfig.Logger.
const (
	// LogLevel is the least level a default logger (slog.Default()'s
	// handler, when WithLogger, WithLogr or ServerConfig.Logger is not
	// given) passes on: Warn, so that a manager is silent unless something
	// fails, and a webhook server reports certificate failures, not every
	// client's failed handshake.
	LogLevel = slog.LevelWarn
)

// Events: the manager's event stream (Subscribe) and its shutdown.
const (
	// EventBuffer is WithEventBuffer's default (supervisor.NewBus's with a
	// buffer <= 0): a subscriber may fall 10,000 events behind before the
	// oldest are dropped: a subscriber that stalls for a while loses
	// nothing, one that is gone holds a bounded queue.
	EventBuffer = 10000
	// SubscriberDrainTimeout is WithSubscriberDrainTimeout's default:
	// ShutdownAndWait waits 1s for subscribers to take the last events,
	// enough for a subscriber that logs, short enough not to hold up a
	// process that is exiting.
	SubscriberDrainTimeout = time.Second
)

// Leader election: controllermanager.LeaderElectionSpec, lease.Watchdog.
// With the three durations, a leader that loses its lease has 10s
// (LeaseDuration − RenewDeadline − RetryPeriod) before another replica may
// take over, and gives its controllers 8s of it to stop.
const (
	// LeaseDuration is LeaderElectionSpec.LeaseDuration's default: a
	// standby takes the lease over 30s after the last renewal it observed.
	// Twice controller-runtime's 15s: with RenewDeadline and RetryPeriod it
	// leaves the fence a budget of 10s.
	LeaseDuration = 30 * time.Second
	// RenewDeadline is LeaderElectionSpec.RenewDeadline's default: the
	// leader retries a failed renewal for 15s before it gives up and fences.
	RenewDeadline = 15 * time.Second
	// RetryPeriod is LeaderElectionSpec.RetryPeriod's default: acquire and
	// renew are tried every 5s, so that a healthy leader renews three times
	// within RenewDeadline (client-go wants RenewDeadline > 1.2 × RetryPeriod).
	RetryPeriod = 5 * time.Second
	// LeaseNamespace is LeaderElectionSpec.LeaseNamespace's last default,
	// after $POD_NAMESPACE and the service account's namespace file:
	// Kubernetes' own default namespace.
	LeaseNamespace = "default"
	// OnLeaseLost is LeaderElectionSpec.OnLeaseLost's default, "Exit": a
	// fenced manager stops and the host exits, as controller-runtime's
	// manager does, so that the next leader term starts from a clean process.
	OnLeaseLost = "Exit"
	// Shards is LeaderElectionSpec.Shards's default: 1, the single Lease
	// named leaseName (0 means the same).
	Shards = 1
	// WatchdogGrace is lease.NewWatchdogFor's default grace (grace <= 0): the
	// watchdog fails 20s past the lease duration without a renewal, well
	// after a live elector would have reported Lost and fenced, so that it
	// fires only on a stuck election.
	WatchdogGrace = 20 * time.Second
)

// Sharded election: lease/shard.Config.
const (
	// MaxCampaigns is shard.DefaultMaxCampaigns, Config.MaxCampaigns's
	// default: at most 16 campaigns (each one Lease write) in flight at
	// once, enough to take a crashed peer's shards in one or two round
	// trips, few enough that a burst of campaigns cannot crowd the renewals
	// out of the Lease client; never more than the client's rate limiter
	// lets through in a retry period beside the renewals.
	MaxCampaigns = 16
)

// Fleets: controllermanager.FleetSpec.
const (
	// FleetProbePeriod is controllermanager.DefaultFleetProbePeriod,
	// FleetSpec.ProbePeriod's default: each member cluster's API server is
	// probed (GET /readyz) every 10s, the kubelet's default probe period.
	FleetProbePeriod = 10 * time.Second
	// FleetProbeTimeout is controllermanager.DefaultFleetProbeTimeout,
	// FleetSpec.ProbeTimeout's default: one probe may take 5s (or
	// ProbePeriod, when that is shorter), half the default period, so that
	// a probe has ended before the next is due.
	FleetProbeTimeout = 5 * time.Second
	// FleetFailureThreshold is controllermanager.DefaultFleetFailureThreshold,
	// FleetSpec.FailureThreshold's default: a member whose probes fail for
	// 30s (three default periods) goes Offline and its subtree is stopped,
	// Karmada's cluster-failure-threshold, so that one or two failed probes
	// stop nothing.
	FleetFailureThreshold = 30 * time.Second
	// FleetSuccessThreshold is controllermanager.DefaultFleetSuccessThreshold,
	// FleetSpec.SuccessThreshold's default: an Offline member whose probes
	// succeed for 30s goes Online and its subtree is started again,
	// Karmada's cluster-success-threshold, so that a flapping cluster's
	// controllers are not restarted at every good probe.
	FleetSuccessThreshold = 30 * time.Second
)

// Health probes: package health.
const (
	// ProbeTimeout is health.DefaultTimeout: how long a check of
	// health.NewHandler (and a Status call of the live view) may take when
	// neither WithTimeout nor the Source sets one; a manager's default
	// HealthTimeout, so that a probe waits as long as the supervisor does.
	ProbeTimeout = HealthTimeout
)

// The live view: package liveview.
const (
	// DebugPrefix is liveview.DefaultPrefix: where liveview.Handler serves
	// unless WithPrefix says otherwise, beside /debug/pprof.
	DebugPrefix = "/debug/supervision"
	// DebugRefresh is liveview.WithRefresh's default: the live view's event
	// stream pushes a fresh Status every 5s when nothing happens, so that
	// health messages (which change without an event) stay current.
	DebugRefresh = 5 * time.Second
	// DebugStreamBuffer is liveview.WithStreamBuffer's default: one browser
	// may fall 256 events behind before it is sent a fresh snapshot instead.
	DebugStreamBuffer = 256
	// DebugWindow is liveview.WithWindow's default: the live view's failure
	// history goes 10 minutes back, ten restart windows.
	DebugWindow = 10 * time.Minute
	// DebugMaxStreams is liveview.WithMaxStreams's default: 64 event streams
	// (browser tabs) at once, far more than the operators who watch one
	// manager, and few enough that a client opening stream after stream
	// holds 64 subscriptions and a few hundred goroutines, not thousands.
	DebugMaxStreams = 64
)

// Admission handler: webhook.Config (controllermanager.WebhookConfig).
const (
	// WebhookMaxBodyBytes is webhook.Config.MaxBodyBytes's default, 7 MiB:
	// an AdmissionReview carries at most two objects (old and new) of at
	// most 3 MiB each (the API server's limit on a request body), and less
	// than 1 MiB of the rest.
	WebhookMaxBodyBytes = 7 << 20
	// WebhookMaxInFlight is webhook.Config.MaxInFlight's default: 256
	// Handle calls at once per webhook; past that a request is answered 429
	// rather than pile up goroutines.
	WebhookMaxInFlight = 256
	// WebhookMaxBodyReads is webhook.Config.MaxBodyReads's default: 64
	// request bodies read (and decoded) at once, across a handler's
	// webhooks; past that a request is answered 429 before any of its body
	// is read. A review the API server sends is read in well under a
	// millisecond, so 64 is far above what it keeps in the air, and 64
	// bodies of at most WebhookMaxBodyBytes bound what the raw bodies may
	// hold at once (448 MiB, only if every one is sent in full).
	WebhookMaxBodyReads = 64
	// WebhookTimeout is webhook.Config.DefaultTimeout's default: a request
	// without ?timeout= may take 10s, the API server's default
	// timeoutSeconds.
	WebhookTimeout = 10 * time.Second
	// WebhookReadyTimeout is webhook.Config.ReadyTimeout's default: a
	// request waits 1s for its webhook's Ready before it is answered 503.
	WebhookReadyTimeout = time.Second
	// WebhookFailureThreshold is webhook.Config.FailureThreshold's default:
	// 5 failed Handle calls in a row fail the webhook, so that its
	// supervision restarts it, while a single bad request does not.
	WebhookFailureThreshold = 5
)

// Admission server: webhook.ServerConfig (controllermanager.WebhookServerConfig).
const (
	// ServerAddr is webhook.ServerConfig.Addr's default: ":9443", the port
	// webhook services conventionally target.
	ServerAddr = ":9443"
	// ServerCertCheckInterval is webhook.ServerConfig.CertCheckInterval's
	// default: a TLS handshake re-reads the certificate files at most every
	// 10s, soon enough after a rotation, rarely enough to cost nothing.
	ServerCertCheckInterval = 10 * time.Second
	// ServerReadHeaderTimeout is webhook.ServerConfig.ReadHeaderTimeout's
	// default: a client has 10s to send its headers (against slowloris).
	ServerReadHeaderTimeout = 10 * time.Second
	// ServerReadTimeout is webhook.ServerConfig.ReadTimeout's default: 30s,
	// the longest timeoutSeconds the API server allows.
	ServerReadTimeout = 30 * time.Second
	// ServerWriteTimeout is webhook.ServerConfig.WriteTimeout's default:
	// 35s, a little over ServerReadTimeout.
	ServerWriteTimeout = 35 * time.Second
	// ServerIdleTimeout is webhook.ServerConfig.IdleTimeout's default:
	// 120s, longer than the API server's client keeps an idle connection
	// (90s), so that the client closes first.
	ServerIdleTimeout = 120 * time.Second
	// ServerMaxHeaderBytes is webhook.ServerConfig.MaxHeaderBytes's default:
	// 64 KiB, far above the few hundred bytes the API server sends.
	ServerMaxHeaderBytes = 64 << 10
	// ServerShutdownTimeout is webhook.ServerConfig.ShutdownTimeout's
	// default: requests still running 30s after Start's context ended have
	// their connections closed; ServerReadTimeout bounds them anyway.
	ServerShutdownTimeout = 30 * time.Second
)
