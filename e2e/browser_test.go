package e2e

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	cm "github.com/actorkube/controllermanager"
	"github.com/actorkube/controllermanager/liveview"
)

// browserWait bounds each step a person would see happen at once.
const browserWait = 30 * time.Second

// chromium returns the browser to drive: $CHROMIUM, else chromium on PATH.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Skip("no Chromium on PATH and $CHROMIUM unset: run hack/install-chromium.sh (apt-get install chromium) to run the browser test")
	return ""
}

// artifactDir is where the test leaves what a person may look at: $ARTIFACTS
// when set, else the test's temporary directory.
func artifactDir(t *testing.T) string {
	if dir := os.Getenv("ARTIFACTS"); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			t.Fatal(err)
		}
		return dir
	}
	return t.TempDir()
}

// browserController fails on demand, through the FailureReporter of its
// current incarnation; with panicNext set its next Run panics.
type browserController struct {
	name      string
	panicNext atomic.Bool

	mu     sync.Mutex
	report func(error)
}

func (c *browserController) Name() string { return c.name }

func (c *browserController) Run(ctx context.Context) error {
	if c.panicNext.CompareAndSwap(true, false) {
		var m map[string]int
		m[c.name]++ // assignment to entry in nil map
	}
	report, ok := cm.FailureReporter(ctx)
	if !ok {
		return errors.New("no failure reporter in Run's context")
	}
	c.mu.Lock()
	c.report = report
	c.mu.Unlock()
	return nil
}

func (c *browserController) fail(err error) {
	c.mu.Lock()
	report := c.report
	c.mu.Unlock()
	report(err)
}

func (c *browserController) Shutdown(context.Context) {}
func (c *browserController) GetHealth() cm.HealthStatus {
	return cm.HealthStatus{Name: c.name, Healthy: true, Message: "watching 12 objects"}
}

type browserStore struct{}

func (browserStore) Name() string                  { return "inventory" }
func (browserStore) Recover(context.Context) error { return nil }

