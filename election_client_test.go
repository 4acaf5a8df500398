package controllermanager_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/lease"
	"github.com/actorkube/controllermanager/lease/leasetest"
)

// The Lease goes through the leader-election client, never through the
// controllers' one: here the controllers' clientset is cut off from the
// server, and the manager is elected all the same.
func TestWithLeaderElectionClientCarriesTheLease(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	controllers, election := srv.Client("controllers"), srv.Client("election")
	controllers.Partition(true)
	m, err := cm.NewControllerManager(cm.NewContext(controllers),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec("")}, "",
		cm.WithIdentity("a"), cm.WithLeaderElectionClient(election), elQuiet)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	defer m.ShutdownAndWait(ctx)

	assert.Equal(t, "a", srv.Holder(elNamespace, elLeaseName))
	writes := srv.History()
	require.NotEmpty(t, writes)
	for _, w := range writes {
		assert.Equal(t, "election", w.Client, "a Lease write went through another client")
	}
	// The controllers' clientset carries the manager's own Events, and
	// nothing of the Lease (TestEventsGoThroughTheControllersClientNotTheLeases).
	for _, a := range controllers.Actions() {
		assert.Equal(t, "events", a.GetResource().Resource, "the controllers' clientset was used for %s %s", a.GetVerb(), a.GetResource().Resource)
	}
}

// With a leader-election client, the Context needs no clientset.
func TestWithLeaderElectionClientNeedsNoContextClientset(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	m, err := cm.NewControllerManager(cm.NewContext(nil),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec("")}, "",
		cm.WithIdentity("a"), cm.WithLeaderElectionClient(srv.Client("election")), elQuiet)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), elWait)
	defer cancel()
	require.NoError(t, m.Start(ctx, 0))
	m.ShutdownAndWait(ctx)
	require.NoError(t, m.Err())
}

// logRecorder keeps the messages logged at Info and above, and the "why"
// of each (the reason the elector gives for a lost lease).
type logRecorder struct {
	mu       sync.Mutex
	messages []string
	times    []time.Time // each message's record time
	whys     []string
	lines    []string // every record, its time and attributes: told when a test fails
}

// since counts the records whose message begins with prefix, logged at t
// or later.
func (r *logRecorder) since(prefix string, t time.Time) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for i, m := range r.messages {
		if strings.HasPrefix(m, prefix) && !r.times[i].Before(t) {
			n++
		}
	}
	return n
}

func (r *logRecorder) Enabled(_ context.Context, l slog.Level) bool { return l >= slog.LevelInfo }
func (r *logRecorder) Handle(_ context.Context, rec slog.Record) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.messages = append(r.messages, rec.Message)
	r.times = append(r.times, rec.Time)
	line := rec.Time.Format("15:04:05.000") + " " + rec.Message
	rec.Attrs(func(a slog.Attr) bool {
		line += " " + a.String()
		if a.Key == "why" {
			r.whys = append(r.whys, a.Value.String())
		}
		return true
	})
	r.lines = append(r.lines, line)
	return nil
}

// told is every record so far, one a line.
func (r *logRecorder) told() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return strings.Join(r.lines, "\n")
}
func (r *logRecorder) WithAttrs([]slog.Attr) slog.Handler { return r }
func (r *logRecorder) WithGroup(string) slog.Handler      { return r }

func (r *logRecorder) withPrefix(prefix string) []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []string
	for _, m := range r.messages {
		if strings.HasPrefix(m, prefix) {
			out = append(out, m)
		}
	}
	return out
}

// A standby says at Info whom it is waiting for, once per holder: not on
// each renewal of the holder it sees, and again when the holder changes;
// Status.LeaderIdentity follows (HolderChanged).
func TestStandbyLogsTheHolderOncePerChange(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	holdLease(t, srv, "elsewhere")
	client := srv.Client("standby")
	logs := &logRecorder{}
	m, err := cm.NewControllerManager(cm.NewContext(client),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec("")}, "",
		cm.WithIdentity("standby"), cm.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	ctx, sigterm := context.WithCancel(context.Background())
	served := serveInBackground(ctx, m, elWait)
	defer func() { sigterm(); require.NoError(t, waitServe(t, served)) }()

	const waiting = "waiting for the lease held by "
	elEventually(t, "the standby says whom it waits for", func() bool { return len(logs.withPrefix(waiting)) > 0 })
	// The holder renews a few times: the standby sees each version (the
	// watch brings them in order, before the change of holder below).
	for range 5 {
		require.NoError(t, srv.Steal(elNamespace, elLeaseName, "elsewhere", time.Hour))
	}
	require.NoError(t, srv.Steal(elNamespace, elLeaseName, "other", time.Hour))
	elEventually(t, "the standby says it waits for the new holder", func() bool { return len(logs.withPrefix(waiting)) > 1 })
	elEventually(t, "the status names the holder", func() bool {
		st, err := m.Status(t.Context())
		return err == nil && st.LeaderIdentity == "other"
	})
	assert.Equal(t, []string{waiting + "elsewhere", waiting + "other"}, logs.withPrefix(waiting))
}

// A leader that cannot renew says why it lost the lease in the same words,
// with the same figures, in its log and in Err.
func TestLostLeaseErrAndLogAgree(t *testing.T) {
	t.Parallel()
	srv := leasetest.NewServer()
	client := srv.Client("a")
	logs := &logRecorder{}
	m, err := cm.NewControllerManager(cm.NewContext(client),
		cm.ControllerManagerConfigSpec{LeaderElection: elSpec(cm.LeaseLostExit)}, "",
		cm.WithIdentity("a"), cm.WithLogger(slog.New(logs)))
	require.NoError(t, err)
	served := serveInBackground(context.Background(), m, elWait)
	elEventually(t, "started", m.IsStarted)

	client.Partition(true)
	err = waitServe(t, served)
	require.ErrorIs(t, err, lease.ErrLost)
	logs.mu.Lock()
	whys := slices.Clone(logs.whys)
	logs.mu.Unlock()
	require.Len(t, whys, 1, "one loss, logged once")
	assert.Equal(t, "not renewed for 1s", whys[0], "the elector's deadline: no renewal for RenewDeadline")
	assert.Equal(t, "lease: lost: "+whys[0], m.Err().Error())
	assert.Contains(t, err.Error(), "lease: lost: "+whys[0])
}
