package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"math"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/utils/clock"

	"github.com/actorkube/controllermanager/lease"
)

// The labels on every Lease of a group.
const (
	// LabelGroup is the group's name, the Config.Name of its Elector.
	LabelGroup = "controllermanager.actorkube.io/lease-group"
	// LabelRole is RoleShard or RoleMember.
	LabelRole = "controllermanager.actorkube.io/lease-role"
	// RoleShard marks a shard Lease.
	RoleShard = "shard"
	// RoleMember marks a member Lease.
	RoleMember = "member"
)

// Config configures an Elector. Every field but Clock, Logger and the
// callbacks is required.
type Config struct {
	// Client reaches the API server.
	Client kubernetes.Interface
	// Namespace and Name name the group: its shard Leases are
	// "<Name>-<i>" in Namespace.
	Namespace, Name string
	// Identity is this replica's holder identity, unique among replicas.
	Identity string
	// Shards is the number of shard Leases, at least 1.
	Shards int
	// LeaseDuration, RenewDeadline and RetryPeriod mean what they mean for
	// client-go's LeaderElector: a Lease not seen to change for
	// LeaseDuration may be taken over; a holder that could not renew for
	// RenewDeadline gives the shard up as lost; every RetryPeriod the held
	// Leases are renewed and expired ones campaigned for. LeaseDuration >
	// RenewDeadline > RetryPeriod ≥ 100ms (minRetryPeriod), and
	// LeaseDuration whole seconds, at most 2^31−1 s (what a Lease records).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Clock is the clock of the election's timers (ticks, retries, the
	// deadline watcher, each term's end) and of the local-observation
	// clock. The bound on one API call (a read, a write, opening the watch)
	// is a context deadline on the real clock, as a network timeout is.
	// Default: the real clock.
	Clock clock.WithTicker
	// Logger receives the elector's logs. Default: discarded.
	Logger *slog.Logger
	// MaxCampaigns bounds the campaigns in flight at once (each is one
	// Lease write): default DefaultMaxCampaigns, and never more than the
	// Lease client's rate limiter lets through in a retry period beside
	// the renewals of the shards held (see campaignLimit). Negative is an
	// error.
	MaxCampaigns int
	// Callbacks are how the Elector hands shards to its user.
	Callbacks Callbacks

	// SingleLease makes the group one Lease, the single lease of a manager
	// that is not sharded, seen as shard 0: named exactly Name, with no
	// labels, no member Lease and no assignment, and client-go's record and
	// rules (docs/leader-election.md, "One election path"). Shards must be 0
	// or 1 (0 means 1). Default false.
	SingleLease bool
	// Lock, in single-lease mode only, is a client-go lock to read and write
	// the Lease through instead of Client (which may then be nil): read every
	// RetryPeriod and before each write ("One election path"). Identity
	// defaults to Lock.Identity(). Default nil: Client, and a watch.
	Lock resourcelock.Interface
	// RecordEvent, in single-lease mode, is called with client-go's words
	// "became leader" and "stopped leading" when this replica acquires the
	// Lease and when it stops leading (a release or a loss), as client-go's
	// LeaderElector calls Lock.RecordEvent. Default nil: no events.
	RecordEvent func(message string)
}

// Callbacks are called on the Elector's goroutine, one at a time, and must
// not block; their done functions may be called from any goroutine, once.
// The exception is Lost for a shard not renewed for RenewDeadline: the
// Elector's deadline watcher calls it from a goroutine of its own, so that
// a loop waiting on an API server that does not answer cannot delay it, and
// it may then run beside another callback, a Release of the same shard
// included (the shard is then lost, not handed over).
type Callbacks struct {
	// Acquired: this replica now holds shard; its children may run.
	Acquired func(shard int)
	// Release: shard is assigned to another replica (a rebalance, or Run's
	// context ended). Call done once nothing of the shard runs any more: the
	// Lease is renewed until then and released right after.
	Release func(shard int, done func())
	// Lost: shard's Lease was taken by another replica, or could not be
	// renewed for RenewDeadline; reason says which, in the words the
	// Elector logs. Its children must stop at once: another replica may
	// take it LeaseDuration − RenewDeadline − RetryPeriod after the last
	// renewal. The shard is not campaigned for again until done is called
	// (never, to give it up for good).
	Lost func(shard int, reason string, done func())
	// HolderChanged: the holder of shard's Lease, as observed, changed
	// (this replica included); identity is "" once it has been released.
	HolderChanged func(shard int, identity string)
}

