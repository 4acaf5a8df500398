package statespace

import (
	"context"
	"fmt"
	"slices"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease/shard"
	"github.com/actorkube/controllermanager/supervisor"
)

func (r *runner) run(ctx context.Context) {
	if err := r.build(); err != nil {
		r.violate(Violation{Invariant: DoneWrong, Detail: "NewControllerManager: " + err.Error()})
		return
	}
	r.startAdmission()
	for _, st := range r.sc.Steps {
		if ctx.Err() != nil {
			break
		}
		if st.At != "" && !r.waitPhase(ctx, st.At) {
			r.mu.Lock()
			r.skipped++
			r.logLocked("skip %s (phase %s)", st, r.phase)
			r.mu.Unlock()
			continue
		}
		r.apply(ctx, st)
		r.check(ctx)
	}
	r.settle(ctx)
	r.logf("settled: %s", r.unended())
	r.heal()
	r.checkReelected(ctx)
	r.finish(ctx)
}

// phaseOrder is the order of the phases in a manager's life.
var phaseOrder = map[cm.Phase]int{
	cm.PhaseIdle: 0, cm.PhaseInitializing: 1, cm.PhaseElecting: 2, cm.PhaseRecovering: 3, cm.PhaseStarting: 4,
	cm.PhaseRunning: 5, cm.PhaseShuttingDown: 6, cm.PhaseStopped: 7, cm.PhaseFailed: 7,
}

// waitPhase waits for the manager to be in phase p: up to 2s while p is
// still ahead, up to 1s when it may come again (a new election round with
// Reelect, a shutdown that was asked for), not at all when it is past.
func (r *runner) waitPhase(ctx context.Context, p cm.Phase) bool {
	var timer *time.Timer
	defer func() {
		if timer != nil {
			timer.Stop()
		}
	}()
	var expired <-chan time.Time
	for {
		r.mu.Lock()
		cur, ch, shutdown := r.phase, r.phaseCh, !r.shutdownReq.IsZero()
		r.mu.Unlock()
		if cur == p {
			return true
		}
		if cur.Ended() {
			return false
		}
		if timer == nil {
			wait := 2 * time.Second
			if phaseOrder[cur] > phaseOrder[p] {
				again := r.sc.Election == Reelect && phaseOrder[p] >= phaseOrder[cm.PhaseElecting] && phaseOrder[p] <= phaseOrder[cm.PhaseStarting]
				if !again {
					return false
				}
				wait = time.Second
			}
			if p == cm.PhaseShuttingDown && !shutdown {
				wait = 300 * time.Millisecond // an escalation or a lost lease may bring it
			}
			timer = time.NewTimer(wait)
			expired = timer.C
		}
		select {
		case <-ch:
		case <-expired:
			return false
		case <-ctx.Done():
			return false
		}
	}
}

