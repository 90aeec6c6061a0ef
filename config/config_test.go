package config

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/pop"
)

// full is the config contract example (every documented field).
const full = `
node:
  id: ams-1
  region: eu
  pop: ams
listen:
  api: 127.0.0.1:8080
  proxy: ""
  forward_auth: 127.0.0.1:8090
forward_auth:
  deny_status: 403
proxy:
  upstream: http://127.0.0.1:9000
  trusted_proxies: [127.0.0.1/32]
nats:
  url: ""
  embedded:
    listen: 127.0.0.1:4222
    gateway:
      name: eu
      listen: 127.0.0.1:7222
      gateways: [{name: us, urls: [nats://127.0.0.1:7223]}]
  subject_prefix: geolimit
gossip:
  bind: 127.0.0.1:7946
  join: [127.0.0.1:7947]
replication:
  flush_interval: 50ms
  peer_timeout: 2s
  anti_entropy_interval: 5s
rules:
  - name: per-ip
    match: {path_prefix: /api, methods: [GET, POST]}
    key: ip
    limit: 100
    window: 1m
    cost: 1
    scope: pop
    mode: enforce
    on_partition: keep
`

func TestParseContract(t *testing.T) {
	c, err := Parse([]byte(full))
	require.NoError(t, err)
	assert.Equal(t, Node{ID: "ams-1", Region: "eu", PoP: "ams"}, c.Node)
	assert.Equal(t, "127.0.0.1:8080", c.Listen.API)
	assert.Equal(t, "127.0.0.1:8090", c.Listen.ForwardAuth)
	assert.Equal(t, 403, c.ForwardAuth.DenyStatus)
	assert.Equal(t, []string{"127.0.0.1/32"}, c.Proxy.TrustedProxies)
	require.NotNil(t, c.NATS.Embedded.Gateway)
	assert.Equal(t, []RemoteGateway{{Name: "us", URLs: []string{"nats://127.0.0.1:7223"}}}, c.NATS.Embedded.Gateway.Gateways)
	require.NotNil(t, c.Gossip)
	assert.Equal(t, []string{"127.0.0.1:7947"}, c.Gossip.Join)
	assert.Equal(t, 50*time.Millisecond, c.Replication.FlushInterval)
	require.Len(t, c.Rules, 1)
	assert.Equal(t, KeySpec{"ip"}, c.Rules[0].Key)
	assert.Equal(t, []string{"GET", "POST"}, c.Rules[0].Match.Methods)
	rules, err := c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, pop.Rule{Name: "per-ip", Limit: 100, Window: time.Minute, Cost: 1, Scope: pop.ScopePoP}, rules[0])
}

func TestDefaults(t *testing.T) {
	c, err := Parse([]byte("rules: [{name: r, limit: 5, window: 1s, key: [ip, 'header:X-Key']}]"))
	require.NoError(t, err)
	d := DefaultConfig()
	assert.Equal(t, d.Listen, c.Listen)
	assert.Equal(t, "local", c.Node.Region)
	assert.Equal(t, "127.0.0.1:4222", c.NATS.Embedded.Listen)
	assert.Equal(t, "geolimit", c.NATS.SubjectPrefix)
	assert.Empty(t, c.Listen.ForwardAuth)
	assert.Equal(t, 429, c.ForwardAuth.DenyStatus)
	r := c.Rules[0]
	assert.Equal(t, Rule{Name: "r", Key: KeySpec{"ip", "header:X-Key"}, Limit: 5, Window: Duration(time.Second),
		Cost: 1, Scope: "global", Mode: "enforce", OnPartition: "keep", OnUnsure: "allow"}, r)
	assert.NotSame(t, DefaultConfig(), DefaultConfig())

	assert.Equal(t, Idempotency{TTL: Duration(24 * time.Hour)}, c.Idempotency)
	assert.Equal(t, crdt.DefaultMaxKeys/4, c.Idempotency.MaxKeysOr(c.Limits), "max_keys 0: a quarter of limits.max_keys")
	ic, err := Parse([]byte("idempotency: {header: X-Request-Id, ttl: 1h, max_keys: 5000}\nlimits: {max_keys: 100}"))
	require.NoError(t, err)
	assert.Equal(t, Idempotency{Header: "X-Request-Id", TTL: Duration(time.Hour), MaxKeys: 5000}, ic.Idempotency)
	assert.Equal(t, 5000, ic.Idempotency.MaxKeysOr(ic.Limits))

	assert.Nil(t, c.Replication.NearLimitAllowance, "unset: on")
	assert.True(t, c.Replication.Allowance())
	c, err = Parse([]byte("replication: {near_limit_allowance: false}"))
	require.NoError(t, err)
	require.NotNil(t, c.Replication.NearLimitAllowance)
	assert.False(t, *c.Replication.NearLimitAllowance)

	c, err = Parse(nil)
	require.NoError(t, err)
	assert.Empty(t, c.Rules)

	c, err = Parse([]byte("nats: {embedded: {gateway: {listen: '127.0.0.1:-1'}}}\nnode: {region: us}"))
	require.NoError(t, err)
	assert.Equal(t, "us", c.NATS.Embedded.Gateway.Name, "gateway name defaults to node.region")

	require.NoError(t, Demo().Validate())
	_, ok := func() (Rule, bool) {
		for _, r := range Demo().Rules {
			if r.Name == "demo" {
				return r, true
			}
		}
		return Rule{}, false
	}()
	assert.True(t, ok, "the demo rule set has a rule named demo")
}

