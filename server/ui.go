package server

import (
	"cmp"
	"embed"
	"encoding/json"
	"io/fs"
	"net/http"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/geolimit/geolimit/server/frontend"
)

// The status page: GET /ui on the API listener, a self-contained page
// (HTML, CSS and a little JavaScript embedded in the binary, no CDN) that
// reads the JSON endpoints with the bearer token the operator types in and
// keeps only in the page's memory. It reads GET /v1/status (fleet, rules,
// modes), GET /v1/activity and GET /v1/hotkeys (below), and sets modes
// with PUT /v1/rules/{name}/mode.
//
// Scopes: the page's files hold no node data and are served without a
// token; GET /v1/activity and GET /v1/hotkeys are reads (the `read` scope
// where scoped tokens apply, as GET /v1/status and GET /v1/keys are); the
// mode controls' PUT is the `admin` scope's (modes.go).

//go:embed ui
var uiFS embed.FS

// uiFiles are the page's files, by the path they are served under.
var uiFiles = func() map[string]uiFile {
	sub, err := fs.Sub(uiFS, "ui")
	if err != nil {
		panic(err) // the embed directive names the directory
	}
	out := map[string]uiFile{}
	for name, typ := range map[string]string{
		"index.html": "text/html; charset=utf-8",
		"app.js":     "text/javascript; charset=utf-8",
		"style.css":  "text/css; charset=utf-8",
	} {
		b, err := fs.ReadFile(sub, name)
		if err != nil {
			panic(err) // embedded at build time
		}
		path := "/ui/" + name
		if name == "index.html" {
			path = "/ui"
		}
		out[path] = uiFile{typ: typ, body: b}
	}
	return out
}()

type uiFile struct {
	typ  string
	body []byte
}

// uiCSP allows the page nothing beyond its own files and the API it reads.
const uiCSP = "default-src 'none'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; " +
	"base-uri 'none'; form-action 'none'; frame-ancestors 'none'"

// uiOpen reports whether path is one of the page's files, served without a
// token: they hold no node data; what the page shows comes from the
// endpoints it calls with the token.
func uiOpen(path string) bool {
	_, ok := uiFiles[path]
	return ok || path == "/ui/"
}

// serveUI serves the page's files (GET, HEAD).
func serveUI(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	if r.URL.Path == "/ui/" {
		http.Redirect(w, r, "/ui", http.StatusMovedPermanently)
		return
	}
	f, ok := uiFiles[r.URL.Path]
	if !ok {
		frontend.WriteError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
		return
	}
	h := w.Header()
	h.Set("Content-Type", f.typ)
	h.Set("Content-Security-Policy", uiCSP)
	h.Set("X-Content-Type-Options", "nosniff")
	h.Set("Referrer-Policy", "no-referrer")
	h.Set("Cache-Control", "no-cache")
	h.Set("Content-Length", strconv.Itoa(len(f.body)))
	w.WriteHeader(http.StatusOK)
	if r.Method == http.MethodGet {
		_, _ = w.Write(f.body)
	}
}

// Activity: a ring of the last minutes' counts, sampled from the
// counters the metrics export (no work on the decision path).

const (
	// activityEvery is the ring's sampling interval.
	activityEvery = 2 * time.Second
	// activitySlots is how many samples the ring holds: 10 minutes.
	activitySlots = 300
)

// activityCounts are cumulative counters at one instant, or their increase
// over one interval in a sample.
type activityCounts struct {
	Allowed      uint64 `json:"allowed"`
	Denied       uint64 `json:"denied"`
	ShadowDenied uint64 `json:"shadow_denied"`
	Off          uint64 `json:"off"`
	Shed         uint64 `json:"shed"`
	// Replication messages and payload bytes received and sent, over every
	// transport.
	ReplMsgsIn   uint64 `json:"repl_messages_in"`
	ReplMsgsOut  uint64 `json:"repl_messages_out"`
	ReplBytesIn  uint64 `json:"repl_bytes_in"`
	ReplBytesOut uint64 `json:"repl_bytes_out"`
}

