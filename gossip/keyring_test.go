package gossip

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/hashicorp/memberlist"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/wire"
)

var (
	keyOld   = []byte("old-key-0123456789abcdef01234567")
	keyNew   = []byte("new-key-0123456789abcdef01234567")
	keyOther = []byte("another-key-0123")
)

// logSink collects log output, safe for concurrent writes.
type logSink struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *logSink) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *logSink) count(sub string) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return strings.Count(s.b.String(), sub)
}

func (s *logSink) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(s, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// nopHandler is the Handler of a bare transport that only sends.
type nopHandler struct{}

func (nopHandler) Receive(identity.PoPID, Kind, []byte) {}
func (nopHandler) Resync()                              {}
func (nopHandler) LocalState() []byte                   { return nil }
func (nopHandler) MergeState([]byte)                    {}

// injector is a bare memberlist transport of PoP eu/ams (same label as the
// PoP's members) that sends forged deltas straight to a member's address,
// over UDP and over TCP, without joining.
type injector struct {
	t  *testing.T
	ml *Memberlist
}

func newInjector(t *testing.T, keys [][]byte) *injector {
	t.Helper()
	ml, err := NewMemberlist(MemberlistConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: "evil", Bind: "127.0.0.1:0", SecretKeys: keys}, nopHandler{})
	require.NoError(t, err)
	t.Cleanup(func() { _ = ml.Close() })
	return &injector{t: t, ml: ml}
}

// inject sends a delta claiming count for key under the pop rule from a
// replica of eu/ams to the member at addr.
func (in *injector) inject(addr, key string, count uint64, reliable bool) {
	in.t.Helper()
	d := wire.Delta{
		Sender:  identity.Replica{PoPID: identity.PoPID{Region: "eu", PoP: "ams"}, Node: "evil", Incarnation: 1},
		SentAt:  time.Now().UnixNano(),
		Entries: []crdt.Entry{{Rule: "per-ip", Key: key, Window: time.Now().UnixNano() / int64(time.Hour), Count: count}},
	}
	msgs, err := wire.Encode(&d, 1000)
	require.NoError(in.t, err)
	require.Len(in.t, msgs, 1)
	host, ps, err := net.SplitHostPort(addr)
	require.NoError(in.t, err)
	port, err := strconv.Atoi(ps)
	require.NoError(in.t, err)
	to := &memberlist.Node{Name: "target", Addr: net.ParseIP(host), Port: uint16(port)}
	if reliable {
		err = in.ml.ml.SendReliable(to, msgs[0])
	} else {
		err = in.ml.ml.SendBestEffort(to, msgs[0])
	}
	require.NoError(in.t, err)
}

// TestMemberlistStrangerRefused: a keyed PoP refuses a stranger without its
// key, or with another key: the stranger cannot join (no member added on
// either side), and counts it sends straight to a member's address over UDP
// or TCP are dropped by memberlist before they reach the replicator. The
// same injection with the PoP's key is applied, so the refusal is the key's
// doing.
func TestMemberlistStrangerRefused(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	var logs logSink
	a := popNodeWith(t, ctx, ams, "ams-1", MemberlistConfig{SecretKeys: [][]byte{keyOld}, Logger: logs.logger()}, "")

	for _, tt := range []struct {
		name string
		keys [][]byte
	}{
		{"no key", nil},
		{"another key", [][]byte{keyOther}},
		{"another key ring", [][]byte{keyOther, keyNew}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			// No rejoins: every refusal logged after the join is the injector's.
			s := popNodeWith(t, ctx, ams, "stranger", MemberlistConfig{SecretKeys: tt.keys, RejoinInterval: time.Hour}, "", mlAddr(a))
			// NewMemberlist's join is synchronous: it has been tried and
			// refused by now.
			assert.Empty(t, a.rep.Members(), "the stranger became a member")
			assert.Empty(t, s.rep.Members())
			_, err := s.node.Decide(time.Now().UnixNano(), "per-ip", "stranger-decided", 1)
			require.NoError(t, err)
			s.rep.Flush()

			in := newInjector(t, tt.keys)
			udp, tcp := logs.count("Decrypt packet failed"), logs.count("failed to receive")
			in.inject(mlAddr(a), "injected-udp", 1000, false)
			in.inject(mlAddr(a), "injected-tcp", 1000, true)
			require.Eventually(t, func() bool {
				return logs.count("Decrypt packet failed") > udp && logs.count("failed to receive") > tcp
			}, 10*time.Second, poll, "the member to refuse both")
			assert.Empty(t, a.rep.Members())
			for _, k := range []string{"stranger-decided", "injected-udp", "injected-tcp"} {
				assert.Zero(t, total(a.node, "per-ip", k), "count applied: %s", k)
			}
		})
	}

	// Control: the same injection with the PoP's key reaches the counts.
	in := newInjector(t, [][]byte{keyOld})
	in.inject(mlAddr(a), "control-udp", 7, false)
	in.inject(mlAddr(a), "control-tcp", 9, true)
	require.Eventually(t, func() bool {
		return total(a.node, "per-ip", "control-udp") == 7 && total(a.node, "per-ip", "control-tcp") == 9
	}, 10*time.Second, poll, "the keyed injection applied")
	for _, k := range []string{"stranger-decided", "injected-udp", "injected-tcp"} {
		assert.Zero(t, total(a.node, "per-ip", k), "count applied: %s", k)
	}
}