func TestParseErrors(t *testing.T) {
	rule := func(extra string) string {
		return "rules:\n  - name: r\n    limit: 10\n    window: 1m\n" + extra
	}
	tests := []struct {
		name, in, want string
	}{
		{"unknown top-level field", "nodes: {id: x}\n", "nodes: unknown field (line 1)"},
		{"unknown nested field", "node:\n  id: a\n  zone: x\n", "node.zone: unknown field (line 3)"},
		{"unknown rule field", rule("    refill: 5\n"), "rules[0].refill: unknown field (line 5)"},
		{"unknown field in flow map", rule("    match: {path_prefix: /a, verb: GET}\n"), "rules[0].match.verb: unknown field"},
		{"bad duration", "replication:\n  flush_interval: 5xs\n", `replication.flush_interval: bad duration "5xs"`},
		{"bad rule window", "rules: [{name: r, limit: 1, window: soon}]", `rules[0].window: bad duration "soon"`},
		{"zero window", "rules: [{name: r, limit: 1}]", "rules[0].window: must be a whole number of milliseconds"},
		{"negative duration", "replication: {peer_timeout: -1s}", "replication.peer_timeout: must be positive"},
		{"forget before timeout", "replication: {peer_timeout: 2s, forget_after: 1s}", "replication.forget_after: 1s must be above peer_timeout 2s"},
		{"negative max pops", "replication: {max_pops: -1}", "replication.max_pops: must be at least 1, got -1"},
		{"zero flush interval", "replication: {flush_interval: 0s}", "replication.flush_interval: must be positive, got 0s"},
		{"heartbeat at peer timeout", "replication: {peer_timeout: 1s, heartbeat_interval: 1s}", "replication.heartbeat_interval: 1s must be below peer_timeout 1s"},
		{"int duration", "replication: {peer_timeout: 5}", `replication.peer_timeout: bad duration "5"`},
		{"bad expected pop", "replication: {expected_pops: [eu]}", `replication.expected_pops[0]: identity: bad name: "eu" is not region/pop`},
		{"negative sync interval", "replication: {sync_interval: -1s}", "replication.sync_interval: must be positive"},
		{"bad scope", rule("    scope: planet\n"), `rules[0].scope: unknown scope "planet"`},
		{"bad mode", rule("    mode: loud\n"), `rules[0].mode: unknown mode "loud"`},
		{"bad policy", rule("    on_partition: panic\n"), `rules[0].on_partition: unknown partition policy "panic"`},
		{"bad on_unsure", rule("    on_unsure: maybe\n"), `rules[0].on_unsure: unknown policy "maybe" (want allow or deny)`},
		{"share_rise past 1", rule("    on_partition: share\n    share_rise: 1.5\n"), "rules[0].share_rise: must be 0 to 1 (a fraction of the limit), got 1.5"},
		{"negative share_rise", rule("    on_partition: share\n    share_rise: -0.1\n"), "rules[0].share_rise: must be 0 to 1"},
		{"share_rise under keep", rule("    share_rise: 0.1\n"), "rules[0].share_rise: only for on_partition: share"},
		{"negative block_for", rule("    block_for: -1m\n"), "rules[0].block_for: must be 0 or a whole number of milliseconds, got -1m0s"},
		{"block_for below a millisecond", rule("    block_for: 1500us\n"), "rules[0].block_for: must be 0 or a whole number of milliseconds"},
		{"block_for too long", rule("    block_for: 800h\n"), "rules[0].block_for: must be at most 720h0m0s"},
		{"bad block_for", rule("    block_for: later\n"), `rules[0].block_for: bad duration "later"`},
		{"zero limit", "rules: [{name: r, limit: 0, window: 1s}]", "rules[0].limit: must be at least 1"},
		{"limit over 2^53", "rules: [{name: r, limit: 9007199254740993, window: 1s}]", "rules[0].limit: must be at most 9007199254740992 (2^53)"},
		{"limit not a number", "rules: [{name: r, limit: lots, window: 1s}]", "rules[0].limit: cannot unmarshal"},
		{"cost over limit", rule("    cost: 11\n"), "rules[0].cost: 11 exceeds limit 10"},
		{"duplicate rule", "rules: [{name: r, limit: 1, window: 1s}, {name: r, limit: 1, window: 1s}]", `rules[1].name: "r" already used by rules[0]`},
		{"bad rule name", "rules: [{name: 'a/b', limit: 1, window: 1s}]", "rules[0].name:"},
		{"bad key", rule("    key: cookie\n"), `rules[0].key: unknown key "cookie"`},
		{"bad composite key", rule("    key: [ip, 'header:']\n"), "rules[0].key[1]:"},
		{"bad method", rule("    match: {methods: [get]}\n"), `rules[0].match.methods[0]: "get" is not an upper-case HTTP method`},
		{"bad path prefix", rule("    match: {path_prefix: api}\n"), "rules[0].match.path_prefix:"},
		{"bad api listen", "listen: {api: localhost}", "listen.api:"},
		{"proxy without upstream", "listen: {proxy: '127.0.0.1:0'}", "proxy.upstream: required"},
		{"bad upstream", "proxy: {upstream: 'ftp://x'}", "proxy.upstream:"},
		{"bad forward-auth listen", "listen: {forward_auth: '127.0.0.1'}", "listen.forward_auth:"},
		{"deny status not 4xx", "forward_auth: {deny_status: 500}", "forward_auth.deny_status: must be a 4xx status (400-499), got 500"},
		{"deny status 2xx", "forward_auth: {deny_status: 200}", "forward_auth.deny_status: must be a 4xx status (400-499), got 200"},
		{"deny status not a number", "forward_auth: {deny_status: forbidden}", "forward_auth.deny_status: cannot unmarshal"},
		{"unknown forward-auth field", "forward_auth: {status: 403}", "forward_auth.status: unknown field"},
		{"bad trusted proxy", "proxy: {trusted_proxies: [10.0.0.0/8, nope]}", "proxy.trusted_proxies[1]:"},
		{"bad node id", "node: {id: 'a/b'}", "node.id:"},
		{"empty region", "node: {region: ''}", "node.region:"},
		{"dotted region", "node: {region: eu.west}", `node.region: identity: bad name: "eu.west"`},
		{"wildcard pop", "node: {pop: 'ams*'}", `node.pop: identity: bad name: "ams*"`},
		{"bad nats url", "nats: {url: 'nats://'}", "nats.url:"},
		{"bad subject prefix", "nats: {subject_prefix: 'a.*'}", "nats.subject_prefix:"},
		{"gateway without urls", "nats: {embedded: {gateway: {name: eu, listen: '127.0.0.1:1', gateways: [{name: us}]}}}", "nats.embedded.gateway.gateways[0].urls:"},
		{"bad gossip bind", "gossip: {bind: nowhere}", "gossip.bind:"},
		{"bad max keys", "limits: {max_keys: 0}", "limits.max_keys: must be at least 1"},
		{"negative max memory", "limits: {max_memory: -1}", "limits.max_memory: must be 0 (derived from the machine) or at least 67108864 bytes (64 MiB), got -1"},
		{"tiny max memory", "limits: {max_memory: 1000}", "limits.max_memory: must be 0"},
		{"negative startup sync", "replication: {startup_sync: -1s}", "replication.startup_sync: must not be negative, got -1s"},
		{"zero state interval", "state: {file: /tmp/x, interval: 0s}", "state.interval: must be positive, got 0s"},
		{"state file of no name", "state: {file: /}", `state.file: "/" names no file`},
		{"unknown state field", "state: {path: /tmp/x}", "state.path: unknown field"},
		{"bad idempotency header", "idempotency: {header: 'Idem Key'}", `idempotency.header: "Idem Key" is not a header name`},
		{"zero idempotency ttl", "idempotency: {ttl: 0s}", "idempotency.ttl: must be positive, got 0s"},
		{"idempotency ttl too long", "idempotency: {ttl: 800h}", "idempotency.ttl: at most 720h0m0s, got 800h0m0s"},
		{"negative idempotency max keys", "idempotency: {max_keys: -1}", "idempotency.max_keys: must be 0 (limits.max_keys / 4) or more, got -1"},
		{"unknown idempotency field", "idempotency: {size: 1}", "idempotency.size: unknown field"},
		{"yaml syntax", "node: [", "yaml:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.in))
			require.Error(t, err)
			assert.Contains(t, err.Error(), tt.want)
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "edge.yaml")
	require.NoError(t, os.WriteFile(p, []byte(full), 0o600))
	c, err := Load(p)
	require.NoError(t, err)
	assert.Equal(t, "ams-1", c.Node.ID)

	require.NoError(t, os.WriteFile(p, []byte("bogus: 1\n"), 0o600))
	_, err = Load(p)
	require.Error(t, err)
	assert.Equal(t, "config: "+p+": bogus: unknown field (line 1)", err.Error())

	_, err = Load(filepath.Join(dir, "missing.yaml"))
	assert.ErrorIs(t, err, os.ErrNotExist)
}

func TestParsePrefixes(t *testing.T) {
	ps, err := ParsePrefixes([]string{"10.0.0.0/8", "127.0.0.1", "::1", "::ffff:192.168.0.0/112"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.0/8", ps[0].String())
	assert.Equal(t, "127.0.0.1/32", ps[1].String())
	assert.Equal(t, "::1/128", ps[2].String())
	assert.Equal(t, "192.168.0.0/16", ps[3].String())
}

// A config file must hold rules: an empty or truncated file, or rules: [],
// is refused rather than dropping every rule and its counts on a reload.
func TestFileNeedsRules(t *testing.T) {
	dir := t.TempDir()
	for _, body := range []string{"", "\n", "rules: []\n", "node: {id: a}\n"} {
		p := filepath.Join(dir, "edge.yaml")
		require.NoError(t, os.WriteFile(p, []byte(body), 0o600))
		_, err := Load(p)
		require.ErrorIs(t, err, ErrNoRules, "%q", body)
		assert.Contains(t, err.Error(), "rules: at least one rule required")
	}
	_, err := ParseFile([]byte("rules: [{name: r, limit: 1, window: 1s}]"))
	require.NoError(t, err)
}

func TestParsePenaltyBoxAndOnUnsure(t *testing.T) {
	c, err := Parse([]byte("rules: [{name: login, limit: 5, window: 1m, block_for: 10m, on_unsure: deny}]"))
	require.NoError(t, err)
	assert.Equal(t, Duration(10*time.Minute), c.Rules[0].BlockFor)
	assert.Equal(t, "deny", c.Rules[0].OnUnsure)
	rules, err := c.PopRules()
	require.NoError(t, err)
	assert.Equal(t, 10*time.Minute, rules[0].BlockFor)
	assert.Equal(t, pop.DenyUnsure, rules[0].OnUnsure)
}

// TestDemo: the shipped config/demo.yaml is the demo config, and loading it
// as a file gives what Demo gives.
func TestDemo(t *testing.T) {
	c, err := Load("demo.yaml")
	require.NoError(t, err)
	d := Demo()
	assert.Equal(t, d.Rules, c.Rules)
	assert.Equal(t, d.Listen, c.Listen)
	assert.Len(t, d.Rules, 3)
}

func TestMemoryBudget(t *testing.T) {
	assert.Equal(t, int64(256<<20), Limits{MaxMemory: 256 << 20}.MemoryBudget(), "as set")
	assert.GreaterOrEqual(t, Limits{}.MemoryBudget(), int64(MinMaxMemory), "derived from the machine")
}

// TestContainerConfigs: the image's configs load, listen where `docker run
// -p` reaches (beyond the container's loopback), and take a token or say
// insecure.
func TestContainerConfigs(t *testing.T) {
	dir := t.TempDir()
	tokens := filepath.Join(dir, "tokens")
	require.NoError(t, os.WriteFile(tokens, []byte("k7H2p9Qw3Zx8Lm4Rt6Yv1Bn5Cd0Fg2Hjk7H2p9Qw3Zx8\n"), 0o600))
	b, err := os.ReadFile("../deploy/container/edge.yaml")
	require.NoError(t, err)
	c, err := Parse([]byte(strings.ReplaceAll(string(b), "/run/secrets/geolimit-api-tokens", tokens)))
	require.NoError(t, err)
	assert.Equal(t, "0.0.0.0:8080", c.Listen.API)
	assert.Equal(t, tokens, c.API.TokenFile)
	assert.Equal(t, Demo().Rules, c.Rules, "the demo rules")

	// The commented api.tokens, uncommented, gives Prometheus a metrics-only token.
	metrics := filepath.Join(dir, "metrics-token")
	require.NoError(t, os.WriteFile(metrics, []byte("Zq8Wx3Ec5Rv7Tb9Yn1Um4Ik6Ol0Pa2SdZq8Wx3Ec5Rv7\n"), 0o600))
	y := strings.ReplaceAll(string(b), "/run/secrets/geolimit-api-tokens", tokens)
	y = strings.ReplaceAll(y, "/run/secrets/geolimit-metrics-token", metrics)
	y = strings.ReplaceAll(y, "  # tokens:\n  #   - {", "  tokens:\n    - {")
	c, err = Parse([]byte(y))
	require.NoError(t, err)
	assert.Equal(t, []APIToken{{File: metrics, Scopes: []string{"metrics"}}}, c.API.Tokens)

	c, err = Load("../deploy/container/demo-insecure.yaml")
	require.NoError(t, err)
	assert.True(t, c.API.Insecure)
	assert.Equal(t, Demo().Rules, c.Rules)
}

// Without package natsembed linked (as in this test binary), nats.embedded
// is checked only for its form: the checks against nats-server come with
// the server that would run it (RegisterEmbeddedCheck).
func TestEmbeddedCheckComesWithTheServer(t *testing.T) {
	require.Nil(t, embeddedCheck, "config's tests do not link natsembed")
	_, err := Parse([]byte("nats: {embedded: {listen: '0.0.0.0:4222'}}"))
	require.NoError(t, err)
	_, err = Parse([]byte("nats: {embedded: {listen: 'nowhere'}}"))
	require.Error(t, err, "the form is checked")
	assert.Contains(t, err.Error(), "nats.embedded.listen: ")
}

// share_rise reaches pop's rule: omitted, the default (0 there); 0, none
// (negative there); a fraction, itself.
func TestShareRise(t *testing.T) {
	for _, tt := range []struct {
		extra string
		want  float64
	}{
		{"", 0},
		{"    share_rise: 0\n", -1},
		{"    share_rise: 0.3\n", 0.3},
		{"    share_rise: 1\n", 1},
	} {
		c, err := Parse([]byte("rules:\n  - name: r\n    limit: 10\n    window: 1m\n    on_partition: share\n" + tt.extra))
		require.NoError(t, err, tt.extra)
		rs, err := c.PopRules()
		require.NoError(t, err, tt.extra)
		assert.Equal(t, tt.want, rs[0].ShareRise, tt.extra)
	}
}
