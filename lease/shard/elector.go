package shard

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"maps"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
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
	// RenewDeadline > RetryPeriod > 0, and LeaseDuration whole seconds.
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	// Clock is the clock of every timer and of the local-observation clock.
	// Default: the real clock.
	Clock clock.WithTicker
	// Logger receives the elector's logs. Default: discarded.
	Logger *slog.Logger
	// Callbacks are how the Elector hands shards to its user.
	Callbacks Callbacks
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
	// renewed for RenewDeadline. Its children must stop at once: another
	// replica may take it LeaseDuration − RenewDeadline − RetryPeriod after
	// the last renewal. The shard is not campaigned for again until done is
	// called (never, to give it up for good).
	Lost func(shard int, done func())
}

func (c *Config) validate() error {
	var errs []error
	if c.Client == nil {
		errs = append(errs, errors.New("shard: no client"))
	}
	if c.Name == "" || c.Namespace == "" || c.Identity == "" {
		errs = append(errs, errors.New("shard: name, namespace and identity are required"))
	}
	if c.Shards < 1 {
		errs = append(errs, fmt.Errorf("shard: shards must be at least 1, got %d", c.Shards))
	}
	switch {
	case c.RetryPeriod <= 0:
		errs = append(errs, errors.New("shard: retry period must be positive"))
	case c.RenewDeadline <= c.RetryPeriod:
		errs = append(errs, fmt.Errorf("shard: renew deadline %s must exceed the retry period %s", c.RenewDeadline, c.RetryPeriod))
	case c.LeaseDuration <= c.RenewDeadline:
		errs = append(errs, fmt.Errorf("shard: lease duration %s must exceed the renew deadline %s", c.LeaseDuration, c.RenewDeadline))
	case c.LeaseDuration%time.Second != 0:
		errs = append(errs, fmt.Errorf("shard: lease duration %s is not whole seconds", c.LeaseDuration))
	case c.fenceBudget() <= 0:
		errs = append(errs, fmt.Errorf("shard: lease duration %s must exceed the renew deadline %s plus the retry period %s, or a lost shard leaves no time to fence",
			c.LeaseDuration, c.RenewDeadline, c.RetryPeriod))
	}
	return errors.Join(errs...)
}

// ShardLease is the name of shard i's Lease in group name.
func ShardLease(name string, i int) string { return name + "-" + strconv.Itoa(i) }

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

// Elector campaigns for the shards Assign gives this replica, holds them
// while it can, and hands them over when the assignment moves them. Build
// it with New and run it with Run.
type Elector struct {
	cfg    Config
	events chan any      // from the watch goroutine
	wake   chan struct{} // 1-buffered: acks has grown

	mu      sync.Mutex
	acks    []any // from the done functions, which must never block
	status  []Status
	moved   int                 // shards acquired from another holder, or given up, so far
	terms   map[int]*lease.Term // the held shards' terms, for Guard
	renewed map[int]time.Time   // the held shards' last renewals, for Check and the deadline watcher
	early   map[int]*earlyLoss  // shards the deadline watcher gave up, not yet seen by the loop
	// anyTerm is terms' values, republished under mu at each change, for
	// CheckAny's lock-free read.
	anyTerm atomic.Pointer[[]*lease.Term]

	abandon     chan struct{} // closed by Abandon
	abandonOnce sync.Once

	// owned by Run's goroutine
	observed map[string]*observed
	held     map[int]*held
	fencing  map[int]bool // lost, waiting for the Lost callback's done
	member   *coordinationv1.Lease
	tried    map[int]string // the resourceVersion last campaigned on, per shard
	stopping bool
	done     <-chan struct{} // Run's ctx.Done(): a stop requested, seen or not yet

	ticks   atomic.Int64  // retry periods handled, for tests that step a fake clock
	ticking chan struct{} // closed once Run's ticker exists, for the same tests
}

