package sim

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/geolimit/geolimit/config"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/pop"
	"github.com/geolimit/geolimit/repl"
)

// Scenario is a simulation as written in a scenario file (scenarios/*.yaml).
// Durations use Go syntax ("50ms", "2m"); rates are "400/s", "24000/m",
// "2/ms" or a bare number per second. A Scenario is a plain value; Validate
// reports the first field at fault (and fills defaults, so it must not race
// with readers). A validated Scenario may be run by several goroutines at once.
type Scenario struct {
	// Name names the scenario in reports.
	Name string `yaml:"name"`
	// Description says what the scenario shows (free text).
	Description string `yaml:"description"`
	// Seed seeds the one random source of the run.
	Seed uint64 `yaml:"seed"`
	// Duration is the simulated time span (> 0).
	Duration time.Duration `yaml:"duration"`
	// Start is the instant the run starts at (RFC 3339, e.g.
	// 2026-11-30T23:59:00Z), so that a calendar boundary can fall inside
	// the run; zero means Epoch. Between 1970 and 2200.
	Start time.Time `yaml:"start"`
	// Topology lists the regions, their PoPs and node counts.
	Topology []Region `yaml:"topology"`
	// Network is the link model.
	Network Network `yaml:"network"`
	// Replication tunes flushing, anti-entropy and partition detection.
	Replication ReplicationSpec `yaml:"replication"`
	// Rules use the edge config's rule schema.
	Rules []RuleSpec `yaml:"rules"`
	// Traffic lists the request streams.
	Traffic []Traffic `yaml:"traffic"`
	// Events are partitions, heals, cuts, flapping, clock skew, crashes and
	// restarts, at simulated times.
	Events []Event `yaml:"events"`
	// State says which nodes keep a state file (the daemon's state.file).
	State StateSpec `yaml:"state"`
	// Output tunes the time series and the convergence probe.
	Output Output `yaml:"output"`
}

// Region is a region of the topology.
type Region struct {
	// Region is the region's name (unique, no '/').
	Region string `yaml:"region"`
	// PoPs are the region's points of presence.
	PoPs []PoPSpec `yaml:"pops"`
}

// PoPSpec is a PoP of the topology. PoP names are unique across regions and
// differ from every region name. Its nodes are named <pop>-1 ... <pop>-N.
type PoPSpec struct {
	Name  string `yaml:"name"`
	Nodes int    `yaml:"nodes"`
}

// StateSpec says which nodes keep a state file, as the daemon's state
// section does: such a node writes its counts every Interval, and a start
// after a crash merges what its former incarnation last wrote (its PoP's
// members, when it has any up, tell it the rest: the startup sync). The
// other nodes start again without.
type StateSpec struct {
	// Nodes names nodes, PoPs or regions whose nodes keep a state file.
	Nodes []string `yaml:"nodes"`
	// Interval is how often they write it (the daemon's state.interval;
	// default 5s): what a node admitted after its last write is lost to a
	// crash.
	Interval time.Duration `yaml:"interval"`
}

// Network is the link model: one class per kind of link plus overrides for
// given pairs.
type Network struct {
	// IntraPoP links nodes of one PoP (memberlist).
	IntraPoP Link `yaml:"intra_pop"`
	// InterPoP links PoPs of one region (NATS cluster).
	InterPoP Link `yaml:"inter_pop"`
	// InterRegion links PoPs of different regions (NATS gateways).
	InterRegion Link `yaml:"inter_region"`
	// Links override the class of the links between given regions or PoPs.
	Links []LinkOverride `yaml:"links"`
}

// Link is the model of one link: every message is delayed by Latency plus a
// uniform draw in [0, Jitter), lost with probability Loss, delivered twice
// with probability Duplicate, and held back by an extra ReorderDelay with
// probability Reorder (so later messages overtake it).
type Link struct {
	Latency      time.Duration `yaml:"latency"`
	Jitter       time.Duration `yaml:"jitter"`
	Loss         float64       `yaml:"loss"`
	Duplicate    float64       `yaml:"duplicate"`
	Reorder      float64       `yaml:"reorder"`
	ReorderDelay time.Duration `yaml:"reorder_delay"`
}