func (r *runner) apply(ctx context.Context, st Step) {
	r.mu.Lock()
	r.steps++
	r.logLocked("step %s", st)
	c := r.children[st.Child]
	switch st.Do {
	case DoRestart, DoStop, DoStartChild, DoRemove:
		r.reqs = append(r.reqs, lifecycleReq{do: st.Do, path: st.Child, at: time.Now()})
	}
	req := len(r.reqs) - 1 // the step's, for a lifecycle step
	r.mu.Unlock()
	if r.fleet != nil && r.fleet.apply(st) {
		return
	}
	switch st.Do {
	case DoStart:
		r.mu.Lock()
		r.started = true
		r.mu.Unlock()
		startCtx, cancel := context.WithCancel(context.Background())
		r.startCancel = cancel
		r.background.Add(1)
		go func() {
			defer r.background.Done()
			err := r.m.Start(startCtx, r.sc.StartTimeout)
			if err == nil {
				r.mu.Lock()
				r.startedOK = true
				r.mu.Unlock()
			}
			r.logf("Start returned %v", err)
			r.startDone <- err
		}()
	case DoCancelStart:
		if r.startCancel != nil {
			r.requestShutdown()
			r.startCancel()
		}
	case DoShutdown:
		r.requestShutdown()
		d := st.Dur
		if d <= 0 {
			d = 10 * time.Second
		}
		r.background.Add(1)
		go func() {
			defer r.background.Done()
			sctx, cancel := context.WithTimeout(context.Background(), d)
			defer cancel()
			r.m.ShutdownAndWait(sctx)
			r.mu.Lock()
			if r.exitAt.IsZero() {
				r.exitAt = time.Now()
			}
			r.logLocked("ShutdownAndWait(%s) returned; Err %v", d, r.m.Err())
			r.mu.Unlock()
		}()
	case DoRestart:
		r.request(supervisor.RestartChild{Name: st.Child}, req)
	case DoStop:
		r.mu.Lock()
		r.stopReq[st.Child] = true
		r.mu.Unlock()
		r.request(supervisor.StopChild{Name: st.Child}, req)
	case DoStartChild:
		r.request(supervisor.StartChild{Name: st.Child}, req)
	case DoRemove:
		r.mu.Lock()
		r.stopReq[st.Child] = true
		r.mu.Unlock()
		r.request(supervisor.RemoveChild{Name: st.Child}, req)
	case DoAdd:
		r.mu.Lock()
		r.added++
		name := fmt.Sprintf("added-%d", r.added)
		path := name
		if st.Parent != "" {
			path = st.Parent + "/" + name
		}
		r.order[st.Parent] = append(r.order[st.Parent], name)
		r.addedAt[path] = time.Now()
		r.mu.Unlock()
		v := r.newRunnable(path, st.Kind, st.Knobs)
		r.request(supervisor.AddChild{Parent: st.Parent, Runnable: v}, -1)
	case DoPartition, DoReconnect:
		r.noteFault(st)
		if r.client != nil {
			r.client.Partition(st.Do == DoPartition)
		}
	case DoSteal:
		r.noteFault(st)
		if r.srv != nil {
			d := st.Dur
			if d < time.Second {
				d = time.Second
			}
			r.mu.Lock()
			if until := time.Now().Add(d); until.After(r.stealUntil) {
				r.stealUntil = until
			}
			r.mu.Unlock()
			if err := r.srv.Steal(namespace, r.shardLease(st.Shard), thief, d); err != nil {
				r.logf("steal: %v", err)
			}
		}
	case DoAnnotateLease, DoUnlabelLease, DoDeleteLease:
		if r.srv != nil {
			r.editLease(ctx, st)
		}
	case DoStallWatch, DoResumeWatch:
		r.stalled.Store(st.Do == DoStallWatch)
	case DoHangList, DoAnswerList:
		r.listsHung.set(st.Do == DoHangList)
	case DoSlowAPI:
		r.noteFault(st)
		r.latency.Store(int64(st.Dur))
		r.slowedEnds(time.Now())
	case DoFail:
		if c != nil && !c.fail(fmt.Errorf("statespace: %s fails", st.Child)) {
			r.logf("fail %s: it has not started", st.Child)
		}
	case DoKnobs:
		if c != nil {
			c.set(func(k *Knobs) { *k = st.Knobs })
			r.noteKnobs(c, st.Knobs)
		}
	case DoWait:
		timer := time.NewTimer(st.Dur)
		select {
		case <-timer.C:
		case <-ctx.Done():
		}
		timer.Stop()
	}
}

func (r *runner) requestShutdown() {
	r.mu.Lock()
	if r.shutdownReq.IsZero() {
		r.shutdownReq = time.Now()
	}
	r.mu.Unlock()
}

