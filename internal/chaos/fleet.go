package chaos

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"gopkg.in/yaml.v3"

	"github.com/geolimit/geolimit/internal/faultproxy"
	"github.com/geolimit/geolimit/sim"
)

// node is one edge process of the live fleet and the ports it owns for
// its whole life (a restart takes the same ones).
type node struct {
	name, region, pop string
	regionIdx         int
	api               string // http://127.0.0.1:port
	natsPort          int
	clusterPort       int // 0: alone in its region
	gatewayPort       int // 0: one region only
	gossipPort        int // 0: alone in its PoP
	config            string
	logPath           string
	stateFile         string // "": it keeps none (scenario: state.nodes)

	mu      sync.Mutex
	cmd     *exec.Cmd
	pid     int
	killed  bool          // the harness stopped it (crash, stop)
	paused  bool          // the harness sent SIGSTOP
	exited  chan struct{} // closed when the current process has exited
	starts  int
	execAt  time.Time // when the current process was started
	incs    []uint64  // the incarnation of each start (0: not known)
	exitErr []string  // unexpected exits
}

// fleet is the live fleet: one edge process per node of the scenario, an
// embedded nats-server in each (a NATS cluster per region, gateways
// between regions through proxies), memberlist inside each PoP.
type fleet struct {
	dir     string
	bin     string
	nodes   []*node
	byName  map[string]*node
	regions []string
	// links[a][b] carry region a's gateway connections to each server of
	// region b.
	links [][][]*faultproxy.Proxy
	// target is the node each proxy of links forwards to.
	target map[*faultproxy.Proxy]*node
	logf   func(format string, args ...any)

	mu         sync.Mutex
	lead       time.Duration // how far ahead a restart is launched
	unexpected []Exit
	start      time.Time // the run's t = 0, for exit times
	// servers names the node of each embedded nats-server ID seen (a
	// start's server takes a new ID).
	servers map[string]string
}

func (f *fleet) setLead(d time.Duration) {
	f.mu.Lock()
	f.lead = d
	f.mu.Unlock()
}

func (f *fleet) getLead() time.Duration {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.lead
}

// Exit is a process exit the harness did not order.
type Exit struct {
	Node   string  `json:"node"`
	AtS    float64 `json:"at_s"`
	Status string  `json:"status"`
}

// freePorts returns n distinct free ports of 127.0.0.1, held open together
// while they are picked. They are drawn below the kernel's ephemeral range
// (net.ipv4.ip_local_port_range): a node binds its ports only when it
// starts, and again at each restart, and meanwhile the fleet's own
// outgoing connections (routes, gateways, the proxies) take local ports
// from that range, which once took a port a node was about to bind. When
// the range cannot be read, or too little lies below it, the kernel picks
// (port 0).
func freePorts(n int) ([]int, error) {
	ls := make([]net.Listener, 0, n)
	defer func() {
		for _, l := range ls {
			_ = l.Close()
		}
	}()
	out := make([]int, 0, n)
	lo, hi := belowEphemeral()
	rng := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), uint64(os.Getpid())))
	for tries := 0; len(out) < n && hi-lo >= 4*n && tries < 50*n; tries++ {
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(lo+rng.IntN(hi-lo)))
		if err != nil {
			continue // taken
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	for len(out) < n {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("chaos: free port: %w", err)
		}
		ls = append(ls, l)
		out = append(out, l.Addr().(*net.TCPAddr).Port)
	}
	return out, nil
}

// belowEphemeral returns the ports [lo, hi) to draw from: from 10000 up to
// the start of the ephemeral range (0, 0 when it cannot be read).
func belowEphemeral() (lo, hi int) {
	b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range")
	if err != nil {
		return 0, 0
	}
	f := strings.Fields(string(b))
	if len(f) != 2 {
		return 0, 0
	}
	first, err := strconv.Atoi(f[0])
	if err != nil || first <= 10000 {
		return 0, 0
	}
	return 10000, first
}