// observed is a Lease as last seen and when it was first seen so: the
// local-observation clock that expiry is measured on.
type observed struct {
	lease  *coordinationv1.Lease
	seenAt time.Time
}

// held is a shard Lease this replica holds.
type held struct {
	lease     *coordinationv1.Lease // as last written by us
	renewedAt time.Time             // local time of the last successful write
	term      *lease.Term           // what the guards of the shard's children read
	releasing bool                  // Release was called; waiting for done
	released  bool                  // done was called; the Lease is being released
	confirmed bool                  // the watch has shown our write: what follows is newer
	unsure    bool                  // the last renewal failed without an answer: it may have been written
}

// The loop's messages.
type (
	leaseSeen  struct{ lease *coordinationv1.Lease }
	listed     struct{ leases []coordinationv1.Lease }
	shardDone  struct{ shard int }
	fenceDone  struct{ shard int }
	watchEnded struct{}
)

// New validates cfg and returns an Elector.
func New(cfg Config) (*Elector, error) {
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Clock == nil {
		cfg.Clock = clock.RealClock{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.New(slog.DiscardHandler)
	}
	e := &Elector{cfg: cfg, events: make(chan any, 64), wake: make(chan struct{}, 1), ticking: make(chan struct{}), observed: map[string]*observed{}, held: map[int]*held{},
		fencing: map[int]bool{}, tried: map[int]string{}, terms: map[int]*lease.Term{}, renewed: map[int]time.Time{}, early: map[int]*earlyLoss{}, abandon: make(chan struct{})}
	e.status = make([]Status, cfg.Shards)
	for i := range e.status {
		e.status[i] = Status{Index: i, Lease: ShardLease(cfg.Name, i)}
	}
	return e, nil
}

// Status returns the state of every shard; safe to call at any time.
func (e *Elector) Status() []Status {
	e.mu.Lock()
	defer e.mu.Unlock()
	return slices.Clone(e.status)
}

// Moved is how many times this replica acquired a shard from another holder
// or gave one up (released or lost).
func (e *Elector) Moved() int {
	e.mu.Lock()
	defer e.mu.Unlock()
	return e.moved
}

// Run campaigns until ctx ends, then hands every held shard back: Release
// for each, and once all are done, their Leases and the member Lease are
// released. It returns once they are (or once a release has failed for
// RenewDeadline; the Leases then expire on their own).
func (e *Elector) Run(ctx context.Context) {
	watchCtx, stopWatch := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); e.watch(watchCtx) }()
	go func() { defer wg.Done(); e.watchDeadlines(watchCtx) }()
	defer func() { stopWatch(); wg.Wait() }()

	e.renewMember()
	ticker := e.cfg.Clock.NewTicker(e.cfg.RetryPeriod)
	defer ticker.Stop()
	close(e.ticking)
	done := ctx.Done()
	e.done = done
	stop := func() {
		done = nil
		e.stopping = true
		// Leave the membership first: while the member Lease is live the
		// rule gives this replica's shards back to it, and the others
		// would wait for the last of them to be released.
		e.releaseMember()
	}
	ticked := false
	for {
		// A stop comes before anything else that is ready: select would
		// pick among them at random, and each other case may make API calls
		// (campaigns, renewals) that a stopping replica has no use for.
		if done != nil {
			select {
			case <-done:
				stop()
			default:
			}
		}
		select {
		case <-done:
			stop()
		case <-e.abandon:
			for _, h := range e.held {
				h.term.End(false)
			}
			e.mu.Lock()
			clear(e.terms)
			e.publishTerms()
			clear(e.renewed)
			e.mu.Unlock()
			return
		case ev := <-e.events:
			e.handle(ev)
			// Take what else the watch has queued before reconciling once:
			// with S shards renewed every retry period by R replicas the
			// watch brings S·R/RetryPeriod events a second, and a reconcile
			// after each would keep the loop from its own renewals.
			e.drainEvents()
		case <-e.wake:
			e.mu.Lock()
			acks := e.acks
			e.acks = nil
			e.mu.Unlock()
			for _, ack := range acks {
				e.handle(ack)
			}
		case <-ticker.C():
			e.absorbEarly()
			clear(e.tried) // campaign again, on the same versions too: they may have expired
			if !e.stopping {
				e.renewMember()
			}
			e.renewAll()
			ticked = true
		}
		e.absorbEarly()
		e.reconcile()
		if ticked {
			ticked = false
			e.ticks.Add(1)
		}
		if e.stopping && len(e.held) == 0 {
			e.releaseMember()
			return
		}
	}
}