// LinkOverride replaces the link model between two sets of regions or PoPs:
// both ways, or only From -> To when OneWay is set.
type LinkOverride struct {
	From   []string `yaml:"from"`
	To     []string `yaml:"to"`
	OneWay bool     `yaml:"one_way"`
	Link   `yaml:",inline"`
}

// ReplicationSpec holds the replication settings every node uses: the
// daemon's (repl.Settings, under the same field names, from
// repl.DefaultSettings) and the simulated network's and store's caps.
// ExpectedPoPs, when empty, is every other PoP of the topology.
type ReplicationSpec struct {
	repl.Settings `yaml:",inline"`
	// IntraPoPMaxBytes caps one memberlist message. Default 1400.
	IntraPoPMaxBytes int `yaml:"intra_pop_max_bytes"`
	// InterPoPMaxBytes caps one NATS message. Default 1 MiB.
	InterPoPMaxBytes int `yaml:"inter_pop_max_bytes"`
	// MaxKeys caps every node's live keys; 0 is the pop default.
	MaxKeys int `yaml:"max_keys"`
	// FailureDetection is how long after a node crashes or is paused its
	// PoP's members drop it (memberlist's failure detection: probes, then
	// suspicion). Default 0: at once. A node that starts or resumes is
	// told at once either way.
	FailureDetection time.Duration `yaml:"failure_detection"`
}

// DefaultReplication returns the replication settings of a scenario that
// sets none: repl.DefaultSettings (flush every 50ms, so a scenario that
// wants a flush after every admitted request writes flush_interval: 0),
// network caps unset (filled by Validate).
func DefaultReplication() ReplicationSpec {
	return ReplicationSpec{Settings: repl.DefaultSettings()}
}

// RuleSpec is one rule: the edge config's rule type, so scenario files and
// edge configs share one schema, defaults and validation. Match and key are
// accepted and validated but unused: the simulator names every request's rule
// and key.
type RuleSpec = config.Rule

// Traffic is one stream of requests for one rule.
type Traffic struct {
	// Name names the stream (default "<rule>#<index>").
	Name string `yaml:"name"`
	// Rule is the rule every request of the stream is decided under.
	Rule string `yaml:"rule"`
	// Keys is the number of distinct keys (default 1).
	Keys int `yaml:"keys"`
	// KeyPrefix prefixes generated keys (default "k"); anycast streams use
	// IPv4-looking keys.
	KeyPrefix string `yaml:"key_prefix"`
	// Spread is how requests spread over keys: uniform (default) or zipf.
	Spread string `yaml:"spread"`
	// ZipfS is the Zipf exponent (> 1, default 1.1); key 0 is the hottest.
	ZipfS float64 `yaml:"zipf_s"`
	// Rate is the mean request rate of the stream.
	Rate Rate `yaml:"rate"`
	// Pattern is constant, poisson (default), onoff or ramp.
	Pattern string `yaml:"pattern"`
	// On and Off are the on/off periods of the onoff pattern.
	On  time.Duration `yaml:"on"`
	Off time.Duration `yaml:"off"`
	// RampTo is the rate the ramp pattern reaches at End, from Rate at Start.
	RampTo Rate `yaml:"ramp_to"`
	// Start and End bound the stream (default: the whole run).
	Start time.Duration `yaml:"start"`
	End   time.Duration `yaml:"end"`
	// Cost is each request's cost (default: the rule's cost).
	Cost uint64 `yaml:"cost"`
	// Anycast makes each key a client IP that sticks to one PoP, chosen by
	// Share; when all nodes of its PoP are down it moves to another PoP.
	Anycast bool `yaml:"anycast"`
	// Share is each PoP's share of the stream (normalised; default equal).
	Share map[string]float64 `yaml:"share"`
	// Changes change the rate or shares at given times.
	Changes []Change `yaml:"changes"`
	// Track is how many of the hottest keys the time series and the plot
	// follow (default 1).
	Track int `yaml:"track"`
	// Hold is how long each admitted request of a concurrency rule's
	// stream stays in flight, holding its slot (required for those
	// streams, and the same for every stream of one rule; concurrency.go).
	Hold time.Duration `yaml:"hold"`
}

