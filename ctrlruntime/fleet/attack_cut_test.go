package fleet_test

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/ctrlruntime/fleet"
	"github.com/actorkube/controllermanager/ctrlruntime/internal/testenv"
)

// cutProxy is a TCP proxy in front of an API server that can delay every
// chunk it forwards or stop forwarding altogether (a network cut: the
// connections stay open, nothing crosses), and heal.
type cutProxy struct {
	l     net.Listener
	up    string
	delay time.Duration

	mu    sync.Mutex
	cut   bool
	heal  chan struct{} // closed when the cut ends
	conns map[net.Conn]struct{}
	wg    sync.WaitGroup
}

func newCutProxy(t *testing.T, upstream string, delay time.Duration) *cutProxy {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	p := &cutProxy{l: l, up: upstream, delay: delay, heal: make(chan struct{}), conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(p.close)
	return p
}

func (p *cutProxy) addr() string { return p.l.Addr().String() }

func (p *cutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.conns == nil {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *cutProxy) accept() {
	for {
		c, err := p.l.Accept()
		if err != nil {
			return
		}
		u, err := net.Dial("tcp", p.up)
		if err != nil {
			_ = c.Close()
			continue
		}
		if !p.track(c) || !p.track(u) {
			_, _ = c.Close(), u.Close()
			return
		}
		p.wg.Go(func() { p.pipe(u, c) })
		p.wg.Go(func() { p.pipe(c, u) })
	}
}

// gate blocks while the network is cut; false once the proxy closed.
func (p *cutProxy) gate() bool {
	p.mu.Lock()
	cut, heal, closed := p.cut, p.heal, p.conns == nil
	p.mu.Unlock()
	if closed {
		return false
	}
	if cut {
		<-heal
	}
	return true
}

func (p *cutProxy) pipe(dst, src net.Conn) {
	defer func() { _, _ = dst.Close(), src.Close() }()
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if p.delay > 0 {
				time.Sleep(p.delay) // the link's latency, not a synchronisation
			}
			if !p.gate() {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return
		}
	}
}

func (p *cutProxy) setCut(cut bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if cut == p.cut {
		return
	}
	p.cut = cut
	if !cut {
		close(p.heal)
		p.heal = make(chan struct{})
	}
}

func (p *cutProxy) close() {
	_ = p.l.Close()
	p.mu.Lock()
	conns := p.conns
	p.conns = nil
	if p.cut {
		p.cut = false
		close(p.heal)
	}
	p.mu.Unlock()
	for c := range conns {
		_ = c.Close()
	}
	p.wg.Wait()
}

// inflight counts the requests a config's clients have sent and not had
// an answer (headers) or an error for, the fleet's probes aside.
type inflight struct{ n atomic.Int64 }

func (f *inflight) wrap(config *rest.Config, onRequest func(*http.Request)) {
	config.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Path == "/readyz" { // the fleet's probe, on the same wrappers
				return rt.RoundTrip(r)
			}
			if onRequest != nil {
				onRequest(r)
			}
			f.n.Add(1)
			defer f.n.Add(-1)
			return rt.RoundTrip(r)
		})
	})
}

type rtFunc func(*http.Request) (*http.Response, error)

func (f rtFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// viaProxy is config with its API server reached through p.
func viaProxy(config *rest.Config, p *cutProxy) *rest.Config {
	c := rest.CopyConfig(config)
	c.Host = "https://" + p.addr()
	return c
}

func upstreamOf(t *testing.T, config *rest.Config) string {
	t.Helper()
	u, _, err := rest.DefaultServerUrlFor(config)
	require.NoError(t, err)
	return u.Host
}

var fastProbes = cm.FleetSpec{
	ProbePeriod:      metav1.Duration{Duration: 200 * time.Millisecond},
	ProbeTimeout:     metav1.Duration{Duration: 200 * time.Millisecond},
	FailureThreshold: metav1.Duration{Duration: time.Second},
	SuccessThreshold: metav1.Duration{Duration: 400 * time.Millisecond},
	Supervision:      cm.SupervisionSpec{ShutdownTimeout: metav1.Duration{Duration: 2 * time.Second}},
}

// The network to member "b" is cut the moment its store "cluster" sends
// its first request (discovery, for the first informer, which
// controller-runtime sends with no context), and the manager is shut down
// while the store is stuck in it: the shutdown returns within its bound
// and leaves no request of b's hung on the cut.
func TestEnvAttackShutdownWhileStoreStuckInCut(t *testing.T) {
	config := testenv.Config(t)
	p := newCutProxy(t, upstreamOf(t, config), 0)
	var reqs inflight
	b := viaProxy(config, p)
	reqs.wrap(b, func(*http.Request) { p.setCut(true) })
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).For(&corev1.Secret{}).Complete(fleet.Func(nop)))
	spec := fastProbes
	spec.FailureThreshold = metav1.Duration{Duration: time.Minute}
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"b": b}), mgr.Build, spec)
	cmgr := startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	require.Eventually(t, func() bool { return reqs.n.Load() > 0 }, waitFor, 10*time.Millisecond, "b's store sent nothing")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	start := time.Now()
	cmgr.ShutdownAndWait(ctx)
	t.Logf("shutdown took %v", time.Since(start))
	require.NoError(t, ctx.Err(), "the manager's shutdown waited on the cut")
	require.Eventually(t, func() bool { return reqs.n.Load() == 0 }, 2*time.Second, 10*time.Millisecond,
		"b's requests still hang on the cut after the manager stopped: %d", reqs.n.Load())
}

// Member b's network is cut the moment its store "cluster" sends its
// first request, its probes failing from then on too: b should go Offline
// after FailureThreshold (1 s), its group stopped.
//
// It was skipped for a hole of the root library's fleet: the member's
// loop added the group with an AddChild whose context was the loop's own,
// answered once the group's start had returned, which waits for its
// stores' Recover; a store whose Recover waits on the member's API server
// (informers syncing) held the loop meanwhile: no probe, no Offline, no
// disengage or new config applied. With a cut that never times out, b
// stayed Engaging for good; with a real one, until client-go gave up (10 s
// for a TLS handshake, about 45 s on an HTTP/2 connection). The loop now
// probes beside the pending add and gives it up (the group stopped) once
// the member is Offline (the root's TestFleetCutWhileStoreRecoversGoesOffline).
func TestEnvAttackCutWhileStoreStartsGoesOffline(t *testing.T) {
	config := testenv.Config(t)
	b := rest.CopyConfig(config)
	cut := make(chan struct{})
	var once sync.Once
	b.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return rtFunc(func(r *http.Request) (*http.Response, error) {
			select {
			case <-cut:
				if r.URL.Path == "/readyz" {
					return nil, errors.New("cut")
				}
			default:
				if r.URL.Path == "/readyz" {
					return rt.RoundTrip(r)
				}
				once.Do(func() { close(cut) })
			}
			<-r.Context().Done() // a cut: no answer
			return nil, r.Context().Err()
		})
	})
	mgr := fleet.NewManager(fleet.Options{})
	require.NoError(t, fleet.ControllerManagedBy(mgr).For(&corev1.Secret{}).Complete(fleet.Func(nop)))
	f := cm.NewFleet("fleet", cm.StaticClusters(map[string]*rest.Config{"b": b}), mgr.Build, fastProbes)
	startManager(t, nil, cm.ControllerManagerConfigSpec{}, f)
	<-cut
	require.Eventually(t, func() bool {
		st, ok := f.Cluster("b")
		return ok && st.State == cm.ClusterStateOffline
	}, 15*time.Second, 20*time.Millisecond, "b never went Offline")
}