// sub is c - p, counter by counter; a counter that went down (a rule
// removed by a reload takes its counts along) counts 0.
func (c activityCounts) sub(p activityCounts) activityCounts {
	d := func(a, b uint64) uint64 {
		if a < b {
			return 0
		}
		return a - b
	}
	return activityCounts{d(c.Allowed, p.Allowed), d(c.Denied, p.Denied), d(c.ShadowDenied, p.ShadowDenied), d(c.Off, p.Off),
		d(c.Shed, p.Shed), d(c.ReplMsgsIn, p.ReplMsgsIn), d(c.ReplMsgsOut, p.ReplMsgsOut), d(c.ReplBytesIn, p.ReplBytesIn),
		d(c.ReplBytesOut, p.ReplBytesOut)}
}

// activitySample is the increase of the counters over one interval, ending
// at AtMS (the node's clock, Unix milliseconds).
type activitySample struct {
	AtMS int64 `json:"t_ms"`
	activityCounts
}

// activityRing holds the last activitySlots samples. Safe for concurrent
// use.
type activityRing struct {
	mu      sync.Mutex
	ring    [activitySlots]activitySample
	n, next int
	last    activityCounts
	hasLast bool
}

// add records the counters read at now: the first call only sets the base.
func (r *activityRing) add(now int64, c activityCounts) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.hasLast {
		r.ring[r.next] = activitySample{AtMS: now / int64(time.Millisecond), activityCounts: c.sub(r.last)}
		r.next = (r.next + 1) % activitySlots
		r.n = min(r.n+1, activitySlots)
	}
	r.last, r.hasLast = c, true
}

// samples returns the samples held, oldest first.
func (r *activityRing) samples() []activitySample {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make([]activitySample, 0, r.n)
	for i := range r.n {
		out = append(out, r.ring[(r.next-r.n+i+activitySlots)%activitySlots])
	}
	return out
}

// activityNow reads the counters: the rules' decisions, the shedder's
// sheds and the replicator's transports.
func (a *App) activityNow() activityCounts {
	var c activityCounts
	for _, cr := range a.rules.Load().List {
		m := cr.Metrics
		c.Allowed += m.Allowed.Load()
		c.Denied += m.Denied.Load()
		c.ShadowDenied += m.ShadowDenied.Load()
		c.Off += m.Off.Load()
	}
	if p := a.eng.Shedder().Policy(); p != nil {
		for i := range p.Classes {
			c.Shed += p.Classes[i].Shed.Load()
		}
	}
	if a.repl != nil {
		// The transports' counters are the replicator's own shape; only
		// these fields are summed.
		var ts []struct {
			MsgsSent  uint64 `json:"messages_sent"`
			BytesSent uint64 `json:"bytes_sent"`
			MsgsRecv  uint64 `json:"messages_received"`
			BytesRecv uint64 `json:"bytes_received"`
		}
		if b, err := json.Marshal(a.repl.Status().Transports); err == nil {
			_ = json.Unmarshal(b, &ts) // another shape: no replication counts
		}
		for _, t := range ts {
			c.ReplMsgsIn += t.MsgsRecv
			c.ReplMsgsOut += t.MsgsSent
			c.ReplBytesIn += t.BytesRecv
			c.ReplBytesOut += t.BytesSent
		}
	}
	return c
}

// sampleActivity runs every activityEvery until stop is closed.
func (a *App) sampleActivity(stop <-chan struct{}) {
	t := time.NewTicker(activityEvery)
	defer t.Stop()
	a.activity.add(a.clk.Now(), a.activityNow())
	for {
		select {
		case <-stop:
			return
		case <-t.C:
			a.activity.add(a.clk.Now(), a.activityNow())
		}
	}
}

