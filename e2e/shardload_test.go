package e2e

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	"github.com/stretchr/testify/require"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"

	"github.com/actorkube/controllermanager/e2e/internal/cluster"
	"github.com/actorkube/controllermanager/lease/shard"
)

// The load measurement: three replicas, each case over its own lease group, measured
// over loadWindow once the group has settled.
const (
	shardReplicas = 3
	shardNS       = "default"
	// loadWindow is eight retry periods: each replica's renewals fall on its own ticker,
	// so a window catches 8 ± 1 of every replica's rounds.
	loadWindow = 4 * time.Second
	// settleTimeout bounds the wait for a group to hold every shard once, balanced.
	settleTimeout = 20 * time.Second
	// shardClientQPS lifts client-go's default client-side limit (5 QPS, burst 10)
	// for every replica's clientset, ours and client-go's alike: at S = 32 a replica
	// of either kind needs more than that, and the figure wanted is what the electors
	// ask of the API server, not what a rate limiter lets through.
	shardClientQPS = 1000
)

// TestShardedLeaseLoad measures, on the real API server, the Lease requests per second
// that three replicas make once settled: with our shard.Elector (one list and watch per
// replica, renewals of held Leases only, one member Lease per replica) and with S
// independent client-go LeaderElectors per replica (one per shard Lease), at S = 4, 12,
// 32, read from the API server's own apiserver_request_total. Then, with our elector at
// S = 12, it measures from a watch of the group's Leases the handover of a leaving
// replica's shards (its Run context cancelled), the moves on a join, and the time until
// every shard of a replica cut off without releasing anything (as a SIGKILL leaves it)
// is held by another.
//
// It asserts only what is sure: every group settles with every shard held by exactly
// one replica (ours balanced), ours makes strictly fewer Lease requests per second than
// client-go's at S = 32, and the shards of a leaver or a crashed replica all end up
// held by the others. The timings are figures, not assertions.
func TestShardedLeaseLoad(t *testing.T) {
	c := cluster.Start(t, cluster.Options{})
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	admin := c.Clientset()
	metrics := metricsClient(t, c)

	background := measureLeaseLoad(ctx, t, metrics)
	figureText(t, "shard load: API server alone (its own Leases)", background.rateText(), background.breakdown())

	ours := map[int]float64{}
	theirs := map[int]float64{}
	for _, s := range []int{4, 12, 32} {
		g := startShardGroup(ctx, t, c, fmt.Sprintf("ours-%d", s), s, "r0", "r1", "r2")
		perReplica := g.waitSettled(t, "r0", "r1", "r2")
		load := measureLeaseLoad(ctx, t, metrics)
		g.stopAll()
		ours[s] = load.perSecond()
		figureText(t, fmt.Sprintf("shard load: ours, S=%d", s), load.rateText(),
			fmt.Sprintf("(%s; (S+3)/RP = %.0f/s; shards per replica %v)", load.breakdown(), float64(s+shardReplicas)/retryPeriod.Seconds(), perReplica))

		cg := startClientGoGroup(ctx, t, c, fmt.Sprintf("clientgo-%d", s), s, "r0", "r1", "r2")
		perReplica = cg.waitSettled(t)
		load = measureLeaseLoad(ctx, t, metrics)
		cg.stop()
		theirs[s] = load.perSecond()
		figureText(t, fmt.Sprintf("shard load: %d client-go electors per replica", s), load.rateText(),
			fmt.Sprintf("(%s; shards per replica %v)", load.breakdown(), perReplica))
	}
	require.Less(t, ours[32], theirs[32], "Lease requests/s at S=32: ours %.1f, client-go's %.1f", ours[32], theirs[32])

	// Handover, join and crash, with our elector at S = 12.
	const s = 12
	g := startShardGroup(ctx, t, c, "moves", s, "r0", "r1", "r2")
	w := watchLeaseGroup(ctx, t, admin, "moves")
	g.waitSettled(t, "r0", "r1", "r2")
	before := g.holders("r0", "r1", "r2")
	leaving := shardsOf(before, "r0")
	w.waitCurrent(t, before)

	stopped := time.Now()
	g.stop("r0")
	released, taken := w.waitHeldElsewhere(t, "r0", leaving, stopped)
	w.logChanges(t, stopped, latest(taken))
	g.waitSettled(t, "r1", "r2")
	after := g.holders("r1", "r2")
	figure(t, "shard handover: Run cancelled → its shards held by others", latest(taken).Sub(stopped),
		fmt.Sprintf("(%d shards, S=%d, 3 replicas)", len(leaving), s))
	figure(t, "shard handover: a shard released → held by another", slowest(released, taken),
		fmt.Sprintf("(slowest of %d; fastest %s)", len(leaving), fastest(released, taken).Round(time.Millisecond)))
	figureText(t, "shard leave: shards moved", strconv.Itoa(moved(before, after)), fmt.Sprintf("(the leaver held %d)", len(leaving)))

	g.add("r3")
	g.waitSettled(t, "r1", "r2", "r3")
	joined := g.holders("r1", "r2", "r3")
	figureText(t, "shard join: shards moved", strconv.Itoa(moved(after, joined)),
		fmt.Sprintf("(%d of them to the joiner; ⌊S/R⌋ = %d)", len(shardsOf(joined, "r3")), s/shardReplicas))

	// A crash: r1 is cut off from the API server (every request refused, its open
	// watch ended) and never releases; its Leases expire on the others' clocks.
	w.waitCurrent(t, joined)
	crashed := shardsOf(joined, "r1")
	cut := time.Now()
	g.partition("r1")
	_, taken = w.waitHeldElsewhere(t, "r1", crashed, cut)
	w.logChanges(t, cut, latest(taken))
	figure(t, "shard crash: cut off → its shards held by others", latest(taken).Sub(cut),
		fmt.Sprintf("(%d shards; LD + RP = %s)", len(crashed), leaseDuration+retryPeriod))
	if lost := g.lostSince("r1", cut); len(lost) == len(crashed) {
		figure(t, "shard crash: cut off → it gave its shards up (Lost)", latest(lost).Sub(cut),
			fmt.Sprintf("(≤ RD + RP = %s; takeover came %s later)", renewDeadline+retryPeriod, earliest(taken).Sub(latest(lost)).Round(time.Millisecond)))
	} else {
		t.Logf("the cut-off replica reported %d Lost for its %d shards by the time they were taken", len(lost), len(crashed))
	}
	g.waitSettled(t, "r2", "r3")
}

