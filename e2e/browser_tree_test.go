package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
)

type treeStore struct{ name string }

func (s treeStore) Name() string                  { return s.name }
func (s treeStore) Recover(context.Context) error { return nil }
func (s treeStore) Shutdown(context.Context)      {}

type treeCrashing struct {
	name  string
	crash atomic.Bool
}

func (c *treeCrashing) Name() string { return c.name }
func (c *treeCrashing) Run(context.Context) error {
	if c.crash.Load() {
		return errors.New(c.name + " cannot start")
	}
	return nil
}
func (c *treeCrashing) Shutdown(context.Context) {}
func (c *treeCrashing) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true}
}

// TestBrowserSupervisionTree loads the view of a manager with nested groups:
// the rows in tree order and indented, a group's supervision and budget, folding
// kept across snapshots and a reload, events on a path, the buttons on a path
// and on a group, and the exhausted mark.
func TestBrowserSupervisionTree(t *testing.T) {
	bin := chromium(t)
	reconciler, worker := &browserController{name: "reconciler"}, &browserController{name: "worker"}
	crash := &treeCrashing{name: "crash"}
	m, err := cm.NewControllerManager(nil, cm.ControllerManagerConfigSpec{Supervision: &cm.SupervisionSpec{
		InitialBackoff: metav1.Duration{Duration: 10 * time.Millisecond}, MaxBackoff: metav1.Duration{Duration: 10 * time.Millisecond},
		MaxRestarts: 100, HealthInterval: metav1.Duration{Duration: time.Second},
	}}, "", cm.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		t.Fatal(err)
	}
	m.AddStore(browserStore{})
	m.Add(cm.NewGroup("tenant-a", cm.SupervisionSpec{Strategy: cm.RestForOne, MaxRestarts: 3, OnExhausted: cm.ExhaustedStop},
		treeStore{"store"}, reconciler, cm.NewGroup("inner", cm.SupervisionSpec{MaxRestarts: 5}, worker)),
		cm.NewGroup("flaky", cm.SupervisionSpec{MaxRestarts: 1, OnExhausted: cm.ExhaustedStop}, crash))
	view := liveview.Handler(m, liveview.WithControls(""), liveview.WithRefresh(300*time.Millisecond))
	defer view.Close()
	mux := http.NewServeMux()
	mux.Handle(liveview.DefaultPrefix+"/", view)
	srv := httptest.NewServer(mux)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	if err := m.Start(ctx, browserWait); err != nil {
		t.Fatal(err)
	}
	defer func() {
		stopCtx, stop := context.WithTimeout(context.Background(), browserWait)
		defer stop()
		m.ShutdownAndWait(stopCtx)
	}()

	allocCtx, cancelAlloc := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(bin), chromedp.NoSandbox, chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(1440, 960), chromedp.UserDataDir(t.TempDir()))...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()

	cell := func(child, field string) string {
		return fmt.Sprintf(`tr[data-child=%q] td[data-field=%q]`, child, field)
	}
	eval := func(expr string) string {
		t.Helper()
		s, err := chromedp.Run(browser, chromedp.Evaluate[string](expr))
		if err != nil {
			t.Fatalf("%s: %v", expr, err)
		}
		return s
	}
	wait := func(what, expr string) {
		t.Helper()
		if _, err := chromedp.Run(browser, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(browserWait))); err != nil {
			t.Fatalf("waiting for %s: %v", what, err)
		}
	}
	textIs := func(sel, want string) string {
		return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.trim() === %q; })()`, sel, want)
	}
	textHas := func(sel, want string) string {
		return fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && e.textContent.includes(%q); })()`, sel, want)
	}
	order := `[...document.querySelectorAll('#children tbody tr')].map(r => r.dataset.child + ':' + r.dataset.depth + (r.hidden ? ':hidden' : '')).join(' ')`
	click := func(sel string) {
		t.Helper()
		if err := chromedp.Do(browser, chromedp.Click(chromedp.CSS(sel))); err != nil {
			t.Fatalf("click %s: %v", sel, err)
		}
	}

	if err := chromedp.Do(browser, chromedp.Navigate(srv.URL+liveview.DefaultPrefix+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-child="tenant-a/inner/worker"]`))); err != nil {
		t.Fatal(err)
	}
	want := "inventory:0 tenant-a:0 tenant-a/store:1 tenant-a/reconciler:1 tenant-a/inner:1 tenant-a/inner/worker:2 flaky:0 flaky/crash:1"
	if have := eval(order); have != want {
		t.Errorf("rows: want %q, have %q", want, have)
	}
	for sel, want := range map[string]string{
		cell("tenant-a", "kind") + ` [data-field="strategy"]`:          "RestForOne",
		cell("tenant-a", "kind") + ` [data-field="budget"]`:            "budget 0/3 in 1m",
		cell("tenant-a", "kind") + ` [data-field="onExhausted"]`:       "on exhausted: Stop",
		cell("tenant-a/inner", "kind") + ` [data-field="onExhausted"]`: "on exhausted: Escalate",
		cell("tenant-a/store", "kind"):                                 "store",
		cell("tenant-a", "state"):                                      "Running",
		"#child-count":                                                 "(3 at the root, 8 in all)",
	} {
		wait(sel+" = "+want, textIs(sel, want))
	}
	if pad := eval(`getComputedStyle(document.querySelector('tr[data-child="tenant-a/inner/worker"] td.name')).paddingLeft`); pad != "54px" {
		t.Errorf("worker's indent: want 54px, have %s", pad)
	}

	// An event on a path updates its row and its group's budget.
	reconciler.fail(errors.New("lost the watch"))
	wait("the reconciler's restart", textIs(cell("tenant-a/reconciler", "restarts"), "1"))
	wait("tenant-a's budget", textIs(cell("tenant-a", "kind")+` [data-field="budget"]`, "budget 1/3 in 1m"))
	wait("the reconciler's failure bar", textHas(cell("tenant-a/reconciler", "lastError"), "lost the watch"))

	// Fold tenant-a: its rows hide, across snapshots, while events still update them.
	click(`tr[data-child="tenant-a"] button.fold`)
	want = "inventory:0 tenant-a:0 tenant-a/store:1:hidden tenant-a/reconciler:1:hidden tenant-a/inner:1:hidden tenant-a/inner/worker:2:hidden flaky:0 flaky/crash:1"
	if have := eval(order); have != want {
		t.Errorf("folded: want %q, have %q", want, have)
	}
	wait("the count inside", textHas(cell("tenant-a", "name"), "(4 inside)"))
	before := eval(`document.querySelector('tr[data-child="tenant-a/inner/worker"] td[data-field="restarts"]').textContent`)
	var n int
	fmt.Sscan(before, &n)
	spent := eval(`document.querySelector('tr[data-child="tenant-a/inner"] [data-field="budget"]').textContent`)
	worker.fail(errors.New("worker broke"))
	wait("the worker's restart, folded", textIs(cell("tenant-a/inner/worker", "restarts"), fmt.Sprint(n+1))+" && "+textHas(cell("tenant-a/inner/worker", "lastError"), "worker broke"))
	// Only a snapshot carries a group's budget: once inner's has moved, a
	// snapshot has been drawn, and tenant-a is still folded.
	wait("a snapshot with inner's budget, still folded", fmt.Sprintf(`document.querySelector('tr[data-child="tenant-a/inner"] [data-field="budget"]').textContent !== %q`, spent)+
		` && document.querySelector('tr[data-child="tenant-a/store"]').hidden && document.querySelector('tr[data-child="tenant-a/inner/worker"]').hidden`)
	if err := chromedp.Do(browser, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS(`tr[data-child="tenant-a"]`))); err != nil {
		t.Fatal(err)
	}
	wait("folded after a reload", `document.querySelector('tr[data-child="tenant-a/inner/worker"]').hidden === true`)
	click(`tr[data-child="tenant-a"] button.fold`)
	wait("unfolded", `!document.querySelector('tr[data-child="tenant-a/inner/worker"]').hidden`)

	// The buttons on a path, and on a group whole.
	click(`tr[data-child="tenant-a/inner/worker"] button[data-action="restart"]`)
	wait("the restart's answer", textIs("#banner", "restart tenant-a/inner/worker: done"))
	wait("the worker's restart by the button", textIs(cell("tenant-a/inner/worker", "restarts"), fmt.Sprint(n+2)))
	click(`tr[data-child="tenant-a"] button[data-action="stop"]`)
	wait("tenant-a stopped", textIs(cell("tenant-a/inner/worker", "state"), "Stopped")+" && "+textIs(cell("tenant-a", "state"), "Stopped"))
	click(`tr[data-child="tenant-a"] button[data-action="start"]`)
	wait("tenant-a started", textIs(cell("tenant-a/inner/worker", "state"), "Running")+" && "+textIs(cell("tenant-a", "state"), "Running"))

	// A spent budget: the exhausted mark.
	crash.crash.Store(true)
	click(`tr[data-child="flaky/crash"] button[data-action="restart"]`)
	wait("flaky exhausted", `!!document.querySelector('tr[data-child="flaky"] [data-field="exhausted"]')`+" && "+textHas(cell("flaky", "state"), "Stopped"))
	wait("flaky's budget", textIs(cell("flaky", "kind")+` [data-field="budget"]`, "budget 1/1 in 1m"))
	if tone := eval(`document.querySelector('tr[data-child="flaky"] [data-field="budget"]').dataset.tone`); tone != "bad" {
		t.Errorf("flaky's budget tone: want bad, have %q", tone)
	}
	crash.crash.Store(false)
	click(`tr[data-child="flaky"] button[data-action="start"]`)
	wait("flaky started, no mark", `!document.querySelector('tr[data-child="flaky"] [data-field="exhausted"]')`+" && "+textIs(cell("flaky", "state"), "Running"))

	if sl := eval(`String(document.querySelector('.table-wrap').scrollLeft)`); sl != "0" {
		t.Logf("the table was scrolled to %s: it is wider than the window", sl)
	}
	eval(`(() => { document.querySelector('.table-wrap').scrollLeft = 0; return '' })()`)
	click(`tr[data-child="tenant-a/inner"] button.fold`)
	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(artifactDir(t), "supervision-tree.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot: %s", path)
	if err := chromedp.Cancel(browser); err != nil {
		t.Errorf("closing the browser: %v", err)
	}
}