func (c *Config) validate() error {
	var errs []error
	switch {
	case c.Lock != nil && !c.SingleLease:
		errs = append(errs, errors.New("shard: a lock serves the single lease only (SingleLease)"))
	case c.Client == nil && c.Lock == nil:
		errs = append(errs, errors.New("shard: no client"))
	}
	if c.SingleLease && c.Shards > 1 {
		errs = append(errs, fmt.Errorf("shard: the single lease is one shard, got %d", c.Shards))
	}
	if c.Name == "" || c.Namespace == "" || c.Identity == "" {
		errs = append(errs, errors.New("shard: name, namespace and identity are required"))
	}
	if c.MaxCampaigns < 0 {
		errs = append(errs, fmt.Errorf("shard: max campaigns must not be negative, got %d", c.MaxCampaigns))
	}
	if c.Shards < 1 {
		errs = append(errs, fmt.Errorf("shard: shards must be at least 1, got %d", c.Shards))
	}
	switch {
	case c.RetryPeriod < minRetryPeriod:
		errs = append(errs, fmt.Errorf("shard: RetryPeriod must be at least %s (each retry is a Lease request per shard held), got %s", minRetryPeriod, c.RetryPeriod))
	case c.RenewDeadline <= c.RetryPeriod:
		errs = append(errs, fmt.Errorf("shard: renew deadline %s must exceed the retry period %s", c.RenewDeadline, c.RetryPeriod))
	case c.LeaseDuration <= c.RenewDeadline:
		errs = append(errs, fmt.Errorf("shard: lease duration %s must exceed the renew deadline %s", c.LeaseDuration, c.RenewDeadline))
	case c.LeaseDuration > math.MaxInt32*time.Second:
		errs = append(errs, fmt.Errorf("shard: lease duration %s exceeds what a Lease records (an int32 of seconds)", c.LeaseDuration))
	case c.LeaseDuration%time.Second != 0:
		errs = append(errs, fmt.Errorf("shard: lease duration %s is not whole seconds", c.LeaseDuration))
	case c.fenceBudget() <= 0:
		errs = append(errs, fmt.Errorf("shard: lease duration %s must exceed the renew deadline %s plus the retry period %s, or a lost shard leaves no time to fence",
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod))
	}
	return errors.Join(errs...)
}

// minRetryPeriod is the least Config.RetryPeriod, the manager's least
// leaderElection.retryPeriod (config.go's minRetryPeriod): a shorter one
// hammers the API server, or queues the renewals behind the client's rate
// limiter, for no faster failover (a standby still waits out LeaseDuration).
const minRetryPeriod = 100 * time.Millisecond

// ShardLease is the name of shard i's Lease in group name.
func ShardLease(name string, i int) string { return name + "-" + strconv.Itoa(i) }

// leaseName is the name of shard i's Lease: Name itself for the single
// lease.
func (e *Elector) leaseName(i int) string {
	if e.cfg.SingleLease {
		return e.cfg.Name
	}
	return ShardLease(e.cfg.Name, i)
}

// MemberLease is the name of identity's member Lease in group name.
func MemberLease(name, identity string) string {
	h := fnv.New64a()
	_, _ = h.Write([]byte(identity))
	return fmt.Sprintf("%s-member-%016x", name, h.Sum64())
}

// Status is the state of one shard as this replica last saw it.
type Status struct {
	Index  int
	Lease  string // the shard's Lease name
	Holder string // its holder as last observed; "" when none
	Held   bool   // this replica holds it now
}

// DefaultMaxCampaigns is Config.MaxCampaigns's default: enough to take a
// crashed peer's shards in one or two round trips, few enough that a burst
// of campaigns cannot crowd the renewals out of the Lease client.
const DefaultMaxCampaigns = 16