// leaseLoad is what the API server counted for resource="leases" over a window.
type leaseLoad struct {
	window time.Duration
	blur   time.Duration // how far off the window's ends may be, either way
	counts map[requestKey]float64
}

// requestKey is the part of apiserver_request_total's labels this test breaks down by.
type requestKey struct{ verb, code string }

func (l leaseLoad) perSecond() float64 {
	var n float64
	for _, v := range l.counts {
		n += v
	}
	return n / l.window.Seconds()
}

func (l leaseLoad) rateText() string { return fmt.Sprintf("%.1f req/s", l.perSecond()) }

// breakdown is the rate per verb, and the count of every answer but 200 and 201.
func (l leaseLoad) breakdown() string {
	verbs := map[string]float64{}
	others := map[string]float64{}
	for k, v := range l.counts {
		verbs[k.verb] += v
		if k.code != "200" && k.code != "201" {
			others[k.verb+" "+k.code] += v
		}
	}
	var parts []string
	for _, verb := range slices.Sorted(maps.Keys(verbs)) {
		parts = append(parts, fmt.Sprintf("%s %.1f/s", verb, verbs[verb]/l.window.Seconds()))
	}
	for _, k := range slices.Sorted(maps.Keys(others)) {
		parts = append(parts, fmt.Sprintf("%s ×%.0f", k, others[k]))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("none in %s", l.window.Round(time.Millisecond))
	}
	return strings.Join(parts, ", ") + fmt.Sprintf(" over %s ± %s", l.window.Round(time.Millisecond), l.blur.Round(time.Millisecond))
}

