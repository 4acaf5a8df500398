package statespace

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
)

// fakeCluster is a cm.Cluster for the build check.
type fakeCluster struct {
	name string
	ctx  context.Context
}

func (c fakeCluster) Name() string                 { return c.name }
func (c fakeCluster) Config() *rest.Config         { return &rest.Config{} }
func (c fakeCluster) Client() kubernetes.Interface { return nil }
func (c fakeCluster) Context() context.Context     { return c.ctx }

// The fleet's checks fail on what they forbid, and only on that.
func TestFleetInvariants(t *testing.T) {
	path := fleetPath("c0")
	start := func(r *runner, inc int) {
		r.journal.add(path, "controller", StartEnter, inc, nil)
		r.journal.add(path, "controller", StartExit, inc, nil)
	}
	recoverStore := func(r *runner, inc int) {
		r.journal.add(fleetStorePath("c0"), "store", StartEnter, inc, nil)
		r.journal.add(fleetStorePath("c0"), "store", StartExit, inc, nil)
	}
	event := func(r *runner, typ cm.EventType) {
		r.events = append(r.events, cm.Event{Type: typ, Child: fleetName + "/c0", Time: later(time.Now())})
	}
	offlineErr := func(r *runner, err error) {
		r.events = append(r.events, cm.Event{Type: cm.ClusterOffline, Child: fleetName + "/c0", Time: later(time.Now()), Err: err})
	}
	down := func(r *runner) { r.fleet.downSince["c0"] = later(time.Now()) }
	ask := func(r *runner, do Action, target string) {
		r.reqs = append(r.reqs, lifecycleReq{do: do, path: target, at: later(time.Now())})
	}
	stopped := func(r *runner) {
		at := later(time.Now())
		r.stopsDone = append(r.stopsDone, stopDone{path: fleetName + "/c0", sent: at, answered: later(at)})
	}
	// outage: c0's API server down from now, up again at once unless
	// lasts.
	outage := func(r *runner, lasts bool) {
		srv := r.fleet.servers["c0"]
		srv.setDown(later(time.Now()))
		if !lasts {
			later(time.Now())
			srv.setUp()
		}
	}
	restarted := func(r *runner, path string) {
		r.events = append(r.events, cm.Event{Type: cm.ChildRestarted, Child: path, Time: later(time.Now())})
	}
	failedThenRestarted := func(r *runner, path string) {
		r.events = append(r.events, cm.Event{Type: cm.ChildFailed, Child: path, Time: later(time.Now())})
		restarted(r, path)
	}
	storePath := fleetStorePath("c0")
	ended, end := context.WithCancel(context.Background())
	end()
	open := context.Background()
	cases := []struct {
		name  string
		setup func(r *runner)
		want  Invariant // "" for none
	}{
		{"started and stopped before its ClusterDisengaged", func(r *runner) {
			start(r, 1)
			r.journal.add(path, "controller", ShutdownEnter, 1, nil)
			r.journal.add(path, "controller", ShutdownExit, 1, nil)
			event(r, cm.ClusterDisengaged)
		}, ""},
		{"started after its ClusterDisengaged", func(r *runner) { event(r, cm.ClusterDisengaged); later(time.Now()); start(r, 1) }, DisengagedRan},
		{"engaged again, then started", func(r *runner) {
			event(r, cm.ClusterDisengaged)
			event(r, cm.ClusterEngaged)
			start(r, 1)
		}, ""},
		{"started while down, after ClusterOffline", func(r *runner) { down(r); event(r, cm.ClusterOffline); later(time.Now()); start(r, 1) }, OfflineRan},
		{"started and stopped while down, before ClusterOffline", func(r *runner) {
			down(r)
			start(r, 1)
			r.journal.add(path, "controller", ShutdownEnter, 1, nil)
			r.journal.add(path, "controller", ShutdownExit, 1, nil)
			event(r, cm.ClusterOffline)
		}, ""},
		{"started while down by a StartChild of its group sent before ClusterOffline", func(r *runner) {
			down(r)
			ask(r, DoStartChild, fleetName+"/c0")
			event(r, cm.ClusterOffline)
			start(r, 1)
		}, ""},
		// The group's admission refuses a start by hand once the member is
		// Offline (TreeStarting): sent after ClusterOffline, it excuses
		// nothing.
		{"started while down after a StartChild of its group sent after ClusterOffline", func(r *runner) {
			down(r)
			event(r, cm.ClusterOffline)
			ask(r, DoStartChild, fleetName+"/c0")
			start(r, 1)
		}, OfflineRan},
		{"started while down after a RestartChild of the fleet sent after ClusterOffline", func(r *runner) {
			down(r)
			event(r, cm.ClusterOffline)
			ask(r, DoRestart, fleetName)
			start(r, 1)
		}, OfflineRan},
		{"Offline while up: no outage of ours", func(r *runner) { event(r, cm.ClusterOffline); later(time.Now()); start(r, 1) }, ""},
		{"its group stopped on request, then started", func(r *runner) { stopped(r); later(time.Now()); start(r, 1) }, StoppedRan},
		{"its group stopped on request, then Offline and Online again", func(r *runner) {
			stopped(r)
			event(r, cm.ClusterOffline)
			event(r, cm.ClusterOnline)
			start(r, 1)
		}, ""},
		{"its group stopped on request while Offline, then Online again", func(r *runner) {
			event(r, cm.ClusterOffline)
			stopped(r)
			event(r, cm.ClusterOnline)
			start(r, 1)
		}, ""},
		{"its group stopped on request, then Offline, started, and Online", func(r *runner) {
			stopped(r)
			event(r, cm.ClusterOffline)
			start(r, 1)
			event(r, cm.ClusterOnline) // said once the fleet's StartChild was answered
		}, ""},
		{"its group stopped on request while the fleet added it, then Online", func(r *runner) {
			event(r, cm.ClusterEngaged)
			stopped(r)
			start(r, 1)
			event(r, cm.ClusterOnline) // said once the fleet's add (or StartChild) was answered
		}, ""},
		{"its group stopped on request once Online on its config, then Online again", func(r *runner) {
			event(r, cm.ClusterEngaged)
			event(r, cm.ClusterOnline)
			stopped(r)
			start(r, 1)
			event(r, cm.ClusterOnline)
		}, StoppedRan},
		{"its group stopped on request, then started by the loops of its fleet's runner started again", func(r *runner) {
			stopped(r)
			failedThenRestarted(r, fleetName+"/"+cm.FleetProviderChild)
			start(r, 1)
		}, ""},
		{"its group stopped on request after its fleet's runner started again, then started", func(r *runner) {
			failedThenRestarted(r, fleetName+"/"+cm.FleetProviderChild)
			stopped(r)
			start(r, 1)
		}, StoppedRan},
		{"its group stopped on request, then Online with no Offline", func(r *runner) {
			stopped(r)
			event(r, cm.ClusterOnline)
			start(r, 1)
		}, StoppedRan},
		{"its group stopped on request, then Offline in an outage, up again, started (not yet said Online)", func(r *runner) {
			stopped(r)
			outage(r, true)
			event(r, cm.ClusterOffline)
			later(time.Now())
			r.fleet.servers["c0"].setUp()
			start(r, 1)
		}, ""},
		{"its group stopped on request, then Offline in an outage, started while still down", func(r *runner) {
			stopped(r)
			outage(r, true)
			event(r, cm.ClusterOffline)
			start(r, 1)
		}, StoppedRan},
		{"its group stopped on request, then Offline while up (Failed), started", func(r *runner) {
			stopped(r)
			outage(r, false)
			event(r, cm.ClusterOffline)
			start(r, 1)
		}, StoppedRan},
		{"Offline in an outage, up again, its group stopped on request before the fleet started it, started", func(r *runner) {
			outage(r, true)
			event(r, cm.ClusterOffline)
			later(time.Now())
			r.fleet.servers["c0"].setUp()
			stopped(r) // "a StopChild of the group lasts until the loop next moves it"
			start(r, 1)
		}, ""},
		{"its group stopped on request, then Offline by a probe timed out (up all along), started", func(r *runner) {
			stopped(r)
			offlineErr(r, errors.New(`API server failed its probes for 437ms: GET /readyz: Get "http://127.0.0.1:1/readyz": context deadline exceeded`))
			start(r, 1)
		}, ""},
		{"its group stopped on request, then Failed (its group stopped itself), started", func(r *runner) {
			stopped(r)
			offlineErr(r, errors.New(`group "fleet/c0": controller "fleet/c0/fctrl" spent its restart budget`))
			start(r, 1)
		}, StoppedRan},
		{"its store restarted twice, a probe timed out between (up all along)", func(r *runner) {
			failedThenRestarted(r, storePath)
			offlineErr(r, errors.New("GET /readyz: context deadline exceeded"))
			restarted(r, storePath)
		}, ""},
		{"its store restarted twice, a probe timed out before the first (up all along)", func(r *runner) {
			offlineErr(r, errors.New("GET /readyz: context deadline exceeded"))
			failedThenRestarted(r, storePath)
			restarted(r, storePath)
		}, RestartUncaused},
		{"its store restarted twice, Offline in an outage and up again between", func(r *runner) {
			failedThenRestarted(r, storePath)
			outage(r, true)
			event(r, cm.ClusterOffline)
			later(time.Now())
			r.fleet.servers["c0"].setUp()
			restarted(r, storePath)
		}, ""},
		{"its store restarted twice, Offline in an outage between, still down", func(r *runner) {
			failedThenRestarted(r, storePath)
			outage(r, true)
			event(r, cm.ClusterOffline)
			restarted(r, storePath)
		}, RestartUncaused},
		{"its store restarted twice, Offline and back up before the first", func(r *runner) {
			outage(r, true)
			event(r, cm.ClusterOffline)
			later(time.Now())
			r.fleet.servers["c0"].setUp()
			failedThenRestarted(r, storePath)
			restarted(r, storePath)
		}, RestartUncaused},
		{"its group stopped on request, then built anew", func(r *runner) {
			stopped(r)
			r.fleet.build(fakeCluster{"c0", open})
			start(r, 1)
		}, ""},
		{"stopped before its ClusterOffline", func(r *runner) {
			start(r, 1)
			r.journal.add(path, "controller", ShutdownEnter, 1, nil)
			r.journal.add(path, "controller", ShutdownExit, 1, nil)
			event(r, cm.ClusterOffline)
		}, ""},
		{"running at its ClusterOffline", func(r *runner) { start(r, 1); event(r, cm.ClusterOffline) }, MemberRunning},
		{"running at its ClusterDisengaged", func(r *runner) { start(r, 1); event(r, cm.ClusterDisengaged) }, MemberRunning},
		{"running at its ClusterOffline, started again on request", func(r *runner) {
			start(r, 1)
			ask(r, DoRestart, fleetName)
			event(r, cm.ClusterOffline)
		}, ""},
		{"its store recovered and stopped before its ClusterDisengaged", func(r *runner) {
			recoverStore(r, 1)
			r.journal.add(fleetStorePath("c0"), "store", ShutdownEnter, 1, nil)
			r.journal.add(fleetStorePath("c0"), "store", ShutdownExit, 1, nil)
			event(r, cm.ClusterDisengaged)
		}, ""},
		{"its store recovering after its ClusterDisengaged", func(r *runner) {
			event(r, cm.ClusterDisengaged)
			later(time.Now())
			r.journal.add(fleetStorePath("c0"), "store", StartEnter, 1, nil)
		}, DisengagedRan},
		{"its store recovered while down, after ClusterOffline", func(r *runner) {
			down(r)
			event(r, cm.ClusterOffline)
			later(time.Now())
			recoverStore(r, 1)
		}, OfflineRan},
		{"its store recovered while down by a RestartChild of the fleet sent before ClusterOffline", func(r *runner) {
			down(r)
			ask(r, DoRestart, fleetName)
			event(r, cm.ClusterOffline)
			recoverStore(r, 1)
		}, ""},
		{"its store recovered while down after a RestartChild of the fleet sent after ClusterOffline", func(r *runner) {
			down(r)
			event(r, cm.ClusterOffline)
			ask(r, DoRestart, fleetName)
			recoverStore(r, 1)
		}, OfflineRan},
		{"its store running at its ClusterOffline", func(r *runner) { recoverStore(r, 1); event(r, cm.ClusterOffline) }, MemberRunning},
		{"its store still in its Recover at its ClusterDisengaged", func(r *runner) {
			r.journal.add(fleetStorePath("c0"), "store", StartEnter, 1, nil)
			event(r, cm.ClusterDisengaged)
		}, MemberRunning},
		{"built again once the earlier Cluster ended", func(r *runner) {
			r.fleet.build(fakeCluster{"c0", ended})
			r.fleet.build(fakeCluster{"c0", open})
		}, ""},
		{"the same Cluster built again", func(r *runner) {
			c := fakeCluster{"c0", open}
			r.fleet.build(c)
			r.fleet.build(c)
		}, ""},
		{"built again while the earlier Cluster runs", func(r *runner) {
			r.fleet.build(fakeCluster{"c0", open})
			r.fleet.build(fakeCluster{"c0", ended})
		}, FleetContextOverlap},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := newRunner(Scenario{Fleet: 1}, Config{Slack: time.Second})
			defer r.pauses.Stop()
			r.fleet = newFleetState(r)
			r.fleet.servers["c0"], r.fleet.want["c0"] = &memberServer{}, 1
			r.children[path] = newChild(path, "controller", r.journal, r.release)
			r.children[storePath] = newChild(storePath, "store", r.journal, r.release)
			tc.setup(r)
			r.checkFleet()
			r.checkStoppedRan()
			r.mu.Lock()
			r.checkRestartCauses()
			r.mu.Unlock()
			var got []Invariant
			for _, v := range r.violations {
				got = append(got, v.Invariant)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("violations %v, want none: %v", got, r.violations)
			case tc.want != "" && (len(got) != 1 || got[0] != tc.want):
				t.Errorf("violations %v, want one %s", got, tc.want)
			}
		})
	}
}

