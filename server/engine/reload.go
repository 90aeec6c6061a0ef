// Reloading the config: the file watcher, SIGHUP (Reload) and what a
// reload applies without a restart.

package engine

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"reflect"
	"slices"
	"time"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/server/frontend"
)

// secretFiles lists the files besides the config file that a reload reads:
// the gossip keys and the API tokens.
func secretFiles(c *config.Config) []string {
	var out []string
	if c.Gossip != nil && c.Gossip.SecretKeyFile != "" {
		out = append(out, c.Gossip.SecretKeyFile)
	}
	if c.API.TokenFile != "" {
		out = append(out, c.API.TokenFile)
	}
	for _, t := range c.API.Tokens {
		out = append(out, t.File)
	}
	return out
}

// fingerprint hashes the config file's content b and the content of the
// secret files c names: a reload is due when it changes.
func fingerprint(b []byte, c *config.Config) [32]byte {
	h := sha256.New()
	h.Write(b)
	for _, p := range secretFiles(c) {
		h.Write([]byte{0})
		h.Write([]byte(p))
		h.Write([]byte{0})
		if sb, err := os.ReadFile(p); err == nil {
			h.Write(sb)
		}
	}
	var out [32]byte
	h.Sum(out[:0])
	return out
}

// fileStamp is what a poll compares before reading: modification time and
// size of each watched file.
type fileStamp struct {
	mod  time.Time
	size int64
}

// watchLoop polls the config file and the secret files it names, and
// reloads when their content changes.
func (a *App) watchLoop(ctx context.Context) {
	defer a.loops.Done()
	t := time.NewTicker(a.opts.WatchInterval)
	defer t.Stop()
	var last []fileStamp
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		a.reloadMu.Lock()
		cur := a.cfgNow
		a.reloadMu.Unlock()
		paths := append([]string{a.opts.ConfigPath}, secretFiles(cur)...)
		stamps := make([]fileStamp, 0, len(paths))
		for _, p := range paths {
			fi, err := os.Stat(p)
			if err != nil {
				break // being replaced; a later poll sees the new file
			}
			stamps = append(stamps, fileStamp{fi.ModTime(), fi.Size()})
		}
		if len(stamps) < len(paths) || slices.Equal(stamps, last) {
			continue
		}
		last = stamps
		b, err := os.ReadFile(a.opts.ConfigPath)
		if err != nil {
			continue
		}
		a.reloadMu.Lock()
		same := fingerprint(b, a.cfgNow) == a.lastHash
		a.reloadMu.Unlock()
		if !same {
			_ = a.reloadBytes(b, "file change")
		}
	}
}

// Reload re-reads the config file and applies its rules, trusted proxies,
// forward_auth.deny_status, the shedding section, API tokens (api.token_file, read again) and,
// when the Replicator is a ConfigReloader, gossip keys
// (gossip.secret_key_file, read again). An
// invalid file, key file or token file changes nothing: the old config keeps
// serving and the reason is logged and returned. Rules whose name and window
// are unchanged keep their counts. Other sections (listen, nats, the rest of
// gossip, replication, node, limits, http) take effect only at restart; a
// change to them is logged.
func (a *App) Reload() error {
	if a.opts.ConfigPath == "" {
		return errors.New("engine: reload: no config file")
	}
	b, err := os.ReadFile(a.opts.ConfigPath)
	if err != nil {
		a.met.reloads.WithLabelValues("failed").Inc()
		a.log.Error("config reload failed; keeping the old config", "err", err)
		return fmt.Errorf("engine: reload: %w", err)
	}
	return a.reloadBytes(b, "reload")
}

func (a *App) reloadBytes(b []byte, why string) error {
	a.reloadMu.Lock()
	defer a.reloadMu.Unlock()
	err := a.apply(b)
	a.lastHash = fingerprint(b, a.cfgNow)
	if err != nil {
		result := "failed"
		if errors.Is(err, errRuleRemoval) {
			result = "refused"
		}
		a.met.reloads.WithLabelValues(result).Inc()
		a.log.Error("config reload failed; keeping the old config", "trigger", why, "path", a.opts.ConfigPath, "err", err)
		return err
	}
	a.met.reloads.WithLabelValues("ok").Inc()
	a.log.Info("config reloaded", "trigger", why, "path", a.opts.ConfigPath, "rules", len(a.rules.Load().List))
	a.warn(a.cfgNow)
	return nil
}

func (a *App) apply(b []byte) error {
	cfg, err := config.ParseFile(b)
	if err != nil {
		return err
	}
	if err := checkRuleRemoval(a.cfgNow, cfg); err != nil {
		return err
	}
	rs, prules, err := frontend.Compile(cfg, a.metricsFor)
	if err != nil {
		return err
	}
	au, err := frontend.TokensOf(cfg)
	if err != nil {
		return err
	}
	if check := a.opts.CheckReload; check != nil {
		if err := check(cfg, au); err != nil {
			return err
		}
	}
	if err := a.node.SetRules(prules); err != nil {
		return err
	}
	rs.Bind(a.node) // one table: the server's rules and the core's, from one snapshot
	a.rules.Store(rs)
	a.shed.Apply(cfg.Shedding)
	if old := a.auth.Swap(au); !old.Same(au) {
		a.log.Info("api tokens changed", "tokens", au.Count())
	}
	old := a.cfgNow
	a.cfgNow = cfg
	_, keysLive := a.repl.(ConfigReloader)
	if keysLive {
		if err := a.repl.(ConfigReloader).ReloadConfig(cfg); err != nil {
			a.log.Warn("gossip keys not applied; they take effect at restart", "err", err)
		}
	}
	// Forget the counters of removed rules.
	a.metricsMu.Lock()
	for name := range a.ruleMetric {
		if _, ok := rs.ByName[name]; !ok {
			delete(a.ruleMetric, name)
		}
	}
	a.metricsMu.Unlock()
	if diff := restartOnly(old, cfg, keysLive); len(diff) > 0 {
		a.log.Warn("config sections changed that take effect only at restart", "sections", diff)
	}
	return nil
}

// restartOnly lists the sections that differ between a and b and are not
// applied by a reload; with keysLive, gossip.secret_key_file is applied.
func restartOnly(a, b *config.Config, keysLive bool) []string {
	var out []string
	pa, pb := a.Proxy, b.Proxy
	pa.TrustedProxies, pb.TrustedProxies = nil, nil
	ga, gb := gossipRestart(a.Gossip, keysLive), gossipRestart(b.Gossip, keysLive)
	ia, ib := a.Idempotency, b.Idempotency
	ia.Header, ib.Header = "", "" // applied with the rules
	for _, s := range []struct {
		name string
		x, y any
	}{
		{"node", a.Node, b.Node}, {"listen", a.Listen, b.Listen}, {"proxy", pa, pb},
		{"nats", a.NATS, b.NATS}, {"gossip", ga, gb}, {"replication", a.Replication, b.Replication},
		{"limits", a.Limits, b.Limits}, {"http", a.HTTP, b.HTTP}, {"state", a.State, b.State},
		{"idempotency", ia, ib},
	} {
		if !reflect.DeepEqual(s.x, s.y) {
			out = append(out, s.name)
		}
	}
	return out
}

// gossipRestart is the part of a gossip section that only a restart applies.
// insecure only relaxes validation.
func gossipRestart(g *config.Gossip, keysLive bool) *config.Gossip {
	if g == nil {
		return nil
	}
	c := *g
	c.Insecure = false
	if keysLive {
		c.SecretKeyFile = ""
	}
	return &c
}