// metricsClient is the admin's clientset without compression: /metrics is megabytes,
// and gunzipping them in this (race-instrumented) process made each read slower.
func metricsClient(t *testing.T, c *cluster.Cluster) kubernetes.Interface {
	t.Helper()
	cfg := c.Config()
	cfg.DisableCompression = true
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

// measureLeaseLoad reads apiserver_request_total twice, loadWindow apart, and returns
// the difference for the Lease resource. The wait between is the measurement window
// itself, not a synchronisation. Each read is taken to have happened halfway through
// its request, and the counts are divided by the time between those two instants; a
// loaded machine can take seconds to answer, so a window blurred by more than
// maxScrapeBlur is measured again, up to three times.
func measureLeaseLoad(ctx context.Context, t *testing.T, admin kubernetes.Interface) leaseLoad {
	t.Helper()
	for attempt := 1; ; attempt++ {
		load := measureLeaseLoadOnce(ctx, t, admin)
		if load.blur <= maxScrapeBlur || attempt == 3 {
			return load
		}
		t.Logf("the window was blurred by ±%s (GET /metrics was slow); measuring again", load.blur.Round(time.Millisecond))
	}
}

// maxScrapeBlur is a tenth of the window: a rate off by at most ±10%.
const maxScrapeBlur = loadWindow / 10

func measureLeaseLoadOnce(ctx context.Context, t *testing.T, admin kubernetes.Interface) leaseLoad {
	t.Helper()
	first, firstAt, firstTook := scrapeLeaseRequests(ctx, t, admin)
	window := time.NewTimer(loadWindow)
	defer window.Stop()
	select {
	case <-window.C:
	case <-ctx.Done():
		t.Fatalf("measuring the Lease load: %v", ctx.Err())
	}
	second, secondAt, secondTook := scrapeLeaseRequests(ctx, t, admin)
	load := leaseLoad{window: secondAt.Sub(firstAt), blur: (firstTook + secondTook) / 2, counts: map[requestKey]float64{}}
	for k, v := range second {
		if d := v - first[k]; d > 0 {
			load.counts[k] = d
		}
	}
	return load
}

// scrapeLeaseRequests returns apiserver_request_total{resource="leases"} from the
// API server's /metrics, summed per verb and code, with the middle of the request
// and how long it took (the parsing after it not included).
func scrapeLeaseRequests(ctx context.Context, t *testing.T, admin kubernetes.Interface) (map[requestKey]float64, time.Time, time.Duration) {
	t.Helper()
	sent := time.Now()
	body, err := admin.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	took := time.Since(sent)
	require.NoError(t, err, "GET /metrics")
	totals, err := parseLeaseRequestTotals(body)
	require.NoError(t, err)
	return totals, sent.Add(took / 2), took
}

// parseLeaseRequestTotals reads the samples of apiserver_request_total from the
// Prometheus text format, keeping those of resource="leases".
func parseLeaseRequestTotals(body []byte) (map[requestKey]float64, error) {
	const metric = "apiserver_request_total{"
	totals := map[requestKey]float64{}
	found := false
	sc := bufio.NewScanner(bytes.NewReader(body))
	sc.Buffer(make([]byte, 0, 64*1024), 1024*1024)
	for sc.Scan() {
		line, ok := strings.CutPrefix(sc.Text(), metric)
		if !ok {
			continue
		}
		found = true
		labels, rest, err := parseLabels(line)
		if err != nil {
			return nil, fmt.Errorf("apiserver_request_total: %w in %q", err, sc.Text())
		}
		fields := strings.Fields(rest)
		if len(fields) == 0 {
			return nil, fmt.Errorf("apiserver_request_total: no value in %q", sc.Text())
		}
		value, err := strconv.ParseFloat(fields[0], 64)
		if err != nil {
			return nil, fmt.Errorf("apiserver_request_total: %w in %q", err, sc.Text())
		}
		if labels["resource"] == "leases" {
			totals[requestKey{verb: labels["verb"], code: labels["code"]}] += value
		}
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	if !found {
		return nil, errors.New("no apiserver_request_total in /metrics")
	}
	return totals, nil
}

// parseLabels reads `name="value",...}` and returns the labels and what follows '}'.
func parseLabels(s string) (map[string]string, string, error) {
	labels := map[string]string{}
	for {
		s = strings.TrimLeft(s, ",")
		if rest, ok := strings.CutPrefix(s, "}"); ok {
			return labels, rest, nil
		}
		name, rest, ok := strings.Cut(s, `="`)
		if !ok {
			return nil, "", errors.New("malformed labels")
		}
		var value strings.Builder
		i := 0
		for ; i < len(rest) && rest[i] != '"'; i++ {
			if rest[i] == '\\' && i+1 < len(rest) {
				i++
				if rest[i] == 'n' {
					value.WriteByte('\n')
					continue
				}
			}
			value.WriteByte(rest[i])
		}
		if i == len(rest) {
			return nil, "", errors.New("unterminated label value")
		}
		labels[name] = value.String()
		s = rest[i+1:]
	}
}

func TestParseLeaseRequestTotals(t *testing.T) {
	body := []byte(`# HELP apiserver_request_total [STABLE] Counter of apiserver requests
# TYPE apiserver_request_total counter
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 120
apiserver_request_total{code="409",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 3
apiserver_request_total{code="200",component="apiserver",dry_run="",group="coordination.k8s.io",resource="leases",scope="namespace",subresource="",verb="LIST",version="v1"} 2
apiserver_request_total{code="200",component="apiserver",dry_run="",group="",resource="configmaps",scope="resource",subresource="",verb="GET",version="v1"} 9
apiserver_request_total{code="200",component="a\"b\\c",dry_run="",group="coordination.k8s.io",resource="leases",scope="resource",subresource="",verb="PUT",version="v1"} 1e1
apiserver_request_duration_seconds_bucket{resource="leases",verb="PUT",le="0.005"} 7
`)
	got, err := parseLeaseRequestTotals(body)
	require.NoError(t, err)
	require.Equal(t, map[requestKey]float64{{"PUT", "200"}: 130, {"PUT", "409"}: 3, {"LIST", "200"}: 2}, got)

	_, err = parseLeaseRequestTotals([]byte("process_cpu_seconds_total 1\n"))
	require.ErrorContains(t, err, "no apiserver_request_total")
	_, err = parseLeaseRequestTotals([]byte(`apiserver_request_total{code="200} 1` + "\n"))
	require.ErrorContains(t, err, "unterminated")
}

// partition cuts one replica's client off from the API server, as a SIGKILL does:
// once cut, every new request fails at once and every open one (a watch) ends, so the
// replica writes nothing more and releases nothing. Its loop keeps running,
// unanswered, until the test stops it.
type partition struct {
	mu   sync.Mutex
	cut  bool
	open map[int]context.CancelFunc
	next int
}

var errPartitioned = errors.New("e2e: cut off from the API server")

func (p *partition) wrap(next http.RoundTripper) http.RoundTripper {
	return roundTripperFunc(func(req *http.Request) (*http.Response, error) {
		p.mu.Lock()
		if p.cut {
			p.mu.Unlock()
			return nil, errPartitioned
		}
		ctx, cancel := context.WithCancel(req.Context())
		id := p.next
		p.next++
		p.open[id] = cancel
		p.mu.Unlock()
		done := func() {
			p.mu.Lock()
			delete(p.open, id)
			p.mu.Unlock()
			cancel()
		}
		resp, err := next.RoundTrip(req.WithContext(ctx))
		if err != nil {
			done()
			return nil, err
		}
		resp.Body = &closeHook{ReadCloser: resp.Body, done: done}
		return resp, nil
	})
}

// cutOff refuses every request from now on and ends those in flight.
func (p *partition) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.cut = true
	for _, cancel := range p.open {
		cancel()
	}
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type closeHook struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (c *closeHook) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(c.done)
	return err
}

// shardClient is a clientset of its own for one replica, through p when p is not nil.
func shardClient(t *testing.T, c *cluster.Cluster, p *partition) kubernetes.Interface {
	t.Helper()
	cfg := c.Config()
	cfg.QPS, cfg.Burst = shardClientQPS, shardClientQPS
	if p != nil {
		cfg.Wrap(p.wrap)
	}
	client, err := kubernetes.NewForConfig(cfg)
	require.NoError(t, err)
	return client
}

// shardGroup is replicas of our shard.Elector on one lease group, in this process.
type shardGroup struct {
	t      *testing.T
	ctx    context.Context
	c      *cluster.Cluster
	name   string
	shards int

	mu       sync.Mutex
	replicas map[string]*shardReplica
	lost     map[string][]time.Time
}

type shardReplica struct {
	elector *shard.Elector
	part    *partition
	cancel  context.CancelFunc
	done    chan struct{}
}

func startShardGroup(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, shards int, ids ...string) *shardGroup {
	g := &shardGroup{t: t, ctx: ctx, c: c, name: name, shards: shards, replicas: map[string]*shardReplica{}, lost: map[string][]time.Time{}}
	t.Cleanup(g.stopAll)
	for _, id := range ids {
		g.add(id)
	}
	return g
}

// add starts a replica id.
func (g *shardGroup) add(id string) {
	g.t.Helper()
	p := &partition{open: map[int]context.CancelFunc{}}
	e, err := shard.New(shard.Config{
		Client: shardClient(g.t, g.c, p), Namespace: shardNS, Name: g.name, Identity: id, Shards: g.shards,
		LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
		Callbacks: shard.Callbacks{
			Release: func(_ int, done func()) { done() },
			Lost: func(_ int, _ string, done func()) {
				g.mu.Lock()
				g.lost[id] = append(g.lost[id], time.Now())
				g.mu.Unlock()
				done()
			},
		},
	})
	require.NoError(g.t, err)
	ctx, cancel := context.WithCancel(g.ctx)
	r := &shardReplica{elector: e, part: p, cancel: cancel, done: make(chan struct{})}
	go func() { defer close(r.done); e.Run(ctx) }()
	g.mu.Lock()
	g.replicas[id] = r
	g.mu.Unlock()
}

// stop cancels replica id's Run (it releases what it holds) and waits for it.
func (g *shardGroup) stop(id string) {
	g.mu.Lock()
	r := g.replicas[id]
	delete(g.replicas, id)
	g.mu.Unlock()
	r.cancel()
	<-r.done
}

func (g *shardGroup) stopAll() {
	g.mu.Lock()
	ids := slices.Collect(maps.Keys(g.replicas))
	g.mu.Unlock()
	for _, id := range ids {
		g.stop(id)
	}
}

// partition cuts replica id off; it stays in the group until stopped.
func (g *shardGroup) partition(id string) {
	g.mu.Lock()
	r := g.replicas[id]
	g.mu.Unlock()
	r.part.cutOff()
}

func (g *shardGroup) lostSince(id string, since time.Time) []time.Time {
	g.mu.Lock()
	defer g.mu.Unlock()
	var out []time.Time
	for _, at := range g.lost[id] {
		if !at.Before(since) {
			out = append(out, at)
		}
	}
	return out
}

// holders is each shard's holder as the replicas ids report it ("" if none of them
// holds it, "?" if more than one does).
func (g *shardGroup) holders(ids ...string) []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	holders := make([]string, g.shards)
	for _, id := range ids {
		for _, st := range g.replicas[id].elector.Status() {
			if !st.Held {
				continue
			}
			if holders[st.Index] == "" {
				holders[st.Index] = id
			} else {
				holders[st.Index] = "?"
			}
		}
	}
	return holders
}