func (e *Elector) handle(ev any) {
	switch m := ev.(type) {
	case leaseSeen:
		e.see(m.lease)
	case listed:
		names := map[string]bool{}
		for i := range m.leases {
			names[m.leases[i].Name] = true
			e.see(&m.leases[i])
		}
		for name := range e.observed {
			if !names[name] {
				delete(e.observed, name)
			}
		}
	case shardDone:
		if h := e.held[m.shard]; h != nil && h.releasing {
			h.released = true
			e.mu.Lock()
			delete(e.renewed, m.shard) // nothing of it runs: no deadline to watch
			e.mu.Unlock()
			e.release(m.shard)
		}
	case fenceDone:
		delete(e.fencing, m.shard)
	case watchEnded:
	}
}

// see records l, with the local time when it changed.
func (e *Elector) see(l *coordinationv1.Lease) {
	o := e.observed[l.Name]
	if o == nil || o.lease.ResourceVersion != l.ResourceVersion {
		e.observed[l.Name] = &observed{lease: l.DeepCopy(), seenAt: e.cfg.Clock.Now()}
	}
	i, ok := e.shardIndex(l)
	if !ok {
		return
	}
	h := e.held[i]
	switch {
	case h == nil:
	case l.ResourceVersion == h.lease.ResourceVersion:
		h.confirmed = true
	case h.unsure && holderOf(l) == e.cfg.Identity:
		// A renewal whose answer we missed (it timed out here, and was
		// written there): only this replica writes its own identity, so
		// this is our write. Renew from it, or the next renewal would be
		// refused and the shard lost for nothing. Its send time is not
		// known, so the guard and the deadline still count from the last
		// renewal we saw succeed.
		h.lease, h.unsure, h.confirmed = l.DeepCopy(), false, true
	case h.confirmed && holderOf(l) != e.cfg.Identity:
		// Written by another replica after our write (Steal, or it took
		// the Lease over while we could not renew): ours is over, now.
		// Before confirmation, the watch is still showing versions older
		// than our write.
		e.lose(i, fmt.Sprintf("taken by %q", holderOf(l)))
	}
}

func (e *Elector) shardIndex(l *coordinationv1.Lease) (int, bool) {
	if l.Labels[LabelRole] != RoleShard {
		return 0, false
	}
	suffix, ok := strings.CutPrefix(l.Name, e.cfg.Name+"-")
	if !ok {
		return 0, false
	}
	i, err := strconv.Atoi(suffix)
	if err != nil || i < 0 || i >= e.cfg.Shards || ShardLease(e.cfg.Name, i) != l.Name {
		return 0, false
	}
	return i, true
}

func holderOf(l *coordinationv1.Lease) string {
	if l == nil || l.Spec.HolderIdentity == nil {
		return ""
	}
	return *l.Spec.HolderIdentity
}

// expired reports whether o's holder has had LeaseDuration, on our clock
// since we saw the Lease change, to renew it, and has not.
func (e *Elector) expired(o *observed) bool {
	d := e.cfg.LeaseDuration
	if s := o.lease.Spec.LeaseDurationSeconds; s != nil {
		d = time.Duration(*s) * time.Second
	}
	return !e.cfg.Clock.Now().Before(o.seenAt.Add(d))
}