// buildEdge builds the edge binary of the module into dir.
func buildEdge(ctx context.Context, dir string) (string, error) {
	out, err := exec.CommandContext(ctx, "go", "env", "GOMOD").Output()
	if err != nil {
		return "", fmt.Errorf("chaos: go env GOMOD: %w", err)
	}
	mod := strings.TrimSpace(string(out))
	if mod == "" || mod == os.DevNull {
		return "", errors.New("chaos: run inside the geolimit module (it builds cmd/edge)")
	}
	bin := filepath.Join(dir, "edge")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/edge")
	cmd.Dir = filepath.Dir(mod)
	if b, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build ./cmd/edge: %w\n%s", err, b)
	}
	return bin, nil
}

// newFleet lays out the fleet of sc in dir: ports, proxies, configs. It
// starts nothing.
func newFleet(sc *sim.Scenario, dir, bin string, seed uint64, logf func(string, ...any)) (*fleet, error) {
	f := &fleet{dir: dir, bin: bin, byName: map[string]*node{}, logf: logf}
	var allPoPs []string
	regionNodes := map[string][]*node{}
	popNodes := map[string][]*node{}
	for ri, rg := range sc.Topology {
		f.regions = append(f.regions, rg.Region)
		for _, p := range rg.PoPs {
			allPoPs = append(allPoPs, rg.Region+"/"+p.Name)
			for k := 1; k <= p.Nodes; k++ {
				n := &node{name: p.Name + "-" + strconv.Itoa(k), region: rg.Region, pop: p.Name, regionIdx: ri}
				f.nodes = append(f.nodes, n)
				f.byName[n.name] = n
				regionNodes[rg.Region] = append(regionNodes[rg.Region], n)
				popNodes[p.Name] = append(popNodes[p.Name], n)
			}
		}
	}
	if len(f.nodes) > 32 {
		return nil, fmt.Errorf("chaos: topology: a live run takes at most 32 nodes, got %d", len(f.nodes))
	}
	ports, err := freePorts(5 * len(f.nodes))
	if err != nil {
		return nil, err
	}
	for i, n := range f.nodes {
		p := ports[5*i:]
		n.api = "http://127.0.0.1:" + strconv.Itoa(p[0])
		n.natsPort = p[1]
		if len(regionNodes[n.region]) > 1 {
			n.clusterPort = p[2]
		}
		if len(f.regions) > 1 {
			n.gatewayPort = p[3]
		}
		if len(popNodes[n.pop]) > 1 {
			n.gossipPort = p[4]
		}
		n.logPath = filepath.Join(dir, n.name+".log")
		n.config = filepath.Join(dir, n.name+".yaml")
	}
	// Gateway proxies: one per (source region, server of target region).
	lat, jit := sc.Network.InterRegion.Latency, sc.Network.InterRegion.Jitter
	f.links = make([][][]*faultproxy.Proxy, len(f.regions))
	f.target = map[*faultproxy.Proxy]*node{}
	for a, ra := range f.regions {
		f.links[a] = make([][]*faultproxy.Proxy, len(f.regions))
		for b, rb := range f.regions {
			if a == b {
				continue
			}
			for _, n := range regionNodes[rb] {
				seed++
				p, err := faultproxy.New(faultproxy.Config{Target: "127.0.0.1:" + strconv.Itoa(n.gatewayPort), Source: ra, Latency: lat, Jitter: jit, Seed: seed})
				if err != nil {
					f.closeProxies()
					return nil, fmt.Errorf("chaos: proxy: %w", err)
				}
				f.links[a][b] = append(f.links[a][b], p)
				f.target[p] = n
			}
		}
	}
	keeps := map[string]bool{}
	for _, name := range sc.State.Nodes {
		keeps[name] = true
	}
	for _, n := range f.nodes {
		if keeps[n.name] || keeps[n.pop] || keeps[n.region] {
			n.stateFile = filepath.Join(dir, n.name+".state")
		}
	}
	for _, n := range f.nodes {
		var expected []string
		for _, p := range allPoPs {
			if p != n.region+"/"+n.pop {
				expected = append(expected, p)
			}
		}
		if err := f.writeConfig(sc, n, regionNodes[n.region], popNodes[n.pop], expected); err != nil {
			f.closeProxies()
			return nil, err
		}
	}
	return f, nil
}

func (f *fleet) closeProxies() {
	for _, row := range f.links {
		for _, ps := range row {
			for _, p := range ps {
				p.Close()
			}
		}
	}
}