// Change changes a stream's rate and/or shares from At on.
type Change struct {
	At    time.Duration      `yaml:"at"`
	Rate  *Rate              `yaml:"rate"`
	Share map[string]float64 `yaml:"share"`
}

// Event is something that happens at a simulated time: exactly one of its
// action fields is set.
type Event struct {
	At time.Duration `yaml:"at"`
	// Partition splits the fleet into groups of regions or PoPs that cannot
	// reach each other; PoPs not named form one more group.
	Partition [][]string `yaml:"partition"`
	// Cut drops every message from From to To (one way).
	Cut *Cut `yaml:"cut"`
	// Heal removes every partition and cut.
	Heal bool `yaml:"heal"`
	// Flap partitions and heals alternately until Until.
	Flap *Flap `yaml:"flap"`
	// ClockSkew sets a node's clock offset.
	ClockSkew *ClockSkew `yaml:"clock_skew"`
	// Crash stops nodes (named by node, PoP or region).
	Crash []string `yaml:"crash"`
	// Stop stops nodes cleanly (SIGTERM in a live run): each flushes its
	// counts and says goodbye to the other PoPs (repl.Core.Goodbye), and
	// its PoP's members are told at once (memberlist's leave), one node
	// after the other, so that the last of a PoP says the PoP goes down.
	// A paused node says nothing: it is crashed.
	Stop []string `yaml:"stop"`
	// Restart starts crashed or stopped nodes again with a new incarnation.
	Restart []string `yaml:"restart"`
	// Pause stops nodes without killing them (SIGSTOP in a live run): a
	// paused node takes no request, and handles no message and no timer
	// (what reaches it meanwhile is lost); its PoP's members count it
	// gone. Resume starts paused nodes again (SIGCONT), with the counts
	// and incarnation they had; they rejoin their PoP as a restarted node
	// does.
	Pause  []string `yaml:"pause"`
	Resume []string `yaml:"resume"`
}

// Cut is a one-way cut.
type Cut struct {
	From []string `yaml:"from"`
	To   []string `yaml:"to"`
}

// Flap is a flapping partition: cut for CutFor, healed for HealFor, over and
// over from the event's time until Until, where it ends healed.
type Flap struct {
	Partition [][]string    `yaml:"partition"`
	CutFor    time.Duration `yaml:"cut_for"`
	HealFor   time.Duration `yaml:"heal_for"`
	Until     time.Duration `yaml:"until"`
}

// ClockSkew sets the offset of a node's clock from true time.
type ClockSkew struct {
	Node   string        `yaml:"node"`
	Offset time.Duration `yaml:"offset"`
}

// Output tunes what the run samples.
type Output struct {
	// Step is the time-series step (default 1s).
	Step time.Duration `yaml:"step"`
	// ConvergenceStep is how often views are sampled after a heal (default 5ms).
	ConvergenceStep time.Duration `yaml:"convergence_step"`
	// ConvergenceLimit bounds the sampling after a heal (default 30s).
	ConvergenceLimit time.Duration `yaml:"convergence_limit"`
}

// Rate is a request rate in requests per second.
type Rate float64

