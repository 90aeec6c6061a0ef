// Package browsertest drives a real headless Chromium from tests, through
// the Chrome DevTools Protocol (github.com/chromedp/chromedp), to check what
// the status page (GET /ui) shows:
//
//	b := browsertest.New(t) // skips without chromium, unless required
//	b.Open("http://" + addr + "/ui")
//	b.WaitTrue(`document.body.dataset.loaded === "1"`, "the page loaded")
//
// The browser is Debian's chromium package (or chromium-browser, or the
// path in GEOLIMIT_CHROMIUM). Without it a test skips, unless
// GEOLIMIT_REQUIRE_CHROMIUM=1 (as CI sets it: .ci/run), where it fails.
// Every wait polls the DOM for a condition, bounded in time; a browser is
// stopped by t.Cleanup.
package browsertest

import (
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"testing"
	"time"

	"github.com/chromedp/cdproto/page"
	"github.com/chromedp/chromedp"
)

const (
	// Wait bounds every wait for a condition in the page.
	Wait = 15 * time.Second
	// Start bounds the browser's start.
	Start = 60 * time.Second
)

// Browser is one headless Chromium tab. Not safe for concurrent use.
type Browser struct {
	t   testing.TB
	ctx context.Context
	// dialogs are the messages of the JavaScript dialogs accepted.
	dialogs chan string
}

// ExecPath is the Chromium binary to run, or "" when none is installed.
func ExecPath() string {
	if p := os.Getenv("GEOLIMIT_CHROMIUM"); p != "" {
		return p
	}
	for _, name := range []string{"chromium", "chromium-browser", "google-chrome"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	return ""
}

// New starts a headless Chromium for t, or skips t without one (fails it
// when GEOLIMIT_REQUIRE_CHROMIUM=1). Every JavaScript dialog (confirm) the
// page opens is accepted and its message recorded (Dialog).
func New(t testing.TB) *Browser {
	t.Helper()
	path := ExecPath()
	if path == "" {
		if os.Getenv("GEOLIMIT_REQUIRE_CHROMIUM") == "1" {
			t.Fatal("browsertest: chromium not found (apt-get install chromium, or set GEOLIMIT_CHROMIUM) and GEOLIMIT_REQUIRE_CHROMIUM=1")
		}
		t.Skip("browsertest: chromium not installed (apt-get install chromium); GEOLIMIT_REQUIRE_CHROMIUM=1 makes this a failure")
	}
	opts := append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path),
		chromedp.NoSandbox, // containers and root: the page is the test's own
		chromedp.DisableGPU,
		chromedp.Flag("disable-dev-shm-usage", true),
		chromedp.Flag("no-proxy-server", true),
		chromedp.WindowSize(1280, 1024),
	)
	actx, cancelAlloc := chromedp.NewExecAllocator(context.Background(), opts...)
	ctx, cancelCtx := chromedp.NewContext(actx)
	b := &Browser{t: t, ctx: ctx, dialogs: make(chan string, 16)}
	t.Cleanup(func() {
		cancelCtx()
		cancelAlloc()
	})
	// Start the browser now, so that its start-up is not charged to the
	// first wait. (The context of this first call owns the browser: a
	// deadline on it would stop the browser when it passes; a timer that
	// cancels it bounds the start instead.)
	timer := time.AfterFunc(Start, cancelCtx)
	err := chromedp.Do(ctx)
	if !timer.Stop() {
		t.Fatalf("browsertest: %s did not start within %s", path, Start)
	}
	if err != nil {
		t.Fatalf("browsertest: start %s: %v", path, err)
	}
	dialogs := chromedp.Events(ctx, page.JavascriptDialogOpening)
	go func() {
		for ev, err := range dialogs {
			if err != nil {
				return // the browser stopped
			}
			select {
			case b.dialogs <- ev.Message:
			default:
			}
			_, _ = chromedp.Call(ctx, page.HandleJavaScriptDialog, page.HandleJavaScriptDialogParams{Accept: true})
		}
	}()
	return b
}

// run runs steps within Wait.
func (b *Browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Wait)
	defer cancel()
	if err := chromedp.Do(ctx, steps...); err != nil {
		b.t.Fatalf("browsertest: %s: %v", what, err)
	}
}

// Open navigates to url and waits for its document to load.
func (b *Browser) Open(url string) {
	b.t.Helper()
	b.run("open "+url, chromedp.Navigate(url))
}

// WaitTrue polls the JavaScript expression js until it is true, for at
// most Wait; what names the condition in the failure.
func (b *Browser) WaitTrue(js, what string) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Wait+time.Second)
	defer cancel()
	ok, err := chromedp.Run(ctx, chromedp.Poll[bool]("!!("+js+")", chromedp.WithPollingInterval(20*time.Millisecond), chromedp.WithPollingTimeout(Wait)))
	if err != nil || !ok {
		body, _ := chromedp.Run(b.ctx, chromedp.Evaluate[string](`document.body ? document.body.innerText : ""`))
		b.t.Fatalf("browsertest: %s: %s not true within %s (%v); the page reads:\n%s", what, js, Wait, err, body)
	}
}

// String evaluates the JavaScript expression js, a string.
func (b *Browser) String(js string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, Wait)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Evaluate[string](js))
	if err != nil {
		b.t.Fatalf("browsertest: evaluate %s: %v", js, err)
	}
	return s
}

// Click clicks the first element that matches the CSS selector sel.
func (b *Browser) Click(sel string) {
	b.t.Helper()
	b.run("click "+sel, chromedp.Click(chromedp.CSS(sel)))
}

// Type types text into the element matching sel, as a user would.
func (b *Browser) Type(sel, text string) {
	b.t.Helper()
	b.run("type into "+sel, chromedp.SendKeys(chromedp.CSS(sel), text))
}

// Dialog returns the message of the next JavaScript dialog the page
// opened (and that was accepted), waiting at most Wait.
func (b *Browser) Dialog() string {
	b.t.Helper()
	select {
	case m := <-b.dialogs:
		return m
	case <-time.After(Wait):
		b.t.Fatalf("browsertest: no dialog within %s", Wait)
		return ""
	}
}

// Quote is s as a JavaScript string literal.
func Quote(s string) string {
	b, _ := json.Marshal(s) // a string always encodes
	return string(b)
}