// live returns whether the holder of o counts: held, and not expired.
func (e *Elector) live(o *observed) bool {
	return o != nil && holderOf(o.lease) != "" && !e.expired(o)
}

// assignment computes the rule over what this replica sees.
func (e *Elector) assignment() []string {
	members := []string{}
	if !e.stopping {
		members = append(members, e.cfg.Identity)
	}
	for _, o := range e.observed {
		if o.lease.Labels[LabelRole] == RoleMember && e.live(o) && holderOf(o.lease) != e.cfg.Identity {
			members = append(members, holderOf(o.lease))
		}
	}
	holders := make([]string, e.cfg.Shards)
	for i := range holders {
		if e.held[i] != nil {
			holders[i] = e.cfg.Identity
		} else if o := e.observed[ShardLease(e.cfg.Name, i)]; e.live(o) && holderOf(o.lease) != e.cfg.Identity {
			holders[i] = holderOf(o.lease)
		}
	}
	return Assign(e.cfg.Shards, members, holders)
}

// stopRequested reports whether Run's context has ended, whether or not
// the loop has taken the stop yet.
func (e *Elector) stopRequested() bool {
	select {
	case <-e.done:
		return true
	default:
		return e.stopping
	}
}

// reconcile releases what is not ours any more and campaigns for what is.
func (e *Elector) reconcile() {
	a := e.assignment()
	for _, i := range slices.Sorted(maps.Keys(e.held)) {
		h := e.held[i]
		if a[i] != e.cfg.Identity && !h.releasing {
			h.releasing = true
			e.cfg.Logger.Info("releasing shard", "shard", i, "to", a[i])
			i := i
			var once sync.Once
			e.callRelease(i, func() { once.Do(func() { e.send(shardDone{shard: i}) }) })
		}
	}
	for i, m := range a {
		if m != e.cfg.Identity || e.held[i] != nil || e.fencing[i] {
			continue
		}
		if e.stopRequested() {
			break // each campaign is an API call: a stop must not wait for S of them
		}
		e.campaign(i)
	}
	e.publish(a)
}

// campaign tries to acquire shard i, once per version of its Lease seen:
// created if it does not exist, else updated from the version we saw if
// it is free or expired. A conflict means someone else wrote first; the
// watch brings their version.
func (e *Elector) campaign(i int) {
	name := ShardLease(e.cfg.Name, i)
	o := e.observed[name]
	version := ""
	if o != nil {
		version = o.lease.ResourceVersion
		if e.live(o) && holderOf(o.lease) != e.cfg.Identity {
			return
		}
	}
	if v, ok := e.tried[i]; ok && v == version {
		return
	}
	e.tried[i] = version
	now := metav1.NewMicroTime(e.cfg.Clock.Now())
	seconds := int32(e.cfg.LeaseDuration / time.Second)
	id := e.cfg.Identity
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	leases := e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace)
	var got *coordinationv1.Lease
	var err error
	previous := ""
	term := lease.NewTerm(e.cfg.Clock, e.cfg.Namespace+"/"+name, time.Duration(seconds)*time.Second, e.cfg.clockSkewMargin())
	sent := term.Elapsed()
	if o == nil {
		got, err = leases.Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace, Labels: map[string]string{LabelGroup: e.cfg.Name, LabelRole: RoleShard}},
			Spec: coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now,
				LeaseTransitions: new(int32)},
		}, metav1.CreateOptions{})
	} else {
		l := o.lease.DeepCopy()
		previous = holderOf(l)
		if previous != id {
			transitions := int32(0)
			if l.Spec.LeaseTransitions != nil {
				transitions = *l.Spec.LeaseTransitions + 1
			}
			l.Spec.LeaseTransitions = &transitions
			l.Spec.AcquireTime = &now
		}
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &id, &seconds, &now
		got, err = leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) {
			e.cfg.Logger.Warn("cannot acquire shard", "shard", i, "err", err)
		}
		return
	}
	term.Renewed(sent)
	h := &held{lease: got, renewedAt: e.cfg.Clock.Now(), term: term}
	e.held[i] = h
	e.mu.Lock()
	e.terms[i], e.renewed[i] = term, h.renewedAt
	e.publishTerms()
	e.mu.Unlock()
	if previous != "" && previous != id {
		e.count()
	}
	e.cfg.Logger.Info("acquired shard", "shard", i, "from", previous)
	if f := e.cfg.Callbacks.Acquired; f != nil {
		f(i)
	}
}