// UnmarshalYAML parses "400/s", "24000/m", "2/ms", "10/h" or a bare number
// (per second).
func (r *Rate) UnmarshalYAML(n *yaml.Node) error {
	v, err := ParseRate(n.Value)
	if err != nil {
		return fmt.Errorf("line %d: %w", n.Line, err)
	}
	*r = v
	return nil
}

// ParseRate parses a rate such as "400/s".
func ParseRate(s string) (Rate, error) {
	num, unit, found := strings.Cut(strings.TrimSpace(s), "/")
	per := 1.0
	if found {
		switch strings.TrimSpace(unit) {
		case "s":
		case "ms":
			per = 1e-3
		case "m", "min":
			per = 60
		case "h":
			per = 3600
		default:
			return 0, fmt.Errorf("bad rate %q: unit must be /ms, /s, /m or /h", s)
		}
	}
	v, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
	if err != nil || math.IsNaN(v) || math.IsInf(v, 0) {
		return 0, fmt.Errorf("bad rate %q", s)
	}
	return Rate(v / per), nil
}

// Load reads and validates a scenario file.
func Load(path string) (*Scenario, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	sc, err := Parse(b)
	if err != nil {
		return nil, fmt.Errorf("sim: %s: %w", path, errors.Unwrap(err))
	}
	return sc, nil
}

// Parse decodes and validates a scenario. Unknown fields are an error that
// names them.
func Parse(b []byte) (*Scenario, error) {
	dec := yaml.NewDecoder(bytes.NewReader(b))
	dec.KnownFields(true)
	sc := Scenario{Replication: DefaultReplication()}
	if err := dec.Decode(&sc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("sim: %w", errors.New("empty scenario"))
		}
		return nil, fmt.Errorf("sim: %w", yamlError(err))
	}
	if err := sc.Validate(); err != nil {
		return nil, fmt.Errorf("sim: %w", err)
	}
	return &sc, nil
}

var unknownField = regexp.MustCompile(`field (\S+) not found in type (?:\w+\.)?(\w+)`)

// yamlError rewords a decoding error: one line, and unknown fields named as
// such with the part of the scenario they were found in.
func yamlError(err error) error {
	msg := strings.TrimPrefix(err.Error(), "yaml: ")
	msg = strings.TrimPrefix(msg, "unmarshal errors:\n  ")
	msg = strings.ReplaceAll(msg, "\n  ", "; ")
	msg = unknownField.ReplaceAllString(msg, `unknown field "$1" in $2`)
	return errors.New(msg)
}

// Defaults of the fields beyond repl.Settings (which has its own).
const (
	DefaultIntraPoPMaxBytes = 1400
	DefaultInterPoPMaxBytes = 1 << 20
	DefaultStep             = time.Second
	DefaultConvergenceStep  = 5 * time.Millisecond
	DefaultConvergenceLimit = 30 * time.Second
)

// withDefaults fills unset fields in place.
func (sc *Scenario) withDefaults() {
	r := &sc.Replication
	if r.IntraPoPMaxBytes == 0 {
		r.IntraPoPMaxBytes = DefaultIntraPoPMaxBytes
	}
	if r.InterPoPMaxBytes == 0 {
		r.InterPoPMaxBytes = DefaultInterPoPMaxBytes
	}
	if sc.Output.Step == 0 {
		sc.Output.Step = DefaultStep
	}
	if sc.Output.ConvergenceStep == 0 {
		sc.Output.ConvergenceStep = DefaultConvergenceStep
	}
	if sc.Output.ConvergenceLimit == 0 {
		sc.Output.ConvergenceLimit = DefaultConvergenceLimit
	}
	config.RuleDefaults(sc.Rules)
	for i := range sc.Traffic {
		t := &sc.Traffic[i]
		if t.Name == "" {
			t.Name = t.Rule + "#" + strconv.Itoa(i)
		}
		if t.Keys == 0 {
			t.Keys = 1
		}
		if t.KeyPrefix == "" {
			t.KeyPrefix = "k"
		}
		if t.Spread == "" {
			t.Spread = "uniform"
		}
		if t.ZipfS == 0 {
			t.ZipfS = 1.1
		}
		if t.Pattern == "" {
			t.Pattern = "poisson"
		}
		if t.End == 0 {
			t.End = sc.Duration
		}
		if t.Track == 0 {
			t.Track = 1
		}
	}
}