// OfflineLate fails on an outage the fleet has not said Offline past its
// bound while everything it needs to say it held all along, and only on
// that.
func TestFleetOfflineLate(t *testing.T) {
	const slack = time.Second
	long := -10 * time.Second // long before now: past any bound
	at, shard := eventAt, shardEventAt
	member := fleetName + "/c0"
	// up: the member engaged, the manager Running and the fleet's runner
	// started, all long ago; its API server down since ago.
	up := func(r *runner, ago time.Duration) {
		at(r, long-time.Second, cm.PhaseChanged, "")
		r.events[len(r.events)-1].Phase = cm.PhaseRunning
		r.phase = cm.PhaseRunning
		at(r, long-time.Second, cm.ChildStarted, fleetName+"/provider")
		at(r, long-time.Second, cm.ClusterEngaged, member)
		at(r, long-time.Second, cm.ClusterOnline, member)
		r.fleet.servers["c0"].engaged.Store(true)
		r.fleet.servers["c0"].down.Store(true)
		r.fleet.servers["c0"].downAt.Store(time.Now().Add(ago).UnixNano())
	}
	elected := Scenario{Fleet: 1, Election: Reelect}
	sharded := Scenario{Fleet: 1, Election: Reelect, Shards: 3}
	mine := sharded.shardOf(fleetPath("c0"))
	cases := []struct {
		name  string
		sc    Scenario
		setup func(r *runner)
		want  Invariant // "" for none
	}{
		{"down past the bound, never said Offline", Scenario{}, func(r *runner) { up(r, long) }, OfflineLate},
		{"down past the bound, said Offline", Scenario{}, func(r *runner) { up(r, long); at(r, long/2, cm.ClusterOffline, member) }, ""},
		{"down past the bound, said Disengaged", Scenario{}, func(r *runner) { up(r, long); at(r, long/2, cm.ClusterDisengaged, member) }, ""},
		{"down past the bound, Offline since before the outage", Scenario{}, func(r *runner) {
			up(r, long)
			r.events = slices.DeleteFunc(r.events, func(e cm.Event) bool { return e.Type == cm.ClusterOnline })
			at(r, long-time.Second/2, cm.ClusterOffline, member) // engaged down: it starts Offline
		}, ""},
		{"down past the bound, said Offline, then Online", Scenario{}, func(r *runner) {
			up(r, long)
			at(r, long/2, cm.ClusterOffline, member)
			at(r, long/4, cm.ClusterOnline, member)
		}, OfflineLate},
		{"down past the bound, engaged on a new config since, not yet probed", Scenario{}, func(r *runner) {
			up(r, long)
			at(r, long/2, cm.ClusterOffline, member)
			at(r, long/4, cm.ClusterEngaged, member)
		}, OfflineLate},
		{"down, not yet past the bound", Scenario{}, func(r *runner) { up(r, -FleetFailureThreshold) }, ""},
		{"up again", Scenario{}, func(r *runner) { up(r, long); r.fleet.servers["c0"].setUp() }, ""},
		{"down past the bound, not engaged", Scenario{}, func(r *runner) { up(r, long); r.fleet.servers["c0"].engaged.Store(false) }, ""},
		{"down past the bound, engaged again just now", Scenario{}, func(r *runner) { up(r, long); at(r, 0, cm.ClusterEngaged, member) }, ""},
		{"down past the bound, Running again just now", Scenario{}, func(r *runner) {
			up(r, long)
			at(r, 0, cm.PhaseChanged, "")
			r.events[len(r.events)-1].Phase = cm.PhaseRunning
		}, ""},
		{"down past the bound, the manager not Running", Scenario{}, func(r *runner) { up(r, long); r.phase = cm.PhaseShuttingDown }, ""},
		{"down past the bound, the fleet's runner restarted just now", Scenario{}, func(r *runner) {
			up(r, long)
			at(r, 0, cm.ChildRestarted, fleetName+"/provider")
		}, ""},
		{"down past the bound, the fleet's runner failed", Scenario{}, func(r *runner) { up(r, long); at(r, long/2, cm.ChildFailed, fleetName+"/provider") }, ""},
		{"down past the bound, the fleet's group stopped", Scenario{}, func(r *runner) { up(r, long); at(r, long/2, cm.ChildStopped, fleetName) }, ""},
		{"down past the bound, events dropped", Scenario{}, func(r *runner) { up(r, long); at(r, long/2, cm.EventsDropped, "") }, ""},
		{"down past the bound, the lease held all along", elected, func(r *runner) { at(r, 2*long, cm.LeaderElected, ""); up(r, long) }, OfflineLate},
		{"down past the bound, the lease never held", elected, func(r *runner) { up(r, long) }, ""},
		{"down past the bound, the lease lost", elected, func(r *runner) {
			at(r, 2*long, cm.LeaderElected, "")
			up(r, long)
			at(r, long/2, cm.LeaderLost, "")
		}, ""},
		{"down past the bound, the lease held again just now", elected, func(r *runner) {
			at(r, 2*long, cm.LeaderElected, "")
			up(r, long)
			at(r, long/2, cm.LeaderLost, "")
			at(r, 0, cm.LeaderElected, "")
		}, ""},
		{"down past the bound, its shard held all along", sharded, func(r *runner) { shard(r, 2*long, cm.ShardAcquired, mine); up(r, long) }, OfflineLate},
		{"down past the bound, another shard held", sharded, func(r *runner) { shard(r, 2*long, cm.ShardAcquired, (mine+1)%3); up(r, long) }, ""},
		{"down past the bound, its shard handed over", sharded, func(r *runner) {
			shard(r, 2*long, cm.ShardAcquired, mine)
			up(r, long)
			shard(r, long/2, cm.ShardReleased, mine)
		}, ""},
		{"down past the bound, another shard lost", sharded, func(r *runner) {
			shard(r, 2*long, cm.ShardAcquired, mine)
			shard(r, 2*long, cm.ShardAcquired, (mine+1)%3)
			up(r, long)
			shard(r, long/2, cm.ShardLost, (mine+1)%3)
		}, OfflineLate},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			judgeMemberC0(t, tc.sc, slack, tc.setup, func(r *runner) {
				r.checkOfflineLate()
				r.checkObligations(time.Now())
			}, tc.want)
		})
	}
}