// waitSettled waits until replicas ids hold every shard exactly once, each ⌊S/R⌋ or
// ⌈S/R⌉ of them, and returns how many each holds.
func (g *shardGroup) waitSettled(t *testing.T, ids ...string) []int {
	t.Helper()
	var counts []int
	require.Eventually(t, func() bool {
		holders := g.holders(ids...)
		counts = make([]int, len(ids))
		for _, h := range holders {
			i := slices.Index(ids, h)
			if i < 0 {
				return false
			}
			counts[i]++
		}
		low := g.shards / len(ids)
		for _, n := range counts {
			if n < low || n > low+min(1, g.shards%len(ids)) {
				return false
			}
		}
		return true
	}, settleTimeout, pollInterval, "group %s: shards not held once each by %v, balanced: %v", g.name, ids, g.holders(ids...))
	return counts
}

// clientGoGroup is S client-go LeaderElectors per replica, one per shard Lease
// "<name>-<i>", each replica's sharing its clientset.
type clientGoGroup struct {
	electors [][]*leaderelection.LeaderElector // [replica][shard]
	ids      []string
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	name     string
}

func startClientGoGroup(ctx context.Context, t *testing.T, c *cluster.Cluster, name string, shards int, ids ...string) *clientGoGroup {
	t.Helper()
	ctx, cancel := context.WithCancel(ctx)
	// Their logs (an Info line per elector and attempt, an error per lost create race)
	// would bury the test's output.
	ctx = logr.NewContext(ctx, logr.Discard())
	g := &clientGoGroup{cancel: cancel, name: name, ids: ids}
	t.Cleanup(g.stop)
	for _, id := range ids {
		client := shardClient(t, c, nil)
		var row []*leaderelection.LeaderElector
		for i := range shards {
			lease := shard.ShardLease(name, i)
			le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
				Lock: &resourcelock.LeaseLock{
					LeaseMeta:  metav1.ObjectMeta{Namespace: shardNS, Name: lease},
					Client:     client.CoordinationV1(),
					LockConfig: resourcelock.ResourceLockConfig{Identity: id},
				},
				LeaseDuration: leaseDuration, RenewDeadline: renewDeadline, RetryPeriod: retryPeriod,
				ReleaseOnCancel: true,
				Name:            lease,
				Callbacks: leaderelection.LeaderCallbacks{
					OnStartedLeading: func(context.Context) {},
					OnStoppedLeading: func() {},
				},
			})
			require.NoError(t, err)
			row = append(row, le)
			g.wg.Add(1)
			go func() { defer g.wg.Done(); le.Run(ctx) }()
		}
		g.electors = append(g.electors, row)
	}
	return g
}