// Validate fills defaults and reports the first thing wrong, naming the field
// (e.g. "traffic[0].rate: must not be negative").
func (sc *Scenario) Validate() error {
	sc.withDefaults()
	if sc.Name == "" {
		return errors.New("name: must be set")
	}
	if sc.Duration <= 0 {
		return fmt.Errorf("duration: must be positive, got %s", sc.Duration)
	}
	if !sc.Start.IsZero() && (sc.Start.Year() < 1970 || sc.Start.Year() >= 2200) {
		return fmt.Errorf("start: must lie between 1970 and 2200, got %s", sc.Start.Format(time.RFC3339))
	}
	if len(sc.Topology) == 0 {
		return errors.New("topology: needs at least one region")
	}
	names := map[string]string{} // region or PoP name -> what it is
	nodes := 0
	for i, rg := range sc.Topology {
		f := fmt.Sprintf("topology[%d]", i)
		if err := identity.ValidName(rg.Region); err != nil {
			return fmt.Errorf("%s.region: %w", f, err)
		}
		if names[rg.Region] != "" {
			return fmt.Errorf("%s.region: %q already names a %s", f, rg.Region, names[rg.Region])
		}
		names[rg.Region] = "region"
		if len(rg.PoPs) == 0 {
			return fmt.Errorf("%s.pops: needs at least one PoP", f)
		}
		for j, p := range rg.PoPs {
			g := fmt.Sprintf("%s.pops[%d]", f, j)
			if err := identity.ValidName(p.Name); err != nil {
				return fmt.Errorf("%s.name: %w", g, err)
			}
			if names[p.Name] != "" {
				return fmt.Errorf("%s.name: %q already names a %s", g, p.Name, names[p.Name])
			}
			names[p.Name] = "PoP"
			if p.Nodes < 1 || p.Nodes > 1000 {
				return fmt.Errorf("%s.nodes: must be 1-1000, got %d", g, p.Nodes)
			}
			nodes += p.Nodes
		}
	}
	if nodes > 10000 {
		return fmt.Errorf("topology: at most 10000 nodes, got %d", nodes)
	}
	for _, l := range []struct {
		f string
		l Link
	}{{"network.intra_pop", sc.Network.IntraPoP}, {"network.inter_pop", sc.Network.InterPoP}, {"network.inter_region", sc.Network.InterRegion}} {
		if err := l.l.validate(); err != nil {
			return fmt.Errorf("%s.%w", l.f, err)
		}
	}
	for i, o := range sc.Network.Links {
		f := fmt.Sprintf("network.links[%d]", i)
		if err := checkGroup(names, o.From, false); err != nil {
			return fmt.Errorf("%s.from: %w", f, err)
		}
		if err := checkGroup(names, o.To, false); err != nil {
			return fmt.Errorf("%s.to: %w", f, err)
		}
		if err := o.Link.validate(); err != nil {
			return fmt.Errorf("%s.%w", f, err)
		}
	}
	r := sc.Replication
	if err := r.Settings.Validate(); err != nil {
		return fmt.Errorf("replication.%w", err)
	}
	switch {
	case r.IntraPoPMaxBytes < 1024:
		return fmt.Errorf("replication.intra_pop_max_bytes: must be at least 1024, got %d", r.IntraPoPMaxBytes)
	case r.InterPoPMaxBytes < 1024:
		return fmt.Errorf("replication.inter_pop_max_bytes: must be at least 1024, got %d", r.InterPoPMaxBytes)
	case r.MaxKeys < 0:
		return errors.New("replication.max_keys: must not be negative")
	case r.FailureDetection < 0 || r.FailureDetection > time.Minute:
		return fmt.Errorf("replication.failure_detection: must be 0-1m, got %s", r.FailureDetection)
	}
	if len(sc.Rules) == 0 {
		return errors.New("rules: needs at least one rule")
	}
	rules, err := sc.popRules("")
	if err != nil {
		return err
	}
	byName := map[string]pop.Rule{}
	for _, r := range rules {
		byName[r.Name] = r
	}
	if len(sc.Traffic) == 0 {
		return errors.New("traffic: needs at least one stream")
	}
	for i := range sc.Traffic {
		if err := sc.Traffic[i].validate(names, byName, sc.Duration); err != nil {
			return fmt.Errorf("traffic[%d].%w", i, err)
		}
	}
	if err := sc.checkHolds(byName); err != nil {
		return err
	}
	nodeNames := map[string]bool{}
	for _, rg := range sc.Topology {
		for _, p := range rg.PoPs {
			for k := 1; k <= p.Nodes; k++ {
				nodeNames[nodeName(p.Name, k)] = true
			}
		}
	}
	for i, ev := range sc.Events {
		if err := ev.validate(names, nodeNames, sc.Duration); err != nil {
			return fmt.Errorf("events[%d].%w", i, err)
		}
	}
	for i, n := range sc.State.Nodes {
		if !nodeNames[n] && names[n] == "" {
			return fmt.Errorf("state.nodes[%d]: unknown node, PoP or region %q", i, n)
		}
	}
	switch {
	case sc.State.Interval == 0:
		sc.State.Interval = config.DefaultStateInterval
	case sc.State.Interval < time.Millisecond:
		return fmt.Errorf("state.interval: must be at least 1ms, got %s", sc.State.Interval)
	}
	o := sc.Output
	switch {
	case o.Step < time.Millisecond:
		return errors.New("output.step: must be at least 1ms")
	case o.ConvergenceStep < 100*time.Microsecond:
		return errors.New("output.convergence_step: must be at least 100us")
	case o.ConvergenceLimit < o.ConvergenceStep:
		return errors.New("output.convergence_limit: must be at least convergence_step")
	}
	return nil
}

