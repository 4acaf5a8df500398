package ctrlruntime

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"k8s.io/apimachinery/pkg/types"
	clocktesting "k8s.io/utils/clock/testing"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

type reconcileFunc func(context.Context, reconcile.Request) (reconcile.Result, error)

func (f reconcileFunc) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	return f(ctx, req)
}

func req(name string) reconcile.Request {
	return reconcile.Request{NamespacedName: types.NamespacedName{Namespace: "ns", Name: name}}
}

func TestSupervisedCountsPanicsAndReportsAtTheThreshold(t *testing.T) {
	var reports []error
	s := newSupervised("c", reconcile.TypedReconciler[reconcile.Request](reconcileFunc(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		panic(errors.New("bad object"))
	})), Options{PanicThreshold: 3}.withDefaults(), func(err error) { reports = append(reports, err) })

	for i := 1; i <= 4; i++ {
		_, err := s.Reconcile(context.Background(), req("x"))
		var perr *ReconcilePanicError
		require.ErrorAs(t, err, &perr, "a panic becomes an error")
		assert.Equal(t, i, perr.Panics)
		assert.NotEmpty(t, perr.Stack)
		if i < 3 {
			assert.Empty(t, reports, "below the threshold, panic %d", i)
		}
	}
	require.Len(t, reports, 1, "reported once, at the third panic")
	assert.ErrorContains(t, reports[0], `reconciler "c": reconcile of ns/x panicked (3 in this incarnation): bad object`)
	total, failed, panics := s.counts()
	assert.Equal(t, [3]int{4, 4, 4}, [3]int{total, failed, panics})
}

func TestSupervisedNegativePanicThresholdNeverReports(t *testing.T) {
	s := newSupervised("c", reconcile.TypedReconciler[reconcile.Request](reconcileFunc(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		panic("x")
	})), Options{PanicThreshold: -1}.withDefaults(), func(err error) { t.Errorf("reported %v", err) })
	for range 10 {
		_, err := s.Reconcile(context.Background(), req("x"))
		require.Error(t, err)
	}
}

func TestSupervisedStuckReconcile(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	entered, release := make(chan struct{}), make(chan struct{})
	s := newSupervised("c", reconcile.TypedReconciler[reconcile.Request](reconcileFunc(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		close(entered)
		<-release
		return reconcile.Result{}, nil
	})), Options{StuckAfter: time.Minute, Clock: clock}.withDefaults(), nil)
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		_, _ = s.Reconcile(context.Background(), req("slow"))
	}()
	<-entered
	clock.SetTime(clock.Now().Add(59 * time.Second))
	problems, _ := s.problems()
	assert.Empty(t, problems, "within the deadline")
	clock.SetTime(clock.Now().Add(time.Second))
	problems, summary := s.problems()
	require.Len(t, problems, 1)
	assert.Equal(t, "reconcile of ns/slow stuck: running for 1m0s, past the 1m0s deadline", problems[0])
	assert.Equal(t, "0 reconciles, 0 failed, 0 panicked, 1 running", summary)
	close(release)
	wg.Wait()
	problems, _ = s.problems()
	assert.Empty(t, problems, "healthy again once it returned")
}

func TestSupervisedPanicsRestartOnlyWhenAskedTo(t *testing.T) {
	panicking := reconcile.TypedReconciler[reconcile.Request](reconcileFunc(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		panic("x")
	}))
	s := newSupervised("c", panicking, Options{}.withDefaults(), func(err error) { t.Errorf("reported %v", err) })
	for range 100 {
		_, err := s.Reconcile(context.Background(), req("poison"))
		require.Error(t, err, "retried like an error, as under controller-runtime")
	}

	var reports []error
	strict := Options{RecoverPanic: ptr.To(false), PanicThreshold: 5}.withDefaults()
	s = newSupervised("c", panicking, strict, func(err error) { reports = append(reports, err) })
	_, err := s.Reconcile(context.Background(), req("poison"))
	require.Error(t, err)
	require.Len(t, reports, 1, "RecoverPanic false: the first panic is a failure")
}

func TestSupervisedErrorRate(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	var fail bool
	s := newSupervised("c", reconcile.TypedReconciler[reconcile.Request](reconcileFunc(func(context.Context, reconcile.Request) (reconcile.Result, error) {
		if fail {
			return reconcile.Result{}, errors.New("conflict")
		}
		return reconcile.Result{}, nil
	})), Options{Clock: clock}.withDefaults(), nil) // defaults: half of at least 10 requests in 1m
	next := 0
	run := func(n int, failing bool) { // n reconciles of n new requests
		fail = failing
		for range n {
			next++
			_, _ = s.Reconcile(context.Background(), req(fmt.Sprint("r", next)))
		}
	}
	tests := []struct {
		name    string
		step    func()
		healthy bool
	}{
		{"too few to judge", func() { run(9, true) }, true},
		{"9 of 10 failed", func() { run(1, false) }, false},
		{"9 of 19: under half", func() { run(9, false) }, true},
		{"18 of 28", func() { run(9, true) }, false},
		{"a minute later the window is empty", func() { clock.SetTime(clock.Now().Add(time.Minute)) }, true},
		{"successes only", func() { run(20, false) }, true},
		{"one request failing 500 times is one failing request", func() {
			fail = true
			for range 500 {
				_, _ = s.Reconcile(context.Background(), req("poison"))
			}
		}, true},
		{"10 requests failing", func() {
			clock.SetTime(clock.Now().Add(time.Minute))
			fail = true
			for i := range 10 {
				_, _ = s.Reconcile(context.Background(), req(fmt.Sprint("again", i)))
			}
		}, false},
		{"the same 10 requests succeeding at last", func() {
			fail = false
			for i := range 10 {
				_, _ = s.Reconcile(context.Background(), req(fmt.Sprint("again", i)))
			}
		}, true},
	}
	for _, tt := range tests {
		tt.step()
		problems, _ := s.problems()
		assert.Equal(t, tt.healthy, len(problems) == 0, "%s: %v", tt.name, problems)
	}
	clock.SetTime(clock.Now().Add(time.Minute))
	run(10, false)
	run(10, true)
	problems, _ := s.problems()
	require.Len(t, problems, 1)
	assert.Equal(t, "error rate 50%: 10 of the 20 requests reconciled in the last 1m0s failed their last reconcile, the last with: conflict", problems[0])
}

// A recovered panic fails no child, so neither the manager's events nor
// its controllermanager_* metrics see it; the health message does (GetHealth,
// Status, /healthz?verbose, the live view): the count, and the last one's
// request and value.
func TestSupervisedHealthNamesTheLastPanic(t *testing.T) {
	clock := clocktesting.NewFakePassiveClock(time.Unix(1000, 0))
	s := newSupervised("c", reconcile.TypedReconciler[reconcile.Request](reconcileFunc(func(_ context.Context, r reconcile.Request) (reconcile.Result, error) {
		panic("cannot handle " + r.Name)
	})), Options{Clock: clock}.withDefaults(), func(err error) { t.Errorf("reported %v", err) })
	_, _ = s.Reconcile(context.Background(), req("a"))
	clock.SetTime(clock.Now().Add(time.Minute))
	_, _ = s.Reconcile(context.Background(), req("poison"))
	clock.SetTime(clock.Now().Add(3 * time.Second))
	problems, summary := s.problems()
	assert.Empty(t, problems, "two requests, both failing, are under ErrorRateMinReconciles")
	assert.Equal(t, "2 reconciles, 2 failed, 2 panicked, 0 running; the last panic 3s ago, reconciling ns/poison: cannot handle poison", summary)
}