// Elector campaigns for the shards Assign gives this replica, holds them
// while it can, and hands them over when the assignment moves them. Build
// it with New and run it with Run.
//
// Its files: loop.go (the loop, the deadline watcher), observe.go (the
// watch), assign.go (the rule, decide), campaign.go, renew.go (renewals,
// hand-over, loss), elector.go (the guards), store.go (the Lease client).
type Elector struct {
	cfg     Config
	store   leaseStore    // where the Leases are read and written
	events  chan any      // from the watch goroutine
	backlog int           // the most watch events kept for the loop before the watch is dropped (forwardWatch)
	wake    chan struct{} // 1-buffered: acks has grown
	pollNow chan struct{} // 1-buffered: the watch has been silent, poll now (pollIfSilent)

	mu         sync.Mutex
	acks       []any // from the done functions and the writes, which must never block
	status     []Status
	terms      map[int]*lease.Term           // the held shards' terms, for Guard
	renewed    map[int]time.Time             // the held shards' last renewals, for Check and the deadline watcher
	early      map[int]bool                  // shards the deadline watcher gave up, not yet seen by the loop: whether Lost's done was called
	announcing map[int]bool                  // Acquired being delivered: the deadline watcher waits (checkDeadlines)
	anyTerm    atomic.Pointer[[]*lease.Term] // terms' values, republished under mu, for CheckAny's lock-free read

	abandon       chan struct{} // closed by Abandon
	abandonOnce   sync.Once
	writes        sync.WaitGroup     // the writes in flight, waited for when Run returns
	campaigns     context.Context    // the campaigns' writes' parent, cancelled when a stop begins
	stopCampaigns context.CancelFunc // cancels campaigns

	// owned by Run's goroutine
	observed    map[string]*observed
	held        map[int]*held
	fencing     map[int]bool                  // lost, waiting for the Lost callback's done
	campaigning map[int]bool                  // a campaign in flight
	shardWrites map[int]int                   // renewals and releases in flight, per shard, held or not any more
	tried       map[int]*coordinationv1.Lease // the version last campaigned on (nil: none), per shard
	suspect     map[int]time.Time             // until when a Lease naming us is not campaigned for (suspectWrite)
	// seenWhileWriting is, per shard with a write in flight, the versions of
	// its Lease the watch showed meanwhile, in order (replaySeen).
	seenWhileWriting map[int][]*coordinationv1.Lease
	holders          map[int]string // each shard's holder as last told (HolderChanged)
	member           *coordinationv1.Lease
	memberWriting    bool // a write of the member Lease in flight
	heard            bool // the watch showed something since the last tick
	// synced: a list (or a lock's read) has shown what is stored ("Read before write":
	// nothing is campaigned for before the first list, in docs/leader-election.md).
	synced      bool
	silentTicks int // ticks in a row with nothing from the watch (pollIfSilent)
	stopping    bool
	done        <-chan struct{} // Run's ctx.Done() until the loop takes the stop (then nil)

	// For tests that step a fake clock (the two last count once their timer exists: a step reaches it).
	ticks          atomic.Int64  // retry periods handled, each once the writes it sent were answered (tick)
	ticking        chan struct{} // closed once Run's ticker exists
	shown          atomic.Int64  // the highest numeric resourceVersion shown: a delayed watch is not a silent one
	watchWaits     atomic.Int64  // the watch goroutine's waits to retry
	deadlineChecks atomic.Int64  // the deadline watcher's passes, and one before the first
	tick           tickState
}

// observed is a Lease as last seen and the local time when its record was
// first seen so (the local-observation clock). gone marks a tombstone, seen
// deleted at seenAt: its holder counts until it expires from then ("A
// deleted Lease" in docs/leader-election.md).
type observed struct {
	lease  *coordinationv1.Lease
	seenAt time.Time
	gone   bool
	// staleOver, where the Lease has no versions, is the holder of the
	// record before this one, when this one's transitions went back: a
	// write that landed late over that holder's term (a release or a
	// renewal held in the network). That holder counts until staleFor
	// from seenAt, as if this record had been its renewal.
	staleOver string
	staleFor  time.Duration
}

// held is a shard Lease this replica holds.
type held struct {
	lease *coordinationv1.Lease // as last written by us
	// renewedAt is the local time the last successful write was sent, not
	// answered: the renew deadline counts from it, as the term does, for the
	// write may have landed then and a standby that saw it takes over a
	// lease duration after that, whenever our answer came (rule 2 of "Read
	// before write").
	renewedAt time.Time
	// provenUntil is when the last successful write stops proving the
	// hold by its send time (Config.provenUntil), as the term counts it;
	// unlike the term, an end of the hold does not move it.
	provenUntil time.Time
	term        *lease.Term // what the guards of the shard's children read
	releasing   bool        // Release was called; waiting for done
	released    bool        // done was called; the Lease is to be released
	confirmed   bool        // the watch has shown our write: what follows is newer
	unsure      bool        // the last renewal failed without an answer: it may have been written
	writing     bool        // a renewal or the release is in flight
}

// New validates cfg and returns an Elector.
func New(cfg Config) (*Elector, error) {
	if cfg.SingleLease && cfg.Shards == 0 {
		cfg.Shards = 1
	}
	if cfg.Lock != nil && cfg.Identity == "" {
		cfg.Identity = cfg.Lock.Identity()
	}
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	if cfg.MaxCampaigns == 0 {
		cfg.MaxCampaigns = DefaultMaxCampaigns
	}
	e := &Elector{cfg: cfg, events: make(chan any, 64), backlog: max(4096, 16*cfg.Shards), wake: make(chan struct{}, 1), pollNow: make(chan struct{}, 1), ticking: make(chan struct{}),
		observed: map[string]*observed{}, held: map[int]*held{}, fencing: map[int]bool{}, campaigning: map[int]bool{}, shardWrites: map[int]int{},
		seenWhileWriting: map[int][]*coordinationv1.Lease{},
		tried:            map[int]*coordinationv1.Lease{}, suspect: map[int]time.Time{}, terms: map[int]*lease.Term{}, renewed: map[int]time.Time{}, early: map[int]bool{}, announcing: map[int]bool{},
		abandon: make(chan struct{}), holders: map[int]string{}}
	if cfg.Lock != nil {
		e.store = &lockStore{lock: cfg.Lock, namespace: cfg.Namespace, name: cfg.Name}
	} else {
		e.store = clientStore{cfg.Client.CoordinationV1().Leases(cfg.Namespace)}
	}
	e.campaigns, e.stopCampaigns = context.WithCancel(context.Background())
	e.status = make([]Status, cfg.Shards)
	for i := range e.status {
		e.status[i] = Status{Index: i, Lease: e.leaseName(i)}
	}
	return e, nil
}