func nodeName(popName string, k int) string { return popName + "-" + strconv.Itoa(k) }

func checkGroup(names map[string]string, g []string, allowEmpty bool) error {
	if len(g) == 0 && !allowEmpty {
		return errors.New("must name at least one region or PoP")
	}
	for _, n := range g {
		if names[n] == "" {
			return fmt.Errorf("unknown region or PoP %q", n)
		}
	}
	return nil
}

func (l Link) validate() error {
	switch {
	case l.Latency < 0:
		return fmt.Errorf("latency: must not be negative, got %s", l.Latency)
	case l.Jitter < 0:
		return fmt.Errorf("jitter: must not be negative, got %s", l.Jitter)
	case l.ReorderDelay < 0:
		return fmt.Errorf("reorder_delay: must not be negative, got %s", l.ReorderDelay)
	}
	for _, p := range []struct {
		f string
		v float64
	}{{"loss", l.Loss}, {"duplicate", l.Duplicate}, {"reorder", l.Reorder}} {
		if !(p.v >= 0 && p.v <= 1) {
			return fmt.Errorf("%s: must be a probability in [0, 1], got %v", p.f, p.v)
		}
	}
	return nil
}

func checkShare(names map[string]string, share map[string]float64) error {
	sum := 0.0
	for _, k := range sortedKeys(share) {
		if names[k] != "PoP" {
			return fmt.Errorf("unknown PoP %q", k)
		}
		v := share[k]
		if !(v >= 0) || math.IsInf(v, 0) {
			return fmt.Errorf("%s: must not be negative, got %v", k, v)
		}
		sum += v
	}
	if len(share) > 0 && sum <= 0 {
		return errors.New("must give some PoP a positive share")
	}
	return nil
}