// writeConfig writes node n's edge config and its nats-server file.
func (f *fleet) writeConfig(sc *sim.Scenario, n *node, region, pop []*node, expected []string) error {
	var nc strings.Builder
	fmt.Fprintf(&nc, "server_name: %q\nlisten: \"127.0.0.1:%d\"\n", n.name, n.natsPort)
	if n.clusterPort != 0 {
		fmt.Fprintf(&nc, "cluster {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  routes: [", n.region, n.clusterPort)
		for _, m := range region {
			if m != n {
				fmt.Fprintf(&nc, "\n    \"nats-route://127.0.0.1:%d\"", m.clusterPort)
			}
		}
		nc.WriteString("\n  ]\n}\n")
	}
	if n.gatewayPort != 0 {
		// Servers learn a remote gateway's advertised URL; one that
		// refuses connections keeps every link on the proxies.
		fmt.Fprintf(&nc, "gateway {\n  name: %q\n  listen: \"127.0.0.1:%d\"\n  advertise: \"127.0.0.1:1\"\n  gateways: [", n.region, n.gatewayPort)
		for b, rb := range f.regions {
			if b == n.regionIdx {
				continue
			}
			var urls []string
			for _, p := range f.links[n.regionIdx][b] {
				urls = append(urls, strconv.Quote("nats://"+p.Addr()))
			}
			fmt.Fprintf(&nc, "\n    {name: %q, urls: [%s]}", rb, strings.Join(urls, ", "))
		}
		nc.WriteString("\n  ]\n}\n")
	}
	natsConf := filepath.Join(f.dir, n.name+".nats.conf")
	if err := os.WriteFile(natsConf, []byte(nc.String()), 0o600); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	settings := sc.Replication.Settings
	settings.ExpectedPoPs = expected
	cfg := map[string]any{
		"node":        map[string]string{"id": n.name, "region": n.region, "pop": n.pop},
		"listen":      map[string]string{"api": strings.TrimPrefix(n.api, "http://")},
		"nats":        map[string]any{"embedded": map[string]string{"config_file": natsConf}},
		"replication": settings,
		"rules":       sc.Rules,
	}
	if n.stateFile != "" {
		cfg["state"] = map[string]string{"file": n.stateFile, "interval": sc.State.Interval.String()}
	}
	if sc.Replication.MaxKeys > 0 {
		cfg["limits"] = map[string]int{"max_keys": sc.Replication.MaxKeys}
	}
	if n.gossipPort != 0 {
		var join []string
		for _, m := range pop {
			if m != n {
				join = append(join, "127.0.0.1:"+strconv.Itoa(m.gossipPort))
			}
		}
		cfg["gossip"] = map[string]any{"bind": "127.0.0.1:" + strconv.Itoa(n.gossipPort), "join": join}
	}
	b, err := yaml.Marshal(cfg)
	if err != nil {
		return fmt.Errorf("chaos: config of %s: %w", n.name, err)
	}
	if err := os.WriteFile(n.config, b, 0o600); err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	return nil
}

// startNode starts n's process (again), its output appended to its log.
func (f *fleet) startNode(n *node) error {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd != nil {
		return fmt.Errorf("chaos: %s is already running (pid %d)", n.name, n.pid)
	}
	lf, err := os.OpenFile(n.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o600)
	if err != nil {
		return fmt.Errorf("chaos: %w", err)
	}
	cmd := exec.Command(f.bin, "-config", n.config, "-watch-interval", "0", "-log-format", "json")
	cmd.Stdout, cmd.Stderr = lf, lf
	// Its own process group: a Ctrl-C at the terminal reaches the harness
	// only, which stops every node by its PID.
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	if err := cmd.Start(); err != nil {
		_ = lf.Close()
		return fmt.Errorf("chaos: start %s: %w", n.name, err)
	}
	n.cmd, n.pid, n.killed, n.paused = cmd, cmd.Process.Pid, false, false
	n.execAt = time.Now()
	n.starts++
	n.incs = append(n.incs, 0)
	exited := make(chan struct{})
	n.exited = exited
	go func() {
		err := cmd.Wait()
		_ = lf.Close()
		n.mu.Lock()
		expected := n.killed
		n.cmd = nil
		n.mu.Unlock()
		close(exited)
		if !expected {
			status := "exit 0"
			if err != nil {
				status = err.Error()
			}
			f.mu.Lock()
			f.unexpected = append(f.unexpected, Exit{Node: n.name, AtS: round3(time.Since(f.start).Seconds()), Status: status})
			f.mu.Unlock()
			f.logf("%s exited unexpectedly: %s", n.name, status)
		}
	}()
	return nil
}