// A member's store (Scenario.FleetStore) holds its Recover while its API
// server is down, until it answers or the Recover's context ends.
func TestFleetMemberStoreWaitsForItsAPIServer(t *testing.T) {
	start := func(t *testing.T, srv *memberServer, ctx context.Context) <-chan error {
		t.Helper()
		j := NewJournal(func(v Violation) { t.Errorf("journal: %s", v) })
		s := memberStore{Store{newChild(fleetStorePath("c0"), "store", j, make(chan struct{}))}, srv, 0}
		done := make(chan error, 1)
		go func() { done <- s.Recover(ctx) }()
		return done
	}
	t.Run("up", func(t *testing.T) {
		if err := <-start(t, &memberServer{}, context.Background()); err != nil {
			t.Fatalf("Recover with its API server up: %v", err)
		}
	})
	t.Run("down, then up", func(t *testing.T) {
		srv := &memberServer{}
		srv.down.Store(true)
		done := start(t, srv, context.Background())
		srv.setUp()
		if err := <-done; err != nil {
			t.Fatalf("Recover once its API server is up: %v", err)
		}
	})
	t.Run("down, its context ends", func(t *testing.T) {
		srv := &memberServer{}
		srv.down.Store(true)
		ctx, cancel := context.WithCancel(context.Background())
		done := start(t, srv, ctx)
		cancel()
		if err := <-done; err != context.Canceled {
			t.Fatalf("Recover with its API server down and its context ended: %v, want context.Canceled (it waits for the server, it never gives up before)", err)
		}
	})
}

