package childactor

import (
	"context"
	"time"

	"github.com/actorkube/controllermanager/actors"
	"github.com/asynkron/protoactor-go/actor"
)

// Start is sent by the parent to start a new incarnation Gen of the child:
// Run for a controller, Recover for a store, Start for a webhook, nothing for
// a plain runnable. Ctx is the base of the start call's context, which the
// child derives (bounded by Timeout when it is positive), adds its failure
// reporter to, and cancels once the call has returned or the child is
// stopped; a Stop while the call runs waits for it to return before Shutdown. The child
// answers Started or StartFailed.
type Start struct {
	Gen     uint64
	Ctx     context.Context
	Timeout time.Duration
	// NotBefore, for a Start carried by a Stop (Stop.Then), is when the
	// backoff ends: the start is taken only if the clock has reached it once
	// Shutdown has returned.
	NotBefore time.Time
	// Restart, when set, lets the incarnation restart itself after a
	// failure, up to Restarts times in a row (see RestartTicket).
	Restart  *RestartTicket
	Restarts uint32
}

// RestartTicket is a parent's standing answer to a failure of a child's
// running incarnation: a restart of that child alone, after Backoff,
// within its budget. With it, the child needs no answer to its Failed: it
// stops at once (Shutdown with a context bounded by ShutdownTimeout), then
// starts incarnation Gen+1 (its start call on a context of its own derived
// from Ctx, bounded by Timeout when positive) as a Stop with Then would,
// and sends Failed with Restarting set. A Stop from the parent takes the
// ticket back. The parent gives one only when its answer cannot depend on
// when the failure comes; one ticket serves many children.
type RestartTicket struct {
	Backoff         time.Duration
	Ctx             context.Context
	Timeout         time.Duration
	ShutdownTimeout time.Duration
}

// Stop is sent by the parent to shut the child down: Shutdown(Ctx) runs once
// per incarnation, even when Stop is sent again while it runs. A start call
// still running has its context cancelled. The child answers Stopped.
//
// Then, when set, is a restart decided with the Stop: once Shutdown has
// returned, the child starts Then's incarnation at once, without waiting for
// the parent's Start (one hop less per restart), if the clock has reached
// Then.NotBefore and no other Stop has come meanwhile; Stopped says whether
// it did (Then). A Stop that comes while Shutdown runs cancels Then: the
// parent sends one whenever it decides the child is to stay stopped.
type Stop struct {
	Ctx  context.Context
	Then *Start
}

// HealthQuery asks a child for its health, for entry Index of a sweep. With
// Collector set, the child writes its answer into that entry and queues its
// health call on the sweep (HealthCollector.Dispatch starts the queued
// calls); ReplyTo is then ignored. Otherwise the answer, a HealthAnswer,
// goes to ReplyTo.
type HealthQuery struct {
	Index     int
	Collector *HealthCollector
	ReplyTo   *actor.PID
}

// HealthAnswer is a child's answer to a HealthQuery that has only ReplyTo.
type HealthAnswer struct {
	Index  int
	Status actors.HealthStatus
}

// Started is sent to the parent when the start call of incarnation Gen has
// returned nil.
type Started struct {
	Name string
	Gen  uint64
	Took time.Duration // how long the start call ran
}

// StartFailed is sent to the parent when the start call of incarnation Gen
// returned an error or panicked; Err is a *CallError or *PanicError.
type StartFailed struct {
	Name string
	Gen  uint64
	Err  error
}

// Stopped is sent to the parent when Shutdown of incarnation Gen has returned
// (or there was nothing to shut down). Err is a *PanicError when Shutdown
// panicked; the child counts as stopped either way.
type Stopped struct {
	Name string
	Gen  uint64
	Took time.Duration // how long Shutdown ran
	Err  error
	// Then is the incarnation the child started right after this
	// Shutdown (its Stop's Then, or a restart with its ticket), 0 if none;
	// its Started or StartFailed follows.
	Then uint64
}

// Failed is sent to the parent when a started incarnation fails: a panic in
// one of its user calls, or a failure reported by its background work.
type Failed struct {
	Name string
	Gen  uint64
	Err  error
	// Restarting: the child is restarting itself with its RestartTicket
	// (its Stopped, Then Gen+1, follows).
	Restarting bool
	// Watch, when Restarting, watches the Shutdown the child runs on its
	// own, with no Stop of the parent's to carry one: the parent's check
	// of an overdue restart reads it to find where that Shutdown is stuck.
	Watch *ShutdownWatch
}

// The child's own messages: results of the user calls it hosts.
type (
	startDone struct {
		gen  uint64
		took time.Duration
		err  error
	}
	stopDone struct {
		gen  uint64
		took time.Duration
		err  error
	}
	reported struct {
		gen uint64
		err error
	}
)
