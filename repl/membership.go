package repl

import (
	"slices"
	"sort"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/replicated"
	"github.com/geolimit/geolimit/replicated/modes"
	"github.com/geolimit/geolimit/wire"
)

// Membership: the PoP's members as the membership layer sees them, key
// ownership by rendezvous hashing over them, and the state a joining
// member learns at once.

// SetMembers tells the Core the PoP's live members other than itself (their
// MemberNames), as the membership layer sees them. Key ownership, heartbeat
// turns and who answers for the PoP follow this view; when it changes, the
// totals of keys that moved are published by their new owners, and a new
// member is sent this node's own counts.
func (c *Core) SetMembers(now int64, others []string) {
	oldH, oldRank := c.memberH, c.rank
	old := c.members
	c.membersKnown = true
	if !c.setMembers(others) {
		c.maybeStartEpoch(now)
		c.doWork(now)
		return
	}
	c.updateAllowance(now, true)
	c.maybeStartEpoch(now)
	c.stats.MembersChanges++
	if c.name == MemberName(c.node.Self()) {
		// In-flight counts of members gone no longer count (members are
		// named by MemberName, unless the membership layer names them
		// otherwise: then their counts lapse at their TTL).
		c.node.KeepMembers(func(r identity.Replica) bool {
			_, ok := slices.BinarySearch(c.members, MemberName(r))
			return !r.SamePoP(c.node.Self()) || ok
		})
	}
	// Tell the members, who then re-send their owned totals too: while views
	// differ a member's forward can reach no speaker (a member that lost
	// another for a moment and got it back), and the members whose own view
	// did not change would not know to repair it.
	c.want |= wantAnnounce
	for _, m := range c.members {
		if _, ok := slices.BinarySearch(old, m); !ok {
			c.want |= wantLocalAE
			break
		}
	}
	if c.cfg.GlobalLink && c.epoch != 0 {
		// Publish at once the totals of the keys this node took over.
		movedIn := func(key string) bool {
			kh := hashString(key)
			return c.owner(c.memberH, kh) == c.rank && (len(oldH) == 0 || c.owner(oldH, kh) != oldRank)
		}
		b := c.node.AntiEntropyPart(now, movedIn, 0, 1, false)
		b.Local.Entries = nil
		b.Local.ClearSections()
		c.emitBatch(&b, true, true)
		// And all owned totals soon: while views differ, a member may have
		// forwarded totals to a speaker that did not take them, or that died
		// before it spoke.
		c.scheduleResend(now)
	}
	c.doWork(now)
}

// setMembers installs a membership view and reports whether it changed.
func (c *Core) setMembers(others []string) bool {
	ms := make([]string, 0, len(others)+1)
	ms = append(ms, c.name)
	for _, m := range others {
		if m != c.name && m != "" {
			ms = append(ms, m)
		}
	}
	sort.Strings(ms)
	ms = slices.Compact(ms)
	if slices.Equal(ms, c.members) {
		return false
	}
	c.members = ms
	c.memberH = make([]uint64, len(ms))
	for i, m := range ms {
		c.memberH[i] = hashString(m)
		if m == c.name {
			c.rank = i
		}
	}
	return true
}

// SetMemberName sets the name this node goes by in the PoP's membership,
// when the membership layer names it otherwise than MemberName(self). Every
// member must know every other by the same name, or two members may both
// publish a key, or none.
func (c *Core) SetMemberName(name string) {
	if name == "" || name == c.name {
		return
	}
	others := slices.DeleteFunc(slices.Clone(c.members), func(m string) bool { return m == c.name })
	c.name = name
	c.members = nil
	c.setMembers(others)
}

// Members returns the PoP's members as this node sees them (self included).
func (c *Core) Members() []string { return slices.Clone(c.members) }

// ownsKey reports whether this node publishes key's PoP totals: the member
// with the highest rendezvous hash of (member, key) does, so a membership
// change moves only the keys of the members that came or went.
func (c *Core) ownsKey(key string) bool {
	if len(c.members) <= 1 {
		return true
	}
	return c.owner(c.memberH, hashString(key)) == c.rank
}

// ownsTask reports whether this node does a PoP-wide task named task.
func (c *Core) ownsTask(task string) bool {
	return len(c.members) <= 1 || c.owner(c.memberH, hashString("\x00"+task)) == c.rank
}

// owner returns the index of the member (by hashes hs) that owns hash kh.
func (c *Core) owner(hs []uint64, kh uint64) int {
	best, bi := uint64(0), 0
	for i, mh := range hs {
		if s := mix64(kh ^ mh); i == 0 || s > best {
			best, bi = s, i
		}
	}
	return bi
}

// LocalState is the state a joining member learns at once (memberlist
// push/pull): every count this node holds of the live windows, one delta per
// replica, all carrying the PoP epoch, and the rules' modes set at run time
// (modes.go); a node holding nothing yet still sends one empty delta so the
// joiner learns the epoch.
func (c *Core) LocalState(now int64) []wire.Delta {
	st := c.node.State(now)
	for i := range st {
		st[i].Epoch = c.epoch
	}
	if ms := c.node.Modes(); len(ms) > 0 {
		d := wire.Delta{Sender: c.self, SentAt: now, Epoch: c.epoch}
		modes.Section.Set(&d, ms)
		st = append(st, d)
	}
	if len(st) == 0 {
		return []wire.Delta{*c.empty(now)}
	}
	return st
}

// MergeState merges one delta of a member's LocalState: counts of the own
// PoP's members through the PoP scope, aggregates through the global scope.
func (c *Core) MergeState(now int64, d *wire.Delta) replicated.ApplyStats {
	if d.Sender.SamePoP(c.self) && d.Sender != c.self {
		c.popMerged = true // a member's view of the PoP (startup.go)
	}
	c.learnEpoch(now, d.Epoch)
	if ms := modes.Section.Items(d); len(ms) > 0 && d.Sender.SamePoP(c.self) && !d.Sender.IsPoP() {
		c.node.MergeModes(now, modes.Source{PoP: c.selfPoP, Member: true}, ms)
	}
	var st replicated.ApplyStats
	if hasContent(d) {
		via := replicated.ScopeGlobal
		if d.Sender.SamePoP(c.self) && !d.Sender.IsPoP() {
			via = replicated.ScopePoP
		}
		if via == replicated.ScopeGlobal && d.Sender.SamePoP(c.self) && c.epoch == 0 {
			c.stats.StateDropped++
		} else {
			st = c.node.ApplyFrom(now, d, via, nil)
		}
	}
	c.doWork(now)
	return st
}

// hashString is FNV-1a: the same on every node and every run, so members
// agree on ownership.
func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

// mix64 is a bijective finaliser (splitmix64's).
func mix64(x uint64) uint64 {
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