// stop cancels every elector (each releases its Lease if it leads) and waits.
func (g *clientGoGroup) stop() {
	g.cancel()
	g.wg.Wait()
}

// waitSettled waits until every shard has exactly one replica leading it and every
// other replica's elector has seen that one lead (so that none is still in its first
// attempt, a create), and returns how many each leads.
func (g *clientGoGroup) waitSettled(t *testing.T) []int {
	t.Helper()
	var counts []int
	require.Eventually(t, func() bool {
		counts = make([]int, len(g.electors))
		for i := range g.electors[0] {
			leader := -1
			for r, row := range g.electors {
				if row[i].IsLeader() {
					if leader >= 0 {
						return false
					}
					leader = r
				}
			}
			if leader < 0 {
				return false
			}
			counts[leader]++
			for _, row := range g.electors {
				if row[i].GetLeader() != g.ids[leader] {
					return false
				}
			}
		}
		return true
	}, settleTimeout, pollInterval, "group %s: not every shard led by exactly one replica, seen by all", g.name)
	return counts
}

// leaseGroupWatch records, with the time this process received it, every version of
// a lease group's Leases, shard and member.
type leaseGroupWatch struct {
	group  string
	mu     sync.Mutex
	events []leaseEvent
	now    map[string]string // each Lease's holder in the last version seen
}