// TestBrowserSupervisionView loads the supervision view of a running manager
// in headless Chromium, sees its rows, has a controller fail and sees its
// row's restart count change without a reload; then restarts another child
// with the page's button, and leaves a screenshot.
func TestBrowserSupervisionView(t *testing.T) {
	bin := chromium(t)
	const token = "e2e-token"

	boom := &browserController{name: "boom"}
	election := true // on a fake clientset: the page shows this replica leading
	m, err := cm.NewControllerManager(cm.NewContext(fake.NewClientset()), cm.ControllerManagerConfigSpec{
		LeaderElection: &cm.LeaderElectionSpec{Enabled: &election, LeaseNamespace: "browser"},
		Supervision: &cm.SupervisionSpec{
			InitialBackoff: metav1.Duration{Duration: 50 * time.Millisecond},
			MaxRestarts:    100,
			HealthInterval: metav1.Duration{Duration: time.Second},
		},
	}, "browser", cm.WithLogger(slog.New(slog.DiscardHandler)), cm.WithIdentity("replica-a"))
	if err != nil {
		t.Fatal(err)
	}
	m.AddStore(browserStore{})
	m.Add(boom, &browserController{name: "calm"}, &browserController{name: "reporter"})
	view := liveview.Handler(m, liveview.WithControls(token))
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
		chromedp.ExecPath(bin),
		chromedp.NoSandbox, // root in a container has no user namespace to sandbox with
		chromedp.Flag("disable-gpu", true),
		chromedp.WindowSize(1440, 960),
		chromedp.UserDataDir(t.TempDir()),
	)...)
	defer cancelAlloc()
	browser, cancelBrowser := chromedp.NewContext(allocCtx)
	defer cancelBrowser()

	cell := func(childName, field string) string {
		return fmt.Sprintf(`tr[data-child=%q] td[data-field=%q]`, childName, field)
	}
	text := func(sel string) string {
		t.Helper()
		s, err := chromedp.Run(browser, chromedp.TextContent(chromedp.CSS(sel)))
		if err != nil {
			t.Fatalf("text of %s: %v", sel, err)
		}
		return strings.TrimSpace(s)
	}
	// waitElement waits until the element sel satisfies the predicate js,
	// evaluated in the page.
	waitElement := func(what, sel, js string) {
		t.Helper()
		expr := fmt.Sprintf(`(() => { const e = document.querySelector(%q); return !!e && !!(%s)(e); })()`, sel, js)
		if _, err := chromedp.Run(browser, chromedp.Poll[bool](expr, chromedp.WithPollingTimeout(browserWait))); err != nil {
			t.Fatalf("waiting for %s: %v (%s says %q)", what, err, sel, text(sel))
		}
	}
	// waitText waits until the text of the element sel satisfies js.
	waitText := func(what, sel, js string) {
		t.Helper()
		waitElement(what, sel, fmt.Sprintf(`e => (%s)(e.textContent.trim())`, js))
	}

	if err := chromedp.Do(browser,
		chromedp.Navigate(srv.URL+liveview.DefaultPrefix+"/"),
		chromedp.WaitVisible(chromedp.CSS(`tr[data-child="boom"]`)),
	); err != nil {
		t.Fatalf("loading the page: %v", err)
	}
	waitText("the stream to be live", "#conn", `t => t === "live"`)
	for _, name := range []string{"inventory", "boom", "calm", "reporter"} {
		if have := text(cell(name, "state")); have != "Running" {
			t.Errorf("%s: want state Running, have %q", name, have)
		}
	}
	if have := text("#phase"); have != "Running" {
		t.Errorf("phase: want Running, have %q", have)
	}
	waitText("the lease watchdog's verdict", "#lead-renewal", `t => t === "ok"`)
	for sel, want := range map[string]string{"#lead-election": "on", "#lead-role": "leader", "#lead-identity": "replica-a", "#lead-holder": "replica-a"} {
		if have := text(sel); have != want {
			t.Errorf("leadership %s: want %q, have %q", sel, want, have)
		}
	}
	if have := text(cell("boom", "restarts")); have != "0" {
		t.Fatalf("boom: want 0 restarts before the failure, have %q", have)
	}
	// A mark in this document: a reload would lose it.
	if _, err := chromedp.Run(browser, chromedp.Evaluate[bool](`window.sameDocument = true`)); err != nil {
		t.Fatal(err)
	}

	boom.fail(errors.New("lost the watch on its objects"))
	waitText("boom's restart count to change", cell("boom", "restarts"), `t => t === "1"`)
	waitText("boom's failure count", cell("boom", "failures"), `t => t === "1"`)
	waitText("boom's last error", cell("boom", "lastError"), `t => t.includes("lost the watch on its objects")`)
	waitElement("boom's failure bar", cell("boom", "spark"), `e => e.dataset.total === "1" && e.querySelectorAll("rect:not(.zero)").length === 1`)

	// A panic in the restart: its stack is folded in the last error.
	boom.panicNext.Store(true)
	boom.fail(errors.New("lost the watch again"))
	waitText("boom restarted after its panic", cell("boom", "restarts"), `t => t === "3"`)
	waitText("the panic in boom's last error", cell("boom", "lastError"), `t => t.includes("panic in Run")`)
	if err := chromedp.Do(browser, chromedp.Click(chromedp.CSS(cell("boom", "lastError")+" summary"))); err != nil {
		t.Fatalf("unfolding the stack: %v", err)
	}

	// The Restart button, with the token the page asks for.
	if err := chromedp.Do(browser,
		chromedp.SendKeys(chromedp.CSS("#token"), token),
		chromedp.Click(chromedp.CSS(`tr[data-child="calm"] button[data-action="restart"]`)),
	); err != nil {
		t.Fatalf("pressing Restart: %v", err)
	}
	waitText("the restart's answer", "#banner", `t => t === "restart calm: done"`)
	waitText("calm's restart count", cell("calm", "restarts"), `t => t === "1"`)

	same, err := chromedp.Run(browser, chromedp.Evaluate[bool](`window.sameDocument === true`))
	if err != nil || !same {
		t.Errorf("the page was reloaded (or could not be asked): %v", err)
	}
	if have := text(cell("reporter", "restarts")); have != "0" {
		t.Errorf("reporter: want untouched, have %q restarts", have)
	}

	shot, err := chromedp.Run(browser, chromedp.FullScreenshot(100))
	if err != nil {
		t.Fatalf("screenshot: %v", err)
	}
	path := filepath.Join(artifactDir(t), "supervision-view.png")
	if err := os.WriteFile(path, shot, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Logf("screenshot of the supervision view: %s", path)

	if err := chromedp.Cancel(browser); err != nil {
		t.Errorf("closing the browser: %v", err)
	}
}