// renewAll renews every held shard; one that has not been renewed for
// RenewDeadline is lost.
func (e *Elector) renewAll() {
	began := e.cfg.Clock.Now()
	defer func() {
		if took := e.cfg.Clock.Since(began); took > e.cfg.RetryPeriod {
			e.cfg.Logger.Warn("renewals took longer than the retry period", "took", took, "held", len(e.held))
		}
	}()
	// First, whatever has gone unrenewed for RenewDeadline is lost, before
	// any call: a pass of slow calls must not delay a loss past its
	// deadline.
	e.loseOverdue()
	type renewal struct {
		i    int
		h    *held
		l    *coordinationv1.Lease
		sent time.Duration
		got  *coordinationv1.Lease
		err  error
	}
	var batch []*renewal
	for _, i := range slices.Sorted(maps.Keys(e.held)) {
		h := e.held[i]
		if h.released {
			e.release(i) // retry a release that failed
			continue
		}
		l := h.lease.DeepCopy()
		now := metav1.NewMicroTime(e.cfg.Clock.Now())
		l.Spec.RenewTime = &now
		batch = append(batch, &renewal{i: i, h: h, l: l})
	}
	// The renewals go out side by side, each bounded by RetryPeriod: the
	// pass takes one round trip, not one per shard held.
	var wg sync.WaitGroup
	for _, r := range batch {
		r.sent = r.h.term.Elapsed()
		wg.Go(func() { r.got, r.err = e.update(r.l) })
	}
	wg.Wait()
	e.absorbEarly() // given up by the deadline watcher while the calls ran
	for _, r := range batch {
		i, h := r.i, r.h
		if e.held[i] != h {
			continue // lost meanwhile (the watch)
		}
		switch {
		case r.err == nil:
			h.lease, h.renewedAt, h.confirmed, h.unsure = r.got, e.cfg.Clock.Now(), false, false
			h.term.Renewed(r.sent)
			e.mu.Lock()
			e.renewed[i] = h.renewedAt
			e.mu.Unlock()
		case apierrors.IsConflict(r.err) && h.unsure && e.adoptOwnWrite(h, r.l):
			// The previous renewal was written after all (its answer was
			// lost): renewed now from the version it left.
			e.mu.Lock()
			e.renewed[i] = h.renewedAt
			e.mu.Unlock()
		case apierrors.IsConflict(r.err):
			// Another replica wrote it since our last write: we cannot
			// prove we hold it, so it is lost; fencing for nothing is safe.
			e.lose(i, "renewal refused: the Lease was written by another")
		default:
			h.unsure = true
		}
	}
	e.loseOverdue()
}

// loseOverdue loses, on the loop, every held shard not renewed for
// RenewDeadline: the deadline watcher's decision (checkDeadlines), taken
// now rather than at its next tick.
func (e *Elector) loseOverdue() {
	e.checkDeadlines()
	e.absorbEarly()
}