// OnlineWhileDown fails on a ClusterOnline said while the member's API
// server had been down for longer than its bound, with everything the
// fleet needs to probe it holding all along, and only on that.
func TestFleetOnlineWhileDown(t *testing.T) {
	const slack = time.Second
	long := -10 * time.Second // long before now: past any bound
	at, shard := eventAt, shardEventAt
	member := fleetName + "/c0"
	running := func(r *runner, d time.Duration) {
		at(r, d, cm.PhaseChanged, "")
		r.events[len(r.events)-1].Phase = cm.PhaseRunning
	}
	// up: the member engaged and Online, the manager Running and the
	// fleet's runner started, all long ago; its API server down from
	// ago until its first return (zero: down still).
	up := func(r *runner, ago, back time.Duration) {
		running(r, 3*long)
		r.phase = cm.PhaseRunning
		at(r, 3*long, cm.ChildStarted, fleetName+"/provider")
		at(r, 3*long, cm.ClusterEngaged, member)
		at(r, 3*long, cm.ClusterOnline, member)
		srv := r.fleet.servers["c0"]
		srv.engaged.Store(true)
		srv.setDown(time.Now().Add(ago))
		if back != 0 {
			srv.mu.Lock()
			srv.down.Store(false)
			srv.outages[len(srv.outages)-1].to = time.Now().Add(back)
			srv.mu.Unlock()
		}
	}
	online := func(r *runner, d time.Duration) {
		at(r, d, cm.ClusterOffline, member)
		at(r, d, cm.ClusterOnline, member)
	}
	elected := Scenario{Fleet: 1, Election: Reelect}
	sharded := Scenario{Fleet: 1, Election: Reelect, Shards: 3}
	mine := sharded.shardOf(fleetPath("c0"))
	cases := []struct {
		name  string
		sc    Scenario
		setup func(r *runner)
		want  Invariant // "" for none
	}{
		{"said Online, down past the bound", Scenario{}, func(r *runner) { up(r, 2*long, 0); online(r, 0) }, OnlineWhileDown},
		{"said Online, down not past the bound", Scenario{}, func(r *runner) { up(r, -FleetFailureThreshold, 0); online(r, 0) }, ""},
		{"said Online before the outage", Scenario{}, func(r *runner) { online(r, 2*long); up(r, long, 0) }, ""},
		{"said Online once up again", Scenario{}, func(r *runner) { up(r, 2*long, long); online(r, 0) }, ""},
		{"said Online in a second outage, not past the bound", Scenario{}, func(r *runner) {
			up(r, 2*long, long)
			r.fleet.servers["c0"].setDown(time.Now().Add(-FleetFailureThreshold))
			online(r, 0)
		}, ""},
		{"said Online in a second outage, past the bound", Scenario{}, func(r *runner) {
			up(r, 2*long, long)
			r.fleet.servers["c0"].setDown(time.Now().Add(long / 2))
			online(r, 0)
		}, OnlineWhileDown},
		{"said Online, down past the bound, engaged on a new config just before", Scenario{}, func(r *runner) {
			up(r, 2*long, 0)
			at(r, -FleetFailureThreshold, cm.ClusterEngaged, member) // its first probe decides at once
			online(r, 0)
		}, OnlineWhileDown},
		{"said Online, down past the bound, Running again just before", Scenario{}, func(r *runner) {
			up(r, 2*long, 0)
			running(r, -FleetFailureThreshold)
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, the manager not Running", Scenario{}, func(r *runner) {
			up(r, 2*long, 0)
			at(r, long, cm.PhaseChanged, "")
			r.events[len(r.events)-1].Phase = cm.PhaseShuttingDown
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, the runner restarted just before", Scenario{}, func(r *runner) {
			up(r, 2*long, 0)
			at(r, -FleetFailureThreshold, cm.ChildRestarted, fleetName+"/provider")
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, the runner failed", Scenario{}, func(r *runner) {
			up(r, 2*long, 0)
			at(r, long, cm.ChildFailed, fleetName+"/provider")
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, the runner restarted after it", Scenario{}, func(r *runner) {
			up(r, 2*long, 0)
			online(r, long/2)
			at(r, long/4, cm.ChildRestarted, fleetName+"/provider")
		}, OnlineWhileDown},
		{"said Online, down past the bound, events dropped", Scenario{}, func(r *runner) {
			up(r, 2*long, 0)
			at(r, long, cm.EventsDropped, "")
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, the lease held all along", elected, func(r *runner) {
			at(r, 4*long, cm.LeaderElected, "")
			up(r, 2*long, 0)
			online(r, 0)
		}, OnlineWhileDown},
		{"said Online, down past the bound, the lease lost", elected, func(r *runner) {
			at(r, 4*long, cm.LeaderElected, "")
			up(r, 2*long, 0)
			at(r, long, cm.LeaderLost, "")
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, the lease held again just before", elected, func(r *runner) {
			at(r, 4*long, cm.LeaderElected, "")
			up(r, 2*long, 0)
			at(r, long, cm.LeaderLost, "")
			at(r, -FleetFailureThreshold, cm.LeaderElected, "")
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, its shard held all along", sharded, func(r *runner) {
			shard(r, 4*long, cm.ShardAcquired, mine)
			up(r, 2*long, 0)
			online(r, 0)
		}, OnlineWhileDown},
		{"said Online, down past the bound, another shard held", sharded, func(r *runner) {
			shard(r, 4*long, cm.ShardAcquired, (mine+1)%3)
			up(r, 2*long, 0)
			online(r, 0)
		}, ""},
		{"said Online, down past the bound, its shard lost", sharded, func(r *runner) {
			shard(r, 4*long, cm.ShardAcquired, mine)
			up(r, 2*long, 0)
			shard(r, long, cm.ShardLost, mine)
			online(r, 0)
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			judgeMemberC0(t, tc.sc, slack, tc.setup, (*runner).checkOnlineWhileDown, tc.want)
		})
	}
}

