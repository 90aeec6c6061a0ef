package engine

import (
	"context"
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/geolimit/geolimit/pop"
)

// The kill switch: setting a rule's mode at run time (the daemon serves it
// as PUT /v1/rules/{name}/mode), the rules' modes as the API and status
// show them, their metrics, and an early state write after a change. The
// modes themselves live in the node core (pop/modes.go) and travel with
// replication (repl/modes.go).

// ErrBadMode is a mode that is not enforce, shadow, off or config.
var ErrBadMode = errors.New("engine: mode: want enforce, shadow, off or config")

// RuleModeStatus is one rule's mode as the API shows it.
type RuleModeStatus struct {
	Rule string `json:"rule"`
	// Mode is the mode decisions use: enforce, shadow or off.
	Mode string `json:"mode"`
	// ConfigMode is the rule file's mode (absent for an orphaned override).
	ConfigMode string `json:"config_mode,omitempty"`
	// Override is the mode set at run time in force, absent when none is.
	Override *ModeOverride `json:"override,omitempty"`
	// Orphaned: this node has no rule of that name; the override applies
	// when one is loaded.
	Orphaned bool `json:"orphaned,omitempty"`
}

// ModeOverride is a mode set at run time: what, by which node, when.
type ModeOverride struct {
	Mode string `json:"mode"`
	// SetBy is the node that set it (region/pop/node#incarnation).
	SetBy string `json:"set_by"`
	// SetAt is when, RFC 3339 (UTC, nanoseconds), and SetAtMS the same in
	// Unix milliseconds, by the setting node's clock.
	SetAt   string `json:"set_at"`
	SetAtMS int64  `json:"set_at_ms"`
}

func modeStatus(st pop.ModeState) RuleModeStatus {
	out := RuleModeStatus{Rule: st.Rule, Mode: st.Effective.String(), Orphaned: st.Orphaned}
	if !st.Orphaned {
		out.ConfigMode = st.Own.String()
	}
	if m := st.Set; m != nil {
		out.Override = &ModeOverride{Mode: pop.RuleModeName(m.Mode), SetBy: m.By.String(),
			SetAt: time.Unix(0, m.At).UTC().Format(time.RFC3339Nano), SetAtMS: m.At / int64(time.Millisecond)}
	}
	return out
}

// SetRuleMode sets rule's mode on this node, and through replication on
// every node: "enforce", "shadow", "off" (nothing checked, nothing
// counted), or "config" to return to the rule file's mode. It returns the
// rule's mode as it now stands. An unknown rule is pop.ErrUnknownRule (an
// orphaned override may still be cleared); a bad mode ErrBadMode.
func (a *App) SetRuleMode(rule, mode string) (RuleModeStatus, error) {
	m, err := pop.ParseRuleMode(mode)
	if err != nil {
		return RuleModeStatus{}, ErrBadMode
	}
	w, err := a.node.SetRuleMode(a.clk.Now(), rule, m)
	if err != nil {
		return RuleModeStatus{}, err
	}
	a.log.Warn("rule mode set", "rule", rule, "mode", mode, "by", w.By.String())
	if a.state != nil && a.state.soon != nil {
		select {
		case a.state.soon <- struct{}{}:
		default: // a write is due already
		}
	}
	st, _ := a.RuleMode(rule)
	return st, nil
}

// RuleMode returns rule's mode, and false when the node has neither the
// rule nor an override for it.
func (a *App) RuleMode(rule string) (RuleModeStatus, bool) {
	st, ok := a.node.RuleMode(rule)
	if !ok {
		return RuleModeStatus{}, false
	}
	return modeStatus(st), true
}

// RuleModes returns the mode of every rule and orphaned override, by name.
func (a *App) RuleModes() map[string]RuleModeStatus {
	out := map[string]RuleModeStatus{}
	for _, st := range a.node.RuleModes() {
		out[st.Rule] = modeStatus(st)
	}
	return out
}

// ModeOverrides returns the overrides in force, orphaned ones included,
// sorted by rule: /v1/status's mode_overrides.
func (a *App) ModeOverrides() []RuleModeStatus {
	out := []RuleModeStatus{}
	for _, st := range a.node.RuleModes() {
		if st.Set != nil {
			out = append(out, modeStatus(st))
		}
	}
	return out
}

// saveOnModeChange writes the state file soon after a rule's mode was set
// here, so that an override outlives a crash before the next periodic
// write. It returns when ctx is done.
func (a *App) saveOnModeChange(ctx context.Context) {
	defer a.loops.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.state.soon:
			_ = a.saveState() // failures are logged and counted
		}
	}
}

var (
	descRuleMode = prometheus.NewDesc("geolimit_rule_mode",
		"1 for the mode each rule decides in (enforce, shadow, off: set at run time or the rule file's), 0 for the others.", []string{"rule", "mode"}, nil)
	descRuleModeOverridden = prometheus.NewDesc("geolimit_rule_mode_overridden",
		"1 while a mode set at run time (PUT /v1/rules/{name}/mode) is in force for the rule, else 0.", []string{"rule"}, nil)
	descModeChanges = prometheus.NewDesc("geolimit_rule_mode_changes_total",
		"Rule modes set at run time that this node took: set here (local) or received and newer than what it held (remote).", []string{"origin"}, nil)
	descModeRefused = prometheus.NewDesc("geolimit_rule_mode_refused_total",
		"Rule modes received and not taken: dated beyond now + limits.max_skew (future), malformed or for unknown rules beyond the orphan bound (refused), orphans dropped by a reload (dropped), refused by the mode authority's trust rule (untrusted).", []string{"reason"}, nil)
)

var allModes = [...]pop.Mode{pop.Enforce, pop.Shadow, pop.Off}

// modeCollector exports the rules' modes.
type modeCollector struct{ a *App }

func (c *modeCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descRuleMode, descRuleModeOverridden, descModeChanges, descModeRefused} {
		ch <- d
	}
}

func (c *modeCollector) Collect(ch chan<- prometheus.Metric) {
	for _, st := range c.a.node.RuleModes() {
		if st.Orphaned {
			continue // bounded by the rules: orphans show in /v1/status only
		}
		for _, m := range allModes {
			ch <- prometheus.MustNewConstMetric(descRuleMode, prometheus.GaugeValue, b2f(st.Effective == m), st.Rule, m.String())
		}
		ch <- prometheus.MustNewConstMetric(descRuleModeOverridden, prometheus.GaugeValue, b2f(st.Set != nil), st.Rule)
	}
	ms := c.a.node.Stats().Modes
	ch <- prometheus.MustNewConstMetric(descModeChanges, prometheus.CounterValue, float64(ms.Set), "local")
	ch <- prometheus.MustNewConstMetric(descModeChanges, prometheus.CounterValue, float64(ms.Merged), "remote")
	ch <- prometheus.MustNewConstMetric(descModeRefused, prometheus.CounterValue, float64(ms.Future), "future")
	ch <- prometheus.MustNewConstMetric(descModeRefused, prometheus.CounterValue, float64(ms.Untrusted), "untrusted")
	ch <- prometheus.MustNewConstMetric(descModeRefused, prometheus.CounterValue, float64(ms.Refused), "refused")
	ch <- prometheus.MustNewConstMetric(descModeRefused, prometheus.CounterValue, float64(ms.Dropped), "dropped")
}