// release gives shard i's Lease up: holder empty, as client-go releases.
// On failure the shard stays held and renewAll retries.
func (e *Elector) release(i int) {
	h := e.held[i]
	h.term.End(false) // nothing of the shard runs any more: no write may pass its guard
	l := h.lease.DeepCopy()
	empty, one := "", int32(1)
	now := metav1.NewMicroTime(e.cfg.Clock.Now())
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &empty, &one, &now
	_, err := e.update(l)
	switch {
	case err == nil:
	case apierrors.IsConflict(err):
		// Taken meanwhile (see will have called lose, or will): nothing to release.
	default:
		if e.cfg.Clock.Since(h.renewedAt) <= e.cfg.RenewDeadline {
			e.cfg.Logger.Warn("cannot release shard; retrying", "shard", i, "err", err)
			return
		}
	}
	delete(e.held, i)
	e.forget(i)
	e.count()
	e.cfg.Logger.Info("released shard", "shard", i)
}

// lose drops shard i and tells the user to fence it.
func (e *Elector) lose(i int, why string) {
	e.absorbEarly()
	h := e.held[i]
	if h == nil {
		return
	}
	delete(e.held, i)
	h.term.End(true)
	e.forget(i)
	e.count()
	e.cfg.Logger.Warn("shard lost", "shard", i, "why", why)
	if h.released {
		return // its children had stopped already
	}
	e.fencing[i] = true
	var once sync.Once
	done := func() { once.Do(func() { e.send(fenceDone{shard: i}) }) }
	if f := e.cfg.Callbacks.Lost; f != nil {
		f(i, done)
	} else {
		done()
	}
}

func (e *Elector) callRelease(i int, done func()) {
	if f := e.cfg.Callbacks.Release; f != nil {
		f(i, done)
		return
	}
	done()
}

func (e *Elector) update(l *coordinationv1.Lease) (*coordinationv1.Lease, error) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	return e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace).Update(ctx, l, metav1.UpdateOptions{})
}

// renewMember creates or renews this replica's member Lease.
func (e *Elector) renewMember() {
	now := metav1.NewMicroTime(e.cfg.Clock.Now())
	seconds := int32(e.cfg.LeaseDuration / time.Second)
	id := e.cfg.Identity
	name := MemberLease(e.cfg.Name, id)
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	leases := e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace)
	if e.member == nil {
		if o := e.observed[name]; o != nil {
			e.member = o.lease.DeepCopy()
		} else {
			got, err := leases.Create(ctx, &coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: e.cfg.Namespace, Labels: map[string]string{LabelGroup: e.cfg.Name, LabelRole: RoleMember}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &seconds, AcquireTime: &now, RenewTime: &now},
			}, metav1.CreateOptions{})
			if err == nil {
				e.member = got
			} else if !apierrors.IsAlreadyExists(err) {
				e.cfg.Logger.Warn("cannot create the member lease", "err", err)
			}
			return
		}
	}
	l := e.member.DeepCopy()
	l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds, l.Spec.RenewTime = &id, &seconds, &now
	got, err := leases.Update(ctx, l, metav1.UpdateOptions{})
	switch {
	case err == nil:
		e.member = got
	case apierrors.IsConflict(err):
		e.member = nil // read it again from the watch
	default:
		e.cfg.Logger.Warn("cannot renew the member lease", "err", err)
	}
}

// releaseMember empties the member Lease so that the others rebalance at
// once rather than after LeaseDuration.
func (e *Elector) releaseMember() {
	if e.member == nil {
		return
	}
	l := e.member.DeepCopy()
	empty := ""
	l.Spec.HolderIdentity = &empty
	if _, err := e.update(l); err != nil {
		e.cfg.Logger.Warn("cannot release the member lease", "err", err)
		return // Run's end tries again; failing that it expires
	}
	e.member = nil
}

// send queues an ack for the loop; it never blocks, so done functions may
// be called from the callbacks themselves.
func (e *Elector) send(m any) {
	e.mu.Lock()
	e.acks = append(e.acks, m)
	e.mu.Unlock()
	select {
	case e.wake <- struct{}{}:
	default:
	}
}

func (e *Elector) count() {
	e.mu.Lock()
	e.moved++
	e.mu.Unlock()
}