// eventAt records an event of typ on child, d from now, as the manager
// would have published it.
func eventAt(r *runner, d time.Duration, typ cm.EventType, child string) {
	r.events = append(r.events, cm.Event{Type: typ, Child: child, Time: time.Now().Add(d)})
}

// started journals a start call of path, d from now, that returned nil
// at once: an incarnation running since.
func started(r *runner, path string, d time.Duration) {
	inc := len(r.journal.Of(path)) + 1
	r.journal.addAt(path, "controller", StartEnter, inc, nil, time.Now().Add(d))
	r.journal.addAt(path, "controller", StartExit, inc, nil, time.Now().Add(d))
}

// shardEventAt records an event of typ on shard n, d from now.
func shardEventAt(r *runner, d time.Duration, typ cm.EventType, n int) {
	eventAt(r, d, typ, "")
	r.events[len(r.events)-1].Shard = n
}

// judgeMemberC0 judges, by check, a fleet of one member c0 (its server up,
// its controller known) as setup leaves it: want is the one invariant it
// must break, "" none.
func judgeMemberC0(t *testing.T, sc Scenario, slack time.Duration, setup, check func(*runner), want Invariant) {
	t.Helper()
	sc.Fleet = 1
	r := newRunner(sc, Config{Slack: slack})
	defer r.pauses.Stop()
	r.fleet = newFleetState(r)
	r.fleet.servers["c0"], r.fleet.want["c0"] = &memberServer{}, 1
	r.children[fleetPath("c0")] = newChild(fleetPath("c0"), "controller", r.journal, r.release)
	setup(r)
	check(r)
	var got []Invariant
	for _, v := range append(slices.Clone(r.violations), r.excused...) { // a paused test process excuses it
		got = append(got, v.Invariant)
	}
	switch {
	case want == "" && len(got) > 0:
		t.Errorf("violations %v, want none: %v", got, r.violations)
	case want != "" && (len(got) != 1 || got[0] != want):
		t.Errorf("violations %v, want one %s", got, want)
	}
}

