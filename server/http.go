package server

import (
	"math/bits"
	"net/http"
	"runtime"
	"slices"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/server/frontend"
)

func (a *App) apiHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("/v1/check", a.api.ServeCheck)
	mux.HandleFunc("/v1/checks", a.api.ServeChecks)
	mux.HandleFunc("/v1/acquire", a.api.ServeAcquire)
	mux.HandleFunc("/v1/release", a.api.ServeRelease)
	mux.HandleFunc("/v1/keys/{rule}/{key...}", a.api.ServeKey)
	mux.HandleFunc("/v1/status", a.handleStatus)
	mux.HandleFunc("/v1/rules/{name}/mode", a.handleRuleMode) // modes.go
	// The status page (ui.go): its files, and two reads only it needs.
	mux.HandleFunc("/ui", serveUI)
	mux.HandleFunc("/ui/", serveUI)
	mux.HandleFunc("/v1/activity", a.handleActivity)
	mux.HandleFunc("/v1/hotkeys", a.handleHotKeys)
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, r *http.Request) {
		frontend.WriteJSON(w, http.StatusOK, map[string]string{"status": "ok"})
	})
	mux.HandleFunc("/readyz", func(w http.ResponseWriter, r *http.Request) {
		if !a.Ready() {
			status := "not ready"
			if a.ready.Load() {
				status = "syncing" // deciding, but former incarnations' counts may be missing
			}
			frontend.WriteJSON(w, http.StatusServiceUnavailable, map[string]string{"status": status})
			return
		}
		frontend.WriteJSON(w, http.StatusOK, map[string]string{"status": "ready"})
	})
	mux.Handle("/metrics", promhttp.HandlerFor(a.reg, promhttp.HandlerOpts{Registry: a.reg}))
	mux.HandleFunc("/", func(w http.ResponseWriter, r *http.Request) {
		frontend.WriteError(w, http.StatusNotFound, "no such endpoint: "+r.URL.Path)
	})
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Every endpoint but the open ones and the status page's files
		// (uiOpen: the page asks for a token and reads with it) needs a
		// token of the endpoint's scope (frontend.ScopeOf).
		if au := a.auth.Load(); au != nil && !frontend.AuthOpen(r.URL.Path) && !uiOpen(r.URL.Path) {
			need := frontend.ScopeOf(r.Method, r.URL.Path)
			switch why := au.Authorize(r, need); why {
			case frontend.AuthOK:
			case frontend.AuthForbidden:
				frontend.Forbidden(w, need, a.met.forbidden[bits.TrailingZeros8(uint8(need))])
				return
			default:
				frontend.Unauthorized(w, why, a.met.unauthMissing, a.met.unauthInvalid)
				return
			}
		}
		// The decision endpoints skip the mux.
		switch r.URL.Path {
		case "/v1/check":
			a.api.ServeCheck(w, r)
		case "/v1/checks":
			a.api.ServeChecks(w, r)
		default:
			mux.ServeHTTP(w, r)
		}
	})
}

func methodNotAllowed(w http.ResponseWriter, allow string) {
	w.Header().Set("Allow", allow)
	frontend.WriteError(w, http.StatusMethodNotAllowed, "method not allowed; use "+allow)
}