// Status returns the state of every shard; safe to call at any time.
func (e *Elector) Status() []Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.status)
}

// FenceTimeout is how long after a lost shard its children must have
// stopped: four fifths of LeaseDuration − RenewDeadline − RetryPeriod, the
// time before another replica may take the shard over, the rest being the
// margin for network latency and clock-rate drift.
func (c Config) FenceTimeout() time.Duration { return c.fenceBudget() * 4 / 5 }

func (c Config) fenceBudget() time.Duration { return c.LeaseDuration - c.RenewDeadline - c.RetryPeriod }

// clockSkewMargin is what the guards take off the recorded lease duration.
func (c Config) clockSkewMargin() time.Duration { return c.fenceBudget() - c.FenceTimeout() }

// provenUntil is when a write of a shard Lease naming this replica, sent
// at sent, stops proving the hold, as a lease.Term counts it: no rival
// takes the Lease over before then (the recorded lease duration, whole
// seconds as LeaseDuration is, less the margin).
func (c Config) provenUntil(sent time.Time) time.Time {
	return sent.Add(c.LeaseDuration - c.clockSkewMargin())
}

// drop forgets held shard i, here and in what Guard and Check read.
func (e *Elector) drop(i int) {
	delete(e.held, i)
	e.mu.Lock()
	delete(e.terms, i)
	delete(e.renewed, i)
	e.publishTerms()
	e.mu.Unlock()
}

// Guard returns the check behind the lease guard of what runs under shard i
// now: bound to this replica's current hold of the shard's Lease, it passes
// while a renewal sent within the recorded lease duration, less the margin
// (see lease.Term), proves the hold, and fails for ever once that hold has
// ended, even if the shard is acquired again. When the shard is not held it
// always fails. Safe to call from any goroutine.
func (e *Elector) Guard(i int) func() error {
	e.mu.Lock()
	t := e.terms[i]
	e.mu.Unlock()
	if t == nil {
		name := e.cfg.Namespace + "/" + e.leaseName(i)
		return func() error { return &lease.NotHeldError{Lease: name, Reason: "shard not held"} }
	}
	return t.Guard()
}

// Check is the lease watchdog's check over every shard this replica holds:
// an error when one has not been renewed for LeaseDuration + grace (a stuck
// elector: a live one gives the shard up as lost after RenewDeadline).
// Safe to call from any goroutine.
func (e *Elector) Check(grace time.Duration) error {
	now := e.cfg.Clock.Now()
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, i := range slices.Sorted(maps.Keys(e.renewed)) {
		if late := now.Sub(e.renewed[i]); late > e.cfg.LeaseDuration+grace {
			return fmt.Errorf("shard %d (Lease %s/%s) held but not renewed for %s", i, e.cfg.Namespace, e.leaseName(i), late.Round(time.Millisecond))
		}
	}
	return nil
}

// Abandon makes Run return at once without releasing anything: the held
// shards' guards fail from now on, the renewals stop and the Leases expire
// on their own. It is for a manager that cannot prove its shards' children
// have stopped (a Shutdown that never returned), which must not give their
// Leases to another replica early.
func (e *Elector) Abandon() { e.abandonOnce.Do(func() { close(e.abandon) }) }

// publishTerms republishes the held shards' terms for CheckAny; e.mu is
// held.
func (e *Elector) publishTerms() {
	terms := slices.Collect(maps.Values(e.terms))
	e.anyTerm.Store(&terms)
}

// CheckAny returns nil while this replica can prove it holds at least one
// shard, else an error wrapping lease.ErrNotHeld: the guard of what runs
// under the union of the shards (a manager's stores). No lock, and no
// allocation when it passes.
func (e *Elector) CheckAny() error {
	if p := e.anyTerm.Load(); p != nil {
		for _, t := range *p {
			if t.Check() == nil {
				return nil
			}
		}
	}
	if e.cfg.SingleLease {
		return &lease.NotHeldError{Lease: e.cfg.Namespace + "/" + e.cfg.Name, Reason: "lease not held"}
	}
	return &lease.NotHeldError{Lease: e.cfg.Namespace + "/" + e.cfg.Name + "-*", Reason: "no shard held"}
}