// GET /v1/activity: the ring, oldest sample first.
func (a *App) handleActivity(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	frontend.WriteJSON(w, http.StatusOK, struct {
		IntervalMS int64            `json:"interval_ms"`
		Samples    []activitySample `json:"samples"`
	}{activityEvery.Milliseconds(), a.activity.samples()})
}

// Hot keys: per rule, the keys nearest their limits.

const (
	// hotKeysScan is how many (rule, key) pairs one listing looks at, at
	// most: a node holding more lists the nearest among those it saw
	// first, and says so (truncated).
	hotKeysScan = 4096
	// hotKeysPerRule is how many keys are listed per rule, at most.
	hotKeysPerRule = 10
	// hotKeysFresh is how long a listing is served again before the store
	// is walked anew: pages polling at once walk it once.
	hotKeysFresh = time.Second
)

// HotKey is one key and how near its limit it stands.
type HotKey struct {
	Key      string  `json:"key"`
	Estimate float64 `json:"estimate"`
	Limit    uint64  `json:"limit"`
}

// HotKeys is GET /v1/hotkeys' answer.
type HotKeys struct {
	// Rules maps every rule to its keys nearest their limits, nearest
	// first, hotKeysPerRule at most (GCRA and concurrency rules hold no
	// window counts and list none).
	Rules map[string][]HotKey `json:"rules"`
	// Scanned is how many (rule, key) pairs were looked at; Truncated: the
	// node held more, not all were.
	Scanned   int  `json:"scanned"`
	Truncated bool `json:"truncated"`
	// AtMS is when, by the node's clock (Unix milliseconds).
	AtMS int64 `json:"t_ms"`
}

// hotKeysCache is the last listing and when it was made.
type hotKeysCache struct {
	mu   sync.Mutex
	at   time.Time
	last *HotKeys
}

// hotKeys lists, per rule, the keys nearest their limits: it walks at most
// hotKeysScan (rule, key) pairs of the node's store and views each without
// counting anything.
func (a *App) hotKeys(now int64) *HotKeys {
	out := &HotKeys{Rules: map[string][]HotKey{}, AtMS: now / int64(time.Millisecond)}
	for _, r := range a.node.Rules() {
		out.Rules[r.Name] = []HotKey{}
	}
	type rk struct{ rule, key string }
	seen := map[rk]bool{}
walk:
	for d := range a.node.SnapshotEach(now) {
		for _, e := range d.Entries {
			r, ok := a.node.Link().WireRule(e.Rule)
			if !ok {
				continue
			}
			if _, top := out.Rules[r.Name]; !top {
				continue // a further window of a rule of several
			}
			k := rk{r.Name, e.Key}
			if seen[k] {
				continue
			}
			if len(seen) == hotKeysScan {
				out.Truncated = true
				break walk
			}
			seen[k] = true
		}
	}
	out.Scanned = len(seen)
	for k := range seen {
		v, err := a.node.View(now, k.rule, k.key)
		if err != nil || v.Limit == 0 {
			continue
		}
		out.Rules[k.rule] = append(out.Rules[k.rule], HotKey{Key: k.key, Estimate: v.Estimate, Limit: v.Limit})
	}
	for name, ks := range out.Rules {
		slices.SortFunc(ks, func(x, y HotKey) int {
			if c := cmp.Compare(y.Estimate/float64(y.Limit), x.Estimate/float64(x.Limit)); c != 0 {
				return c
			}
			return cmp.Compare(x.Key, y.Key)
		})
		out.Rules[name] = ks[:min(len(ks), hotKeysPerRule)]
	}
	return out
}

// GET /v1/hotkeys
func (a *App) handleHotKeys(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	c := &a.hot
	c.mu.Lock()
	if c.last == nil || time.Since(c.at) >= hotKeysFresh {
		c.last, c.at = a.hotKeys(a.clk.Now()), time.Now()
	}
	hk := c.last
	c.mu.Unlock()
	frontend.WriteJSON(w, http.StatusOK, hk)
}