// noteIncarnation records the incarnation of n's current start and its
// nats-server's ID, read from GET /v1/status once it answers; it records
// no incarnation when n was started again in between.
func (f *fleet) noteIncarnation(ctx context.Context, n *node) error {
	n.mu.Lock()
	start := n.starts
	n.mu.Unlock()
	var st struct {
		Incarnation  uint64 `json:"incarnation"`
		NATSServerID string `json:"nats_server_id"`
	}
	if err := getJSON(ctx, n.api+"/v1/status", &st); err != nil {
		return fmt.Errorf("chaos: incarnation of %s: %w", n.name, err)
	}
	if st.NATSServerID != "" {
		f.mu.Lock()
		if f.servers == nil {
			f.servers = map[string]string{}
		}
		f.servers[st.NATSServerID] = n.name
		f.mu.Unlock()
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.starts == start && start > 0 {
		n.incs[start-1] = st.Incarnation
	}
	return nil
}

// incarnations returns the incarnations of every node's starts, for the
// simulator to give its nodes the same (sim.Options.Incarnations).
func (f *fleet) incarnations() map[string][]uint64 {
	out := map[string][]uint64{}
	for _, n := range f.nodes {
		n.mu.Lock()
		out[n.name] = append([]uint64(nil), n.incs...)
		n.mu.Unlock()
	}
	return out
}

// signal sends sig to n's running process; kill marks the exit as ordered.
func (n *node) signal(sig syscall.Signal, kill bool) (chan struct{}, bool) {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return nil, false
	}
	if kill {
		n.killed = true
		if n.paused {
			_ = syscall.Kill(n.pid, syscall.SIGCONT)
		}
	}
	switch sig {
	case syscall.SIGSTOP:
		n.paused = true
	case syscall.SIGCONT:
		n.paused = false
	}
	_ = syscall.Kill(n.pid, sig)
	return n.exited, true
}

// crash kills n with SIGKILL and waits for it to be gone.
func (f *fleet) crash(n *node) {
	if done, ok := n.signal(syscall.SIGKILL, true); ok {
		<-done
	}
}

// stopGrace bounds a clean stop: a node still running after it is killed.
const stopGrace = 10 * time.Second

// stop stops n cleanly with SIGTERM (its last flush and goodbye go out)
// and waits for it to be gone, at most stopGrace before it kills it.
func (f *fleet) stop(n *node) {
	done, ok := n.signal(syscall.SIGTERM, true)
	if !ok {
		return
	}
	t := time.NewTimer(stopGrace)
	defer t.Stop()
	select {
	case <-done:
	case <-t.C:
		f.logf("%s still running %s after SIGTERM; killed", n.name, stopGrace)
		f.crash(n)
	}
}

// stopAll stops every node by its PID (SIGKILL: the run is over, or
// failed) and every proxy.
func (f *fleet) stopAll() {
	for _, n := range f.nodes {
		f.crash(n)
	}
	f.closeProxies()
}

func (n *node) running() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.cmd != nil
}

func (n *node) pidNow() int {
	n.mu.Lock()
	defer n.mu.Unlock()
	if n.cmd == nil {
		return 0
	}
	return n.pid
}

// cutRegions cuts (or heals) every gateway link between regions a and b,
// both ways.
func (f *fleet) cutRegions(a, b int, cut bool) {
	for _, p := range f.links[a][b] {
		p.SetCut(cut)
	}
	for _, p := range f.links[b][a] {
		p.SetCut(cut)
	}
}

// cutOneWay cuts region a's links to region b only.
func (f *fleet) cutOneWay(a, b int) {
	for _, p := range f.links[a][b] {
		p.SetCut(true)
	}
}