// flap takes every ClusterUp followed by its wait down again, and nothing
// else.
func TestFleetFlap(t *testing.T) {
	steps := []Step{
		{Do: DoClusterUp, Child: "c0"}, {Do: DoWait, Dur: time.Second},
		{Do: DoClusterDown, Child: "c1"}, {Do: DoWait, Dur: time.Second},
		{Do: DoClusterUp, Child: "c2"},
	}
	got := flap(steps, func() time.Duration { return time.Millisecond }, func() time.Duration { return 2 * time.Millisecond })
	want := []Step{
		{Do: DoClusterUp, Child: "c0"}, {Do: DoWait, Dur: time.Millisecond}, {Do: DoClusterDown, Child: "c0"}, {Do: DoWait, Dur: 2 * time.Millisecond},
		{Do: DoClusterDown, Child: "c1"}, {Do: DoWait, Dur: time.Second},
		{Do: DoClusterUp, Child: "c2"},
	}
	if len(got) != len(want) {
		t.Fatalf("flap: %v, want %v", got, want)
	}
	for i := range want {
		if got[i].Do != want[i].Do || got[i].Child != want[i].Child || got[i].Dur != want[i].Dur {
			t.Fatalf("flap step %d: %v, want %v (all: %v)", i, got[i], want[i], got)
		}
	}
	flapped := 0
	for seed := range uint64(60) {
		sc := WithFleet(Generate(seed))
		for i, st := range sc.Steps {
			if st.Do == DoClusterUp && i+2 < len(sc.Steps) && sc.Steps[i+2].Do == DoClusterDown && sc.Steps[i+2].Child == st.Child {
				flapped++
				break
			}
		}
	}
	if flapped == 0 {
		t.Errorf("no fleet of 60 seeds flaps")
	}
}