type leaseEvent struct {
	at           time.Time
	lease        string
	holder, prev string
}

func watchLeaseGroup(ctx context.Context, t *testing.T, client kubernetes.Interface, group string) *leaseGroupWatch {
	w := &leaseGroupWatch{group: group, now: map[string]string{}}
	ctx, cancel := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); w.run(ctx, client, group) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func (w *leaseGroupWatch) run(ctx context.Context, client kubernetes.Interface, group string) {
	leases := client.CoordinationV1().Leases(shardNS)
	selector := shard.LabelGroup + "=" + group
	resourceVersion := ""
	retry := time.NewTicker(100 * time.Millisecond)
	defer retry.Stop()
	for ctx.Err() == nil {
		if resourceVersion == "" {
			list, err := leases.List(ctx, metav1.ListOptions{LabelSelector: selector})
			if err == nil {
				for i := range list.Items {
					w.add(&list.Items[i])
				}
				resourceVersion = list.ResourceVersion
			}
		}
		var watcher watch.Interface
		var err error
		if resourceVersion != "" {
			watcher, err = leases.Watch(ctx, metav1.ListOptions{LabelSelector: selector, ResourceVersion: resourceVersion})
		}
		if resourceVersion == "" || err != nil {
			select {
			case <-ctx.Done():
			case <-retry.C:
			}
			continue
		}
		for ev := range watcher.ResultChan() {
			switch ev.Type {
			case watch.Added, watch.Modified:
				lease := ev.Object.(*coordinationv1.Lease)
				resourceVersion = lease.ResourceVersion
				w.add(lease)
			case watch.Error: // e.g. 410 Gone: list again
				resourceVersion = ""
			}
		}
		watcher.Stop()
	}
}