func (f *fleet) healAll() {
	for a := range f.links {
		for b := range f.links[a] {
			for _, p := range f.links[a][b] {
				p.SetCut(false)
			}
		}
	}
}

// status is the part of GET /v1/status the harness reads.
type status struct {
	Members    []struct{} `json:"members"` // the PoP's other live members
	RemotePoPs []struct {
		LastHeardMS int64 `json:"last_heard_ms"` // -1: never heard
		Partitioned bool  `json:"partitioned"`
	} `json:"remote_pops"`
	Partitions []string `json:"partitions"`
}

// heard reports whether every remote PoP in st was heard and is not
// partitioned.
func (st *status) heard() bool {
	for _, p := range st.RemotePoPs {
		if p.LastHeardMS < 0 || p.Partitioned {
			return false
		}
	}
	return len(st.Partitions) == 0
}

var httpc = &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 16, IdleConnTimeout: 30 * time.Second}}

func getJSON(ctx context.Context, url string, v any) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	res, err := httpc.Do(req)
	if err != nil {
		return err
	}
	defer res.Body.Close()
	b, err := io.ReadAll(io.LimitReader(res.Body, 4<<20))
	if err != nil {
		return err
	}
	if res.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %s", url, res.Status)
	}
	return json.Unmarshal(b, v)
}