func (t *Traffic) validate(names map[string]string, rules map[string]pop.Rule, dur time.Duration) error {
	r, ok := rules[t.Rule]
	if !ok {
		return fmt.Errorf("rule: unknown rule %q", t.Rule)
	}
	switch {
	case t.Keys < 1 || t.Keys > 10_000_000:
		return fmt.Errorf("keys: must be 1-10000000, got %d", t.Keys)
	case t.Spread != "uniform" && t.Spread != "zipf":
		return fmt.Errorf("spread: unknown spread %q (want uniform or zipf)", t.Spread)
	case t.Spread == "zipf" && !(t.ZipfS > 1):
		return fmt.Errorf("zipf_s: must be greater than 1, got %v", t.ZipfS)
	case t.Rate < 0:
		return fmt.Errorf("rate: must not be negative, got %v/s", float64(t.Rate))
	case t.Rate > 1e9:
		return fmt.Errorf("rate: at most 1e9/s, got %v/s", float64(t.Rate))
	case t.RampTo < 0:
		return fmt.Errorf("ramp_to: must not be negative, got %v/s", float64(t.RampTo))
	case t.Start < 0 || t.Start > dur:
		return fmt.Errorf("start: must be within the run, got %s", t.Start)
	case t.End <= t.Start || t.End > dur:
		return fmt.Errorf("end: must be after start and within the run, got %s", t.End)
	case t.Cost > minLimit(r):
		return fmt.Errorf("cost: %d exceeds the limit %d of rule %q", t.Cost, minLimit(r), r.Name)
	case t.Track < 0 || t.Track > 64:
		return fmt.Errorf("track: must be 0-64, got %d", t.Track)
	}
	switch t.Pattern {
	case "constant", "poisson":
	case "onoff":
		if t.On <= 0 || t.Off < 0 {
			return fmt.Errorf("on: onoff needs on > 0 and off >= 0, got on %s off %s", t.On, t.Off)
		}
	case "ramp":
	default:
		return fmt.Errorf("pattern: unknown pattern %q (want constant, poisson, onoff or ramp)", t.Pattern)
	}
	if t.Pattern != "onoff" && (t.On != 0 || t.Off != 0) {
		return errors.New("on: only the onoff pattern has on/off periods")
	}
	if t.Pattern != "ramp" && t.RampTo != 0 {
		return errors.New("ramp_to: only the ramp pattern has ramp_to")
	}
	if err := checkShare(names, t.Share); err != nil {
		return fmt.Errorf("share: %w", err)
	}
	last := time.Duration(-1)
	for i, c := range t.Changes {
		switch {
		case c.At < 0 || c.At > dur:
			return fmt.Errorf("changes[%d].at: must be within the run, got %s", i, c.At)
		case c.At < last:
			return fmt.Errorf("changes[%d].at: changes must be in time order", i)
		case c.Rate == nil && c.Share == nil:
			return fmt.Errorf("changes[%d]: must change rate or share", i)
		case c.Rate != nil && *c.Rate < 0:
			return fmt.Errorf("changes[%d].rate: must not be negative, got %v/s", i, float64(*c.Rate))
		case c.Rate != nil && *c.Rate > 1e9:
			return fmt.Errorf("changes[%d].rate: at most 1e9/s", i)
		}
		if err := checkShare(names, c.Share); err != nil {
			return fmt.Errorf("changes[%d].share: %w", i, err)
		}
		last = c.At
	}
	return nil
}