// publish updates what Status returns.
func (e *Elector) publish([]string) {
	e.mu.Lock()
	defer e.mu.Unlock()
	for i := range e.status {
		s := &e.status[i]
		s.Held = e.held[i] != nil
		s.Holder = ""
		if o := e.observed[s.Lease]; o != nil {
			s.Holder = holderOf(o.lease)
		}
	}
}

// watch lists and watches the group's Leases, forwarding them to the loop,
// until ctx ends. After an error or a closed watch it waits RetryPeriod and
// lists again (from scratch: a list is the whole truth).
func (e *Elector) watch(ctx context.Context) {
	leases := e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace)
	selector := LabelGroup + "=" + e.cfg.Name
	forward := func(m any) bool {
		select {
		case e.events <- m:
			return true
		case <-ctx.Done():
			return false
		}
	}
	for ctx.Err() == nil {
		if list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: selector}); err != nil {
			e.cfg.Logger.Warn("cannot list leases", "err", err)
		} else if forward(listed{leases: list.Items}) {
			if w, err := leases.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: list.ResourceVersion}); err != nil {
				e.cfg.Logger.Warn("cannot watch leases", "err", err)
			} else {
				e.forwardWatch(ctx, w, forward)
			}
		}
		select {
		case <-e.cfg.Clock.After(e.cfg.RetryPeriod):
		case <-ctx.Done():
		}
	}
}

func (e *Elector) forwardWatch(ctx context.Context, w watch.Interface, forward func(any) bool) {
	defer w.Stop()
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				forward(watchEnded{})
				return
			}
			if l, isLease := ev.Object.(*coordinationv1.Lease); isLease && (ev.Type == watch.Added || ev.Type == watch.Modified) {
				if !forward(leaseSeen{lease: l}) {
					return
				}
			}
		case <-ctx.Done():
			return
		}
	}
}

// forget drops shard i from what Guard and Check read.
func (e *Elector) forget(i int) {
	e.mu.Lock()
	delete(e.terms, i)
	delete(e.renewed, i)
	e.publishTerms()
	e.mu.Unlock()
}

// Guard returns the check behind the lease guard of what runs under shard i
// now: bound to this replica's current hold of the shard's Lease, it passes
// while a renewal sent within the recorded lease duration, less the margin
// (see lease.Fence), proves the hold, and fails for ever once that hold has
// ended, even if the shard is acquired again. When the shard is not held it
// always fails. Safe to call from any goroutine.
func (e *Elector) Guard(i int) func() error {
	e.mu.Lock()
	t := e.terms[i]
	e.mu.Unlock()
	if t == nil {
		name := e.cfg.Namespace + "/" + ShardLease(e.cfg.Name, i)
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
			return fmt.Errorf("shard %d (Lease %s/%s) held but not renewed for %s", i, e.cfg.Namespace, ShardLease(e.cfg.Name, i), late.Round(time.Millisecond))
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

// FenceTimeout is how long after a lost shard its children must have
// stopped: four fifths of LeaseDuration − RenewDeadline − RetryPeriod, the
// time before another replica may take the shard over, the rest being the
// margin for network latency and clock-rate drift (as lease.Config's).
func (c Config) FenceTimeout() time.Duration { return c.fenceBudget() * 4 / 5 }

func (c Config) fenceBudget() time.Duration { return c.LeaseDuration - c.RenewDeadline - c.RetryPeriod }

// clockSkewMargin is what the guards take off the recorded lease duration.
func (c Config) clockSkewMargin() time.Duration { return c.fenceBudget() - c.FenceTimeout() }

// earlyLoss is a shard the deadline watcher gave up: doneCalled says
// whether the user has called the Lost callback's done already.
type earlyLoss struct{ doneCalled bool }

// watchDeadlines gives up, every quarter of RetryPeriod until ctx ends, any
// held shard not renewed for RenewDeadline, whatever the loop is doing: the
// loop makes API calls one batch at a time, and against an API server that
// does not answer (paused, or a connection that black-holes) a batch waits
// out its timeout, so the loop alone could notice a loss a retry period or
// more late, past the fence budget. The watcher ends the shard's term (its
// guards fail at once) and calls Lost; the loop then drops the shard
// (absorbEarly) without calling Lost again.
func (e *Elector) watchDeadlines(ctx context.Context) {
	t := e.cfg.Clock.NewTicker(max(e.cfg.RetryPeriod/4, time.Millisecond))
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C():
			e.checkDeadlines()
		}
	}
}