// waitReady waits until every running node answers, knows the other
// members of its PoP and hears every other PoP.
func (f *fleet) waitReady(ctx context.Context, timeout time.Duration, npops int, popSize map[string]int) error {
	deadline := time.Now().Add(timeout)
	var last string
	for {
		ok := true
		for _, n := range f.nodes {
			if !n.running() {
				continue
			}
			var st status
			if err := getJSON(ctx, n.api+"/v1/status", &st); err != nil {
				ok, last = false, fmt.Sprintf("%s: %v", n.name, err)
				break
			}
			if len(st.Members) != popSize[n.pop]-1 || len(st.RemotePoPs) != npops-1 || !st.heard() {
				ok, last = false, fmt.Sprintf("%s: %d other members, %d remote PoPs, partitioned %v", n.name, len(st.Members), len(st.RemotePoPs), st.Partitions)
				break
			}
		}
		if ok {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: fleet not ready after %s: %s", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// waitAnswers waits until n's API answers /healthz.
func waitAnswers(ctx context.Context, n *node, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, n.api+"/healthz", nil)
		if res, err := httpc.Do(req); err == nil {
			_ = res.Body.Close()
			if res.StatusCode == http.StatusOK {
				return nil
			}
		}
		if !n.running() {
			return fmt.Errorf("chaos: %s exited at start: %s", n.name, logTail(n.logPath))
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("chaos: %s does not answer after %s (see %s)", n.name, timeout, n.logPath)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// logTail returns the last lines of the log at path (the run's directory
// is removed when it fails).
func logTail(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return err.Error()
	}
	lines := strings.Split(strings.TrimSpace(string(b)), "\n")
	return strings.Join(lines[max(len(lines)-3, 0):], " | ")
}

func round3(x float64) float64 { return float64(int64(x*1000+0.5)) / 1000 }

// reconnection polls the proxies until, from every region to every other,
// they carry a gateway connection for every running node of the source
// region (each nats-server keeps one to every other region), and returns
// the seconds from since for each such pair of region indexes, and the
// longest (-1 when not within 30s or when ctx ends first).
func (f *fleet) reconnection(ctx context.Context, since time.Time) (map[[2]int]float64, float64) {
	deadline := since.Add(30 * time.Second)
	out := map[[2]int]float64{}
	for {
		running := make([]int, len(f.regions))
		for _, n := range f.nodes {
			if n.running() {
				running[n.regionIdx]++
			}
		}
		all := true
		for a := range f.links {
			for b, ps := range f.links[a] {
				if a == b {
					continue
				}
				if _, ok := out[[2]int{a, b}]; ok {
					continue
				}
				carried := 0
				for _, p := range ps {
					carried += p.Carried()
				}
				if carried >= running[a] {
					out[[2]int{a, b}] = round3(time.Since(since).Seconds())
				} else {
					all = false
				}
			}
		}
		if all {
			var longest float64
			for _, d := range out {
				longest = max(longest, d)
			}
			return out, longest
		}
		if time.Now().After(deadline) {
			return out, -1
		}
		select {
		case <-ctx.Done():
			return out, -1
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// gatewayLink is one server's gateway from region from to region to.
type gatewayLink struct {
	from, to int
	server   string // its nats-server's ID
}

// gatewaysTo returns the gateways other regions' servers have now to the
// servers of gone (to be read before they are killed).
func (f *fleet) gatewaysTo(gone []string) []gatewayLink {
	goneSet := map[*node]bool{}
	for _, g := range gone {
		goneSet[f.byName[g]] = true
	}
	var out []gatewayLink
	for a := range f.links {
		for b, ps := range f.links[a] {
			for _, p := range ps {
				if goneSet[f.target[p]] {
					for _, id := range p.Servers() {
						out = append(out, gatewayLink{from: a, to: b, server: id})
					}
				}
			}
		}
	}
	return out
}

// gatewaysBack polls the proxies until each of lost is carried again, to a
// server of its region other than gone's, and returns, for each, the node
// whose server it is and the seconds from since (-1 when not within 30s or
// when ctx ends first). gone's nodes are killed already.
func (f *fleet) gatewaysBack(ctx context.Context, lost []gatewayLink, gone []string, since time.Time) []GatewayLost {
	// A gone node started again takes gateways again: a server that
	// reconnects to it has its link back.
	goneStarts := map[*node]int{}
	for _, g := range gone {
		n := f.byName[g]
		n.mu.Lock()
		goneStarts[n] = n.starts
		n.mu.Unlock()
	}
	reachable := func(n *node) bool {
		s, ok := goneStarts[n]
		if !ok {
			return true
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.starts > s
	}
	out := make([]GatewayLost, len(lost))
	f.mu.Lock()
	for i, l := range lost {
		out[i] = GatewayLost{Node: f.servers[l.server], Region: f.regions[l.to], BackS: -1}
	}
	f.mu.Unlock()
	deadline := since.Add(30 * time.Second)
	for left := len(lost); left > 0; {
		for i, l := range lost {
			if out[i].BackS >= 0 {
				continue
			}
			for _, p := range f.links[l.from][l.to] {
				if reachable(f.target[p]) && slices.Contains(p.Servers(), l.server) {
					out[i].BackS = round3(time.Since(since).Seconds())
					left--
					break
				}
			}
		}
		if left == 0 || time.Now().After(deadline) {
			break
		}
		select {
		case <-ctx.Done():
			return out
		case <-time.After(20 * time.Millisecond):
		}
	}
	return out
}

// detection polls the running members of the PoPs of gone until none of
// them lists a node of gone among its members, and returns the seconds
// from since (-1 after 30s or when ctx ends first).
func (f *fleet) detection(ctx context.Context, gone []string, since time.Time) float64 {
	goneSet := map[string]bool{}
	pops := map[string]bool{}
	for _, g := range gone {
		goneSet[g] = true
		pops[f.byName[g].pop] = true
	}
	// The members (name#incarnation) of gone listed at the first poll: a
	// restarted node comes back under another incarnation.
	var target map[string]bool
	deadline := since.Add(30 * time.Second)
	for time.Now().Before(deadline) {
		first := target == nil
		if first {
			target = map[string]bool{}
		}
		listed := false
		for _, n := range f.nodes {
			if !pops[n.pop] || goneSet[n.name] || !n.running() {
				continue
			}
			var st struct {
				Members []struct {
					Name string `json:"name"`
				} `json:"members"`
			}
			if getJSON(ctx, n.api+"/v1/status", &st) != nil {
				listed = true // not answering: not known yet
				break
			}
			for _, m := range st.Members {
				name, _, _ := strings.Cut(m.Name, "#")
				if first && goneSet[name] {
					target[m.Name] = true
				}
				if target[m.Name] {
					listed = true
				}
			}
		}
		if !listed {
			return round3(time.Since(since).Seconds())
		}
		select {
		case <-ctx.Done():
			return -1
		case <-time.After(50 * time.Millisecond):
		}
	}
	return -1
}