// OnlineEarly fails on a ClusterOnline said while the member's controller
// was not running, with nothing since the fleet's previous word on it
// that may have left it so, and only on that.
func TestFleetOnlineEarly(t *testing.T) {
	const slack = time.Second
	long := -10 * time.Second // long before now
	at, shard := eventAt, shardEventAt
	member, path := fleetName+"/c0", fleetPath("c0")
	// engaged: the member engaged (the fleet's previous word) long ago,
	// the manager Running and the fleet's runner started before.
	engaged := func(r *runner) {
		at(r, 3*long, cm.PhaseChanged, "")
		r.events[len(r.events)-1].Phase = cm.PhaseRunning
		r.phase = cm.PhaseRunning
		at(r, 3*long, cm.ChildStarted, fleetName+"/provider")
		at(r, 2*long, cm.ClusterEngaged, member)
	}
	entered := func(r *runner, d time.Duration) {
		r.journal.addAt(path, "controller", StartEnter, len(r.journal.Of(path))+1, nil, time.Now().Add(d))
	}
	exited := func(r *runner, d time.Duration, err error) {
		incs := r.journal.Of(path)
		r.journal.addAt(path, "controller", StartExit, incs[len(incs)-1].Inc, err, time.Now().Add(d))
	}
	shutDown := func(r *runner, d time.Duration) {
		inc := r.journal.Of(path)[len(r.journal.Of(path))-1].Inc
		r.journal.addAt(path, "controller", ShutdownEnter, inc, nil, time.Now().Add(d))
		r.journal.addAt(path, "controller", ShutdownExit, inc, nil, time.Now().Add(d))
	}
	asked := func(r *runner, do Action, target string, sent, answered time.Duration) {
		r.reqs = append(r.reqs, lifecycleReq{do: do, path: target, at: time.Now().Add(sent), answered: time.Now().Add(answered)})
	}
	sharded := Scenario{Fleet: 1, Election: Reelect, Shards: 3}
	mine := sharded.shardOf(path)
	cases := []struct {
		name  string
		sc    Scenario
		setup func(r *runner)
		want  Invariant // "" for none
	}{
		{"running", Scenario{}, func(r *runner) { engaged(r); started(r, path, long); at(r, 0, cm.ClusterOnline, member) }, ""},
		{"never started", Scenario{}, func(r *runner) { engaged(r); at(r, 0, cm.ClusterOnline, member) }, OnlineEarly},
		{"still in its start call", Scenario{}, func(r *runner) { engaged(r); entered(r, long); at(r, 0, cm.ClusterOnline, member) }, OnlineEarly},
		{"its start returned after", Scenario{}, func(r *runner) {
			engaged(r)
			entered(r, long)
			at(r, long/2, cm.ClusterOnline, member)
			exited(r, 0, nil)
		}, OnlineEarly},
		{"shut down before", Scenario{}, func(r *runner) {
			engaged(r)
			started(r, path, long)
			shutDown(r, long/2)
			at(r, 0, cm.ClusterOnline, member)
		}, OnlineEarly},
		{"shut down after", Scenario{}, func(r *runner) {
			engaged(r)
			started(r, path, long)
			at(r, long/2, cm.ClusterOnline, member)
			shutDown(r, 0)
		}, ""},
		{"its start failed since the previous word", Scenario{}, func(r *runner) {
			engaged(r)
			entered(r, long)
			exited(r, long, errors.New("boom"))
			at(r, 0, cm.ClusterOnline, member)
		}, ""},
		{"its start failed before the previous word", Scenario{}, func(r *runner) {
			engaged(r)
			entered(r, 3*long)
			exited(r, 3*long, errors.New("boom"))
			at(r, 0, cm.ClusterOnline, member)
		}, OnlineEarly},
		{"a StopChild of its group since", Scenario{}, func(r *runner) {
			engaged(r)
			started(r, path, long)
			asked(r, DoStop, member, long/2, long/2)
			shutDown(r, long/2)
			at(r, 0, cm.ClusterOnline, member)
		}, ""},
		{"a StopChild of its group answered before the previous word", Scenario{}, func(r *runner) {
			asked(r, DoStop, member, 4*long, 4*long)
			engaged(r)
			at(r, 0, cm.ClusterOnline, member)
		}, OnlineEarly},
		{"a StopChild of another member since", Scenario{}, func(r *runner) {
			engaged(r)
			asked(r, DoStop, fleetName+"/c1", long, long)
			at(r, 0, cm.ClusterOnline, member)
		}, OnlineEarly},
		{"a failure of it since", Scenario{}, func(r *runner) {
			engaged(r)
			started(r, path, long)
			at(r, long/2, cm.ChildFailed, path)
			shutDown(r, long/2)
			at(r, 0, cm.ClusterOnline, member)
		}, ""},
		{"its shard held, never started", sharded, func(r *runner) {
			shard(r, 4*long, cm.ShardAcquired, mine)
			engaged(r)
			at(r, 0, cm.ClusterOnline, member)
		}, OnlineEarly},
		{"its shard not held", sharded, func(r *runner) {
			shard(r, 4*long, cm.ShardAcquired, (mine+1)%3)
			engaged(r)
			at(r, 0, cm.ClusterOnline, member)
		}, ""},
		{"its shard acquired since", sharded, func(r *runner) {
			engaged(r)
			shard(r, long, cm.ShardAcquired, mine)
			at(r, 0, cm.ClusterOnline, member)
		}, ""},
		{"events dropped", Scenario{}, func(r *runner) {
			engaged(r)
			at(r, long, cm.EventsDropped, "")
			at(r, 0, cm.ClusterOnline, member)
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			judgeMemberC0(t, tc.sc, slack, tc.setup, func(r *runner) {
				r.checkOnlineEarly(map[string][]string{"c0": {path}})
			}, tc.want)
		})
	}
}