func (e *Elector) checkDeadlines() {
	now := e.cfg.Clock.Now()
	var due []int
	e.mu.Lock()
	for i, at := range e.renewed {
		if now.Sub(at) <= e.cfg.RenewDeadline || e.early[i] != nil {
			continue
		}
		due = append(due, i)
		e.early[i] = &earlyLoss{}
		e.terms[i].End(true)
		delete(e.terms, i)
		delete(e.renewed, i)
	}
	if len(due) > 0 {
		e.publishTerms()
	}
	e.mu.Unlock()
	slices.Sort(due)
	for _, i := range due {
		e.cfg.Logger.Warn("shard lost", "shard", i, "why", fmt.Sprintf("not renewed for %s", e.cfg.RenewDeadline))
		var once sync.Once
		done := func() {
			once.Do(func() {
				e.mu.Lock()
				if el := e.early[i]; el != nil {
					el.doneCalled = true
				}
				e.mu.Unlock()
				e.send(fenceDone{shard: i})
			})
		}
		if f := e.cfg.Callbacks.Lost; f != nil {
			f(i, done)
		} else {
			done()
		}
	}
}

// absorbEarly drops, on the loop, the shards the deadline watcher gave up:
// they are not held any more, and are not campaigned for until the Lost
// callback's done (unless it has been called already).
func (e *Elector) absorbEarly() {
	e.mu.Lock()
	if len(e.early) == 0 {
		e.mu.Unlock()
		return
	}
	early := e.early
	e.early = map[int]*earlyLoss{}
	e.mu.Unlock()
	for _, i := range slices.Sorted(maps.Keys(early)) {
		if e.held[i] != nil {
			delete(e.held, i)
			e.count()
		}
		if !early[i].doneCalled {
			e.fencing[i] = true
		}
	}
}

// drainEvents handles the watch events already queued, without waiting.
func (e *Elector) drainEvents() {
	for range cap(e.events) {
		select {
		case ev := <-e.events:
			e.handle(ev)
		default:
			return
		}
	}
}

// adoptOwnWrite handles a renewal refused with a conflict after one whose
// answer was lost: it reads the Lease and, if it still names this replica
// (only this replica writes its own identity, so the version is the lost
// renewal's), renews from that version at once. It reports whether it did;
// if not, the shard is lost.
func (e *Elector) adoptOwnWrite(h *held, l *coordinationv1.Lease) bool {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RetryPeriod)
	defer cancel()
	cur, err := e.cfg.Client.CoordinationV1().Leases(e.cfg.Namespace).Get(ctx, l.Name, metav1.GetOptions{})
	if err != nil || holderOf(cur) != e.cfg.Identity {
		return false
	}
	now := metav1.NewMicroTime(e.cfg.Clock.Now())
	cur.Spec.RenewTime = &now
	sent := h.term.Elapsed()
	got, err := e.update(cur)
	if err != nil {
		return false
	}
	h.lease, h.renewedAt, h.confirmed, h.unsure = got, e.cfg.Clock.Now(), false, false
	h.term.Renewed(sent)
	return true
}

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
	return &lease.NotHeldError{Lease: e.cfg.Namespace + "/" + e.cfg.Name + "-*", Reason: "no shard held"}
}