func (ev *Event) validate(names map[string]string, nodes map[string]bool, dur time.Duration) error {
	if ev.At < 0 || ev.At > dur {
		return fmt.Errorf("at: must be within the run (0-%s), got %s", dur, ev.At)
	}
	set := 0
	if ev.Partition != nil {
		set++
		if err := checkPartition(names, ev.Partition); err != nil {
			return fmt.Errorf("partition: %w", err)
		}
	}
	if ev.Cut != nil {
		set++
		if err := checkGroup(names, ev.Cut.From, false); err != nil {
			return fmt.Errorf("cut.from: %w", err)
		}
		if err := checkGroup(names, ev.Cut.To, false); err != nil {
			return fmt.Errorf("cut.to: %w", err)
		}
	}
	if ev.Heal {
		set++
	}
	if f := ev.Flap; f != nil {
		set++
		if err := checkPartition(names, f.Partition); err != nil {
			return fmt.Errorf("flap.partition: %w", err)
		}
		switch {
		case f.CutFor <= 0:
			return fmt.Errorf("flap.cut_for: must be positive, got %s", f.CutFor)
		case f.HealFor <= 0:
			return fmt.Errorf("flap.heal_for: must be positive, got %s", f.HealFor)
		case f.Until <= ev.At || f.Until > dur:
			return fmt.Errorf("flap.until: must be after at and within the run, got %s", f.Until)
		}
	}
	if cs := ev.ClockSkew; cs != nil {
		set++
		if !nodes[cs.Node] {
			return fmt.Errorf("clock_skew.node: unknown node %q", cs.Node)
		}
		if cs.Offset > time.Hour || cs.Offset < -time.Hour {
			return fmt.Errorf("clock_skew.offset: must be within 1h, got %s", cs.Offset)
		}
	}
	for _, a := range []struct {
		f string
		v []string
	}{{"crash", ev.Crash}, {"stop", ev.Stop}, {"restart", ev.Restart}, {"pause", ev.Pause}, {"resume", ev.Resume}} {
		if a.v == nil {
			continue
		}
		set++
		if len(a.v) == 0 {
			return fmt.Errorf("%s: must name at least one node, PoP or region", a.f)
		}
		for _, n := range a.v {
			if !nodes[n] && names[n] == "" {
				return fmt.Errorf("%s: unknown node, PoP or region %q", a.f, n)
			}
		}
	}
	switch set {
	case 0:
		return errors.New("at: event has no action (partition, cut, heal, flap, clock_skew, crash, stop, restart, pause or resume)")
	case 1:
		return nil
	}
	return errors.New("at: event has more than one action; write one event per action")
}

func checkPartition(names map[string]string, groups [][]string) error {
	if len(groups) == 0 {
		return errors.New("must list at least one group")
	}
	seen := map[string]bool{}
	for i, g := range groups {
		if err := checkGroup(names, g, false); err != nil {
			return fmt.Errorf("[%d]: %w", i, err)
		}
		for _, n := range g {
			if seen[n] {
				return fmt.Errorf("[%d]: %q is in two groups", i, n)
			}
			seen[n] = true
		}
	}
	return nil
}

// popRules converts the rules, overriding every rule's partition policy with
// policy unless it is empty (but a gcra rule's, which is always keep, and
// a concurrency rule's, which has none).
func (sc *Scenario) popRules(policy string) ([]pop.Rule, error) {
	rules := append([]config.Rule(nil), sc.Rules...)
	if policy != "" {
		for i := range rules {
			// A gcra rule keeps; a concurrency rule keeps its PoP's counts.
			if rules[i].Algorithm != "gcra" && rules[i].Kind != pop.Concurrency.String() {
				rules[i].OnPartition = policy
			}
		}
	}
	return config.PopRules(rules)
}

// minLimit is the least limit of r's windows: the most a request may cost.
func minLimit(r pop.Rule) uint64 {
	m := r.Limit
	for _, l := range r.More {
		m = min(m, l.Limit)
	}
	return m
}

func sortedKeys[V any](m map[string]V) []string {
	ks := make([]string, 0, len(m))
	for k := range m {
		ks = append(ks, k)
	}
	sort.Strings(ks)
	return ks
}