// GET /v1/status
func (a *App) handleStatus(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodGet && r.Method != http.MethodHead {
		methodNotAllowed(w, "GET, HEAD")
		return
	}
	self := a.opts.Self
	st := a.node.Stats()
	type limitOut struct {
		Limit  uint64 `json:"limit"`
		Window string `json:"window"`
	}
	type ruleOut struct {
		Name   string `json:"name"`
		Limit  uint64 `json:"limit"`
		Window string `json:"window"`
		Cost   uint64 `json:"cost"`
		Scope  string `json:"scope"`
		Mode   string `json:"mode"`
		// ConfigMode is the rule file's mode; Mode differs from it while
		// ModeOverride is in force (modes.go).
		ConfigMode   string        `json:"config_mode"`
		ModeOverride *ModeOverride `json:"mode_override,omitempty"`
		OnPartition  string        `json:"on_partition"`
		Keys         int           `json:"keys"`
		// Of a rule of several windows, every window (the first is
		// limit and window); overrides and tiers when set.
		Limits      []limitOut `json:"limits,omitempty"`
		Overrides   int        `json:"overrides,omitempty"`
		Tiers       []string   `json:"tiers,omitempty"`
		DefaultTier string     `json:"default_tier,omitempty"`
		// Kind and LeaseTTL of a concurrency rule (whose window is 0s).
		Kind     string `json:"kind,omitempty"`
		LeaseTTL string `json:"lease_ttl,omitempty"`
		// Of a gcra rule, the algorithm and the burst (the default's too).
		Algorithm string `json:"algorithm,omitempty"`
		Burst     uint64 `json:"burst,omitempty"`
		// Of a calendar rule (whose window is its period's nominal
		// width), the calendar.
		Calendar *calendarOut `json:"calendar,omitempty"`
	}
	rules := []ruleOut{}
	modes := a.eng.RuleModes()
	for _, cr := range a.rules.Load().List {
		p := cr.Pop
		ro := ruleOut{Name: p.Name, Limit: p.Limit, Window: p.Window.String(), Cost: p.Cost,
			Scope: p.Scope.String(), Mode: p.Mode.String(), OnPartition: p.OnPartition.String(), Keys: st.KeysByRule[p.Name],
			Overrides: len(p.Overrides), DefaultTier: p.DefaultTier}
		if len(p.More) > 0 {
			for _, l := range p.Windows() {
				ro.Limits = append(ro.Limits, limitOut{Limit: l.Limit, Window: l.Window.String()})
			}
		}
		ro.ConfigMode = ro.Mode
		if m, ok := modes[p.Name]; ok {
			ro.Mode, ro.ModeOverride = m.Mode, m.Override
		}
		if p.Algorithm == pop.GCRA {
			ro.Algorithm, ro.Burst = p.Algorithm.String(), p.BurstOf()
		}
		for name := range p.Tiers {
			ro.Tiers = append(ro.Tiers, name)
		}
		slices.Sort(ro.Tiers)
		if p.Kind == pop.Concurrency {
			ro.Kind, ro.LeaseTTL = p.Kind.String(), p.LeaseTTL.String()
		}
		ro.Calendar = calendarStatus(p.Calendar)
		rules = append(rules, ro)
	}
	repl := ReplicationStatus{
		Members:    []Member{{Name: self.Node, State: "alive"}},
		RemotePoPs: []RemotePoP{},
		Partitions: []string{},
	}
	if a.repl != nil {
		repl = a.repl.Status()
		if repl.Members == nil {
			repl.Members = []Member{}
		}
		if repl.RemotePoPs == nil {
			repl.RemotePoPs = []RemotePoP{}
		}
		if repl.Partitions == nil {
			repl.Partitions = []string{}
		}
	}
	var natsID string
	if a.nats != nil {
		natsID = a.nats.NATS().ID()
	}
	frontend.WriteJSON(w, http.StatusOK, struct {
		Replica string `json:"replica"`
		Node    string `json:"node"`
		identity.PoPID
		Incarnation uint64 `json:"incarnation"`
		Version     string `json:"version"`
		GoVersion   string `json:"go_version"`
		UptimeS     int64  `json:"uptime_seconds"`
		Ready       bool   `json:"ready"`
		Synced      bool   `json:"synced"`
		NATSURL     string `json:"nats_url"`
		// NATSServerID is the embedded nats-server's ID, as its gateway and
		// route connections and its monitoring name it ("" without one).
		NATSServerID string              `json:"nats_server_id,omitempty"`
		Replication  bool                `json:"replication"`
		Keys         int                 `json:"keys"`
		Rules        []ruleOut           `json:"rules"`
		Partition    pop.PartitionStatus `json:"partition"`
		// ModeOverrides are the rules' modes set at run time in force,
		// orphaned ones included (modes.go).
		ModeOverrides []RuleModeStatus `json:"mode_overrides"`
		ReplicationStatus
	}{
		Replica: self.String(), Node: self.Node, PoPID: self.PoPID, Incarnation: self.Incarnation,
		Version: a.opts.Version, GoVersion: runtime.Version(), UptimeS: int64(time.Since(a.started).Seconds()),
		Ready: a.Ready(), Synced: a.node.Synced(), NATSURL: a.natsURL, NATSServerID: natsID, Replication: a.repl != nil, Keys: st.Store.Keys, Rules: rules,
		Partition:         a.node.Partition(a.clk.Now()),
		ModeOverrides:     a.eng.ModeOverrides(),
		ReplicationStatus: repl,
	})
}