// OutageUnsaid fails on a member's group stopped and started again with
// no ClusterOffline between and nothing else that stops a group, and only
// on that.
func TestFleetOutageUnsaid(t *testing.T) {
	long := -10 * time.Second
	at := eventAt
	member := fleetName + "/c0"
	engaged := func(r *runner) {
		at(r, 4*long, cm.ClusterEngaged, member)
		at(r, 4*long, cm.ClusterOnline, member)
	}
	cases := []struct {
		name  string
		setup func(r *runner)
		want  Invariant
	}{
		{"stopped, said Offline, started", func(r *runner) {
			engaged(r)
			at(r, 3*long, cm.ChildStopped, member)
			at(r, 3*long, cm.ClusterOffline, member)
			at(r, 2*long, cm.ChildStarted, fleetPath("c0"))
		}, ""},
		{"stopped, started, never said", func(r *runner) {
			engaged(r)
			at(r, 3*long, cm.ChildStopped, member)
			at(r, 2*long, cm.ChildStarted, fleetPath("c0"))
		}, OutageUnsaid},
		{"stopped, not started again", func(r *runner) {
			engaged(r)
			at(r, 3*long, cm.ChildStopped, member)
		}, ""},
		{"stopped by hand, started", func(r *runner) {
			engaged(r)
			r.reqs = append(r.reqs, lifecycleReq{do: DoStop, path: member, at: time.Now().Add(3 * long), answered: time.Now().Add(3 * long)})
			at(r, 3*long, cm.ChildStopped, member)
			at(r, 2*long, cm.ChildStarted, fleetPath("c0"))
		}, ""},
		{"stopped by a restart of the fleet, started", func(r *runner) {
			engaged(r)
			at(r, 3*long, cm.ChildRestarted, fleetName)
			at(r, 3*long, cm.ChildStopped, member)
			at(r, 2*long, cm.ChildStarted, fleetPath("c0"))
		}, ""},
		{"stopped, removed, started", func(r *runner) {
			engaged(r)
			at(r, 3*long, cm.ChildStopped, member)
			at(r, 3*long, cm.ChildRemoved, member)
			at(r, 2*long, cm.ChildStarted, fleetPath("c0"))
		}, ""},
		{"a controller of it stopped, started", func(r *runner) {
			engaged(r)
			at(r, 3*long, cm.ChildStopped, fleetPath("c0"))
			at(r, 2*long, cm.ChildStarted, fleetPath("c0"))
		}, ""},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			judgeMemberC0(t, Scenario{}, time.Second, tc.setup, (*runner).checkOutageSaid, tc.want)
		})
	}
}