// TestMemberlistKeyRotation rotates a running PoP's key in the documented
// steps, each taken on every member in turn (SetKeys, as a config reload
// does): add the new key second, move it first, drop the old one. The
// members stay joined and keep sharing counts at every step; a node that
// holds only the new key joins while the others accept both; after the old
// key is dropped a node that holds only the old key cannot join.
func TestMemberlistKeyRotation(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	ams := identity.PoPID{Region: "eu", PoP: "ams"}
	withKeys := func(keys ...[]byte) MemberlistConfig { return MemberlistConfig{SecretKeys: keys} }
	a := popNodeWith(t, ctx, ams, "ams-1", withKeys(keyOld), "")
	b := popNodeWith(t, ctx, ams, "ams-2", withKeys(keyOld), "", mlAddr(a))
	ms := []*member{a, b}
	ml := func(m *member) *Memberlist { return m.rep.popT.(*Memberlist) }
	joined := func(ms ...*member) func() bool {
		return func() bool {
			for _, m := range ms {
				if len(m.rep.Members()) != len(ms)-1 {
					return false
				}
			}
			return true
		}
	}
	require.Eventually(t, joined(a, b), 10*time.Second, poll, "two members")
	n := 0
	// shared decides once at each member and waits until every member
	// holds every count.
	shared := func(step string) {
		t.Helper()
		n++
		key := "step-" + strconv.Itoa(n)
		for _, m := range ms {
			_, err := m.node.Decide(time.Now().UnixNano(), "per-ip", key, 1)
			require.NoError(t, err)
		}
		require.Eventually(t, func() bool {
			for _, m := range ms {
				if total(m.node, "per-ip", key) != uint64(len(ms)) {
					return false
				}
			}
			return true
		}, 10*time.Second, poll, step+": counts shared")
		require.True(t, joined(ms...)(), "%s: a member was lost", step)
	}
	setKeys := func(m *member, keys ...[]byte) {
		t.Helper()
		changed, err := ml(m).SetKeys(keys)
		require.NoError(t, err)
		assert.True(t, changed)
		assert.Equal(t, keys, ml(m).Keys())
	}
	shared("before")

	for _, m := range ms {
		setKeys(m, keyOld, keyNew)
	}
	shared("new key added")
	setKeys(a, keyNew, keyOld)
	shared("new key first on one member")
	setKeys(b, keyNew, keyOld)
	shared("new key first everywhere")

	c := popNodeWith(t, ctx, ams, "ams-3", withKeys(keyNew), "", mlAddr(a))
	ms = append(ms, c)
	require.Eventually(t, joined(ms...), 10*time.Second, poll, "a node with only the new key joined")
	shared("three members")

	for _, m := range ms[:2] {
		setKeys(m, keyNew)
	}
	shared("old key dropped")
	changed, err := ml(a).SetKeys([][]byte{keyNew})
	require.NoError(t, err)
	assert.False(t, changed, "the same keys again change nothing")

	old := popNodeWith(t, ctx, ams, "old", withKeys(keyOld), "", mlAddr(a))
	assert.Empty(t, old.rep.Members(), "a node with only the old key joined")
	for _, m := range ms {
		assert.Len(t, m.rep.Members(), 2)
	}
	shared("after the refused join")
}

// TestMemberlistSetKeys: the keyring ends as asked whatever the change (the
// first key encrypts, the others are accepted, dropped keys are gone), bad key sets are refused, and a
// transport started without keys cannot start encrypting.
func TestMemberlistSetKeys(t *testing.T) {
	k1, k2, k3 := []byte("k1-0123456789abc"), []byte("k2-0123456789abcdefghijk"), []byte("k3-0123456789abcdef0123456789abc")
	ml, err := NewMemberlist(MemberlistConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: "x", Bind: "127.0.0.1:0", SecretKeys: [][]byte{k1, k2, k3}}, nopHandler{})
	require.NoError(t, err)
	defer ml.Close()
	assert.Equal(t, [][]byte{k1, k2, k3}, ml.Keys())
	for _, want := range [][][]byte{
		{k3, k1},     // a key in the middle dropped, the last moved first
		{k1, k2, k3}, // added back
		{k2},         // first and last dropped
		{k1, k3},     // the encrypting key dropped
		{k1, k3},
	} {
		_, err := ml.SetKeys(want)
		require.NoError(t, err)
		got := ml.Keys()
		assert.Equal(t, want[0], got[0], "the first key encrypts")
		assert.ElementsMatch(t, want, got)
	}
	_, err = ml.SetKeys(nil)
	assert.ErrorContains(t, err, "no secret key")
	_, err = ml.SetKeys([][]byte{k1, []byte("short")})
	assert.ErrorContains(t, err, "secret key 1 of 5 bytes")
	_, err = ml.SetKeys([][]byte{k1, k2, k1})
	assert.ErrorContains(t, err, "secret key 2 repeats key 0")
	assert.ElementsMatch(t, [][]byte{k1, k3}, ml.Keys(), "a refused set changes nothing")

	_, err = NewMemberlist(MemberlistConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: "y", Bind: "127.0.0.1:0", SecretKeys: [][]byte{k1, k1}}, nopHandler{})
	assert.ErrorContains(t, err, "secret key 1 repeats key 0")

	plain, err := NewMemberlist(MemberlistConfig{Self: identity.PoPID{Region: "eu", PoP: "ams"}, Name: "z", Bind: "127.0.0.1:0"}, nopHandler{})
	require.NoError(t, err)
	defer plain.Close()
	assert.Nil(t, plain.Keys())
	_, err = plain.SetKeys([][]byte{k1})
	assert.ErrorIs(t, err, ErrKeysAtRestart)
}