// request sends a lifecycle message in the background; req, when not -1,
// is its step's index in reqs, where its answer is noted.
func (r *runner) request(msg any, req int) {
	r.background.Add(1)
	go func() {
		defer r.background.Done()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		sent := time.Now()
		_, err := r.m.Request(ctx, msg)
		if req >= 0 {
			r.mu.Lock()
			r.reqs[req].answered, r.reqs[req].err = time.Now(), err
			r.mu.Unlock()
		}
		r.noteStop(msg, sent, err)
		r.noteAnswer(msg, sent, err)
		desc := fmt.Sprintf("%T%+v", msg, msg)
		if add, ok := msg.(supervisor.AddChild); ok {
			desc = fmt.Sprintf("AddChild %s", add.Runnable.(interface{ Name() string }).Name())
		}
		r.logf("%s answered %v", desc, err)
	}()
}

// noteKnobs sets up the bounded-time check of a running child made
// unhealthy: it must be found unhealthy (or restarted) soon.
func (r *runner) noteKnobs(c *child, k Knobs) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.knobGen[c.name]++
	if !k.Unhealthy && !k.HealthPanics {
		return
	}
	gen := r.knobGen[c.name]
	incs := r.journal.Of(c.name)
	if len(incs) == 0 {
		return
	}
	cur := incs[len(incs)-1]
	if !cur.StartedOK || cur.ShutdownIn {
		return
	}
	probed := r.phase == cm.PhaseRunning
	if c.kind == "webhook" {
		probed = slices.Contains([]cm.Phase{cm.PhaseElecting, cm.PhaseRecovering, cm.PhaseStarting, cm.PhaseRunning}, r.phase)
	}
	if !probed || !r.shutdownReq.IsZero() || c.kind == "store" {
		return
	}
	at, name, inc, kind, phase := time.Now(), c.name, cur.Inc, c.kind, r.phase
	interval, timeout, threshold := r.sc.healthOf(name) // its level's: a group's own, or the manager's
	if interval != HealthInterval || timeout != HealthTimeout || threshold != UnhealthyThreshold {
		r.groupProbes.Add(1)
	}
	r.obligations = append(r.obligations, &obligation{
		inv: NotProbed, child: name, due: at.Add(interval*time.Duration(threshold+2) + timeout + r.cfg.Slack),
		what: fmt.Sprintf("a running %s made unhealthy at %s (phase %s) was not found unhealthy, nor restarted", kind, stamp(at), phase),
		resolved: func() bool {
			if r.knobGen[name] != gen || !r.doneAt.IsZero() || !r.shutdownReq.IsZero() || r.stoppedAbove(name) || r.startedSince(name, at) {
				return true
			}
			if kind == "controller" && r.phase != cm.PhaseRunning {
				return true // fenced: it is being shut down
			}
			for _, in := range r.journal.Of(name) {
				if in.Inc == inc && in.ShutdownIn {
					return true
				}
			}
			return r.eventSince(at, func(x cm.Event) bool {
				return x.Child == name && (x.Type == cm.ChildUnhealthy || x.Type == cm.ChildFailed)
			}) || r.eventSince(at, func(x cm.Event) bool { return x.Type == cm.Escalated })
		},
	})
}

// editLease makes st's edit of its Lease as another writer does: read,
// change, update (again on a conflict with the holder's renewal), or
// delete. A Lease not there (before the first campaign, or deleted and
// not created again yet) is left alone.
func (r *runner) editLease(ctx context.Context, st Step) {
	leases := r.srv.Client(editor).CoordinationV1().Leases(namespace)
	name := r.shardLease(st.Shard)
	if st.Do == DoDeleteLease {
		if err := leases.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
			r.logf("delete lease %s: %v", name, err)
		}
		return
	}
	for range 5 {
		l, err := leases.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			r.logf("edit lease %s: %v", name, err)
			return
		}
		if st.Do == DoAnnotateLease {
			if l.Annotations == nil {
				l.Annotations = map[string]string{}
			}
			l.Annotations["statespace/edited"] = time.Now().Format(time.RFC3339Nano)
		} else {
			delete(l.Labels, shard.LabelGroup)
		}
		if _, err = leases.Update(ctx, l, metav1.UpdateOptions{}); !apierrors.IsConflict(err) {
			if err != nil {
				r.logf("edit lease %s: %v", name, err)
			}
			return
		}
	}
}