func (w *leaseGroupWatch) add(l *coordinationv1.Lease) {
	holder := ""
	if l.Spec.HolderIdentity != nil {
		holder = *l.Spec.HolderIdentity
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.events = append(w.events, leaseEvent{at: time.Now(), lease: l.Name, holder: holder, prev: w.now[l.Name]})
	w.now[l.Name] = holder
}

// waitCurrent waits until the watch shows every shard Lease held as holders says, so
// that what follows is measured from a watch that is up to date.
func (w *leaseGroupWatch) waitCurrent(t *testing.T, holders []string) {
	t.Helper()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for i, h := range holders {
			if w.now[shard.ShardLease(w.group, i)] != h {
				return false
			}
		}
		return true
	}, settleTimeout, pollInterval, "the watch does not show %v", holders)
}

// waitHeldElsewhere waits until the watch has shown each of shards, after since,
// held by a replica other than from, and returns for each the time its Lease was seen
// released (holder empty; zero if never) and taken.
func (w *leaseGroupWatch) waitHeldElsewhere(t *testing.T, from string, shards []int, since time.Time) (released, taken []time.Time) {
	t.Helper()
	require.Eventually(t, func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		released, taken = make([]time.Time, len(shards)), make([]time.Time, len(shards))
		for j, i := range shards {
			name := shard.ShardLease(w.group, i)
			for _, ev := range w.events {
				if ev.lease != name || ev.at.Before(since) {
					continue
				}
				if ev.holder == "" && released[j].IsZero() {
					released[j] = ev.at
				}
				if ev.holder != "" && ev.holder != from {
					taken[j] = ev.at
					break
				}
			}
			if taken[j].IsZero() {
				return false
			}
		}
		return true
	}, settleTimeout, pollInterval, "the shards %v of %s are not all held by others", shards, from)
	return released, taken
}

// logChanges logs every change of holder the watch saw from since to until, with
// its time after since.
func (w *leaseGroupWatch) logChanges(t *testing.T, since, until time.Time) {
	t.Helper()
	w.mu.Lock()
	defer w.mu.Unlock()
	var lines []string
	for _, ev := range w.events {
		if ev.holder != ev.prev && !ev.at.Before(since) && !ev.at.After(until) {
			lines = append(lines, fmt.Sprintf("+%s %s: %q → %q", ev.at.Sub(since).Round(time.Millisecond), ev.lease, ev.prev, ev.holder))
		}
	}
	t.Logf("holders changed:\n\t%s", strings.Join(lines, "\n\t"))
}

// shardsOf is the shards holders gives to id.
func shardsOf(holders []string, id string) []int {
	var out []int
	for i, h := range holders {
		if h == id {
			out = append(out, i)
		}
	}
	return out
}

// moved counts the shards whose holder differs between before and after.
func moved(before, after []string) int {
	n := 0
	for i := range before {
		if before[i] != after[i] {
			n++
		}
	}
	return n
}

func latest(ts []time.Time) time.Time   { return slices.MaxFunc(ts, time.Time.Compare) }
func earliest(ts []time.Time) time.Time { return slices.MinFunc(ts, time.Time.Compare) }

// slowest and fastest are the longest and shortest release → take gaps (shards
// never seen released are left out).
func slowest(released, taken []time.Time) time.Duration {
	return slices.Max(gaps(released, taken))
}

func fastest(released, taken []time.Time) time.Duration {
	return slices.Min(gaps(released, taken))
}

func gaps(released, taken []time.Time) []time.Duration {
	var out []time.Duration
	for i := range released {
		if !released[i].IsZero() {
			out = append(out, taken[i].Sub(released[i]))
		}
	}
	if len(out) == 0 {
		return []time.Duration{0}
	}
	return out
}
