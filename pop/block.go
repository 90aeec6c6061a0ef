package pop

import (
	"cmp"
	"slices"
	"time"

	"github.com/geolimit/geolimit/crdt"
	"github.com/geolimit/geolimit/replicated/blocks"
	"github.com/geolimit/geolimit/wire"
)

// The penalty box.
//
// A rule with BlockFor > 0 puts a key it denies (a counted decision, over
// the limit) in the penalty box until now + BlockFor: every request for the
// key is denied until then (Decision.Blocked, RetryAfter the time left),
// whatever its count, and a denial while blocked does not extend the block.
// In shadow mode the block is set and reported the same way (ShadowDenied
// and Blocked: it would block) but nothing is denied. Unsure denials
// (unsure.go) never start a block.
//
// The block is a max register per (rule, key) (blocks.Table), replicated
// with the counts and as far as the rule's scope: not at all for node
// scope, to the PoP's members for pop scope (Batch.Local), and to the other
// PoPs too for global scope (Batch.PoP). The node that sets a block sends it
// at the next Flush; AntiEntropy and State re-send every block held, so a
// lost message, a new member or a restarted node converges. A block from a
// peer ends at most BlockFor plus MaxSkew after the receiver's now (longer
// ones are clamped and counted); a peer's block for a rule without BlockFor
// here is ignored. The table is capped at the store's MaxKeys and Tick drops
// the blocks that ended.

// MaxBlockFor is the longest Rule.BlockFor.
const MaxBlockFor = 30 * 24 * time.Hour

// guard decides what a rule with a penalty box or DenyUnsure may decide
// before counting: a blocked key, or a node not synced yet. done is false
// when the decision is left to the counts.
func (n *Node) guard(now int64, r *ruleState, key string) (d Decision, done bool) {
	if r.BlockFor != 0 {
		if until := n.blocks.Until(r.id, key); until > now {
			left := time.Duration(until - now)
			return Decision{Limit: r.Limit, Blocked: true, RetryAfter: left, Reset: left}, true
		}
	}
	if n.notSynced(r) {
		return unsureDecision(r, UnsureNotSynced), true
	}
	return Decision{}, false
}

// afterGuard completes a counted or peeked decision of a guarded rule: a
// DenyUnsure rule denies an untracked key, and a counted denial starts a
// block.
func (n *Node) afterGuard(now int64, r *ruleState, key string, count bool, d *Decision) {
	if d.Untracked && r.OnUnsure == DenyUnsure {
		*d = unsureDecision(r, UnsureStoreFull)
		d.Untracked = true
		return
	}
	if d.Allowed || !count || r.BlockFor == 0 {
		return
	}
	if n.blocks.Raise(r.id, key, now+int64(r.BlockFor), r.Scope != ScopeNode) == blocks.Full {
		return // no room: the counts alone limit the key
	}
	d.Blocked, d.BlockStarted = true, true
	d.RetryAfter = r.BlockFor
	d.Reset = max(d.Reset, r.BlockFor)
}

// applyBlocks merges d's blocks (received via scope via from an accepted
// sender) into the block table.
func (blockPart) apply(n *Node, now int64, d *wire.Delta, via Scope, st *ApplyStats) {
	rs := n.rules.Load()
	bs := blocks.Section.Items(d)
	for i := range bs {
		b := &bs[i]
		r, ok := rs.byName[b.Rule]
		switch {
		case !ok:
			st.UnknownRule++
			continue
		case r.Scope == ScopeNode || (r.Scope == ScopePoP && via != ScopePoP):
			st.WrongScope++
			continue
		case len(b.Key) == 0 || len(b.Key) > crdt.MaxKeyLen:
			st.BadEntry++
			continue
		case r.BlockFor == 0:
			st.Blocks.Ignored++
			continue
		case b.Until <= now:
			st.Blocks.Expired++
			continue
		}
		until := b.Until
		if bound := now + int64(r.BlockFor) + n.maxSkew; until > bound {
			until = bound
			st.Blocks.Clamped++
		}
		switch n.blocks.Raise(r.id, b.Key, until, false) {
		case blocks.Raised:
			st.Blocks.Merged++
		case blocks.Unchanged:
			st.Blocks.Unchanged++
		case blocks.Full:
			st.Blocks.Full++
		}
	}
}

// flushBlocks adds the blocks this node set since the last flush to b:
// pop- and global-scope ones to Local (when local), global-scope ones to PoP
// (when pub).
func (blockPart) flush(n *Node, rs *ruleSet, _ int64, b *Batch, local, pub bool) {
	n.blocks.Drain(func(id crdt.RuleID, key string, until int64) {
		r := rs.byID[id]
		if r == nil || r.Scope == ScopeNode {
			return
		}
		blk := blocks.Block{Rule: r.Name, Key: key, Until: until}
		if local {
			blocks.Section.Append(&b.Local, blk)
		}
		if pub && r.Scope == ScopeGlobal {
			blocks.Section.Append(&b.PoP, blk)
		}
	})
}

// liveBlocks returns every block held that ends after now, sorted by rule
// and key (the simulator's output must not depend on map order);
// node-scope ones and blocks of removed rules are left out.
func (n *Node) liveBlocks(rs *ruleSet, now int64) []blocks.Block {
	var out []blocks.Block
	n.blocks.Each(now, func(id crdt.RuleID, key string, until int64) {
		if r := rs.byID[id]; r != nil && r.Scope != ScopeNode {
			out = append(out, blocks.Block{Rule: r.Name, Key: key, Until: until})
		}
	})
	slices.SortFunc(out, func(a, b blocks.Block) int { return cmp.Or(cmp.Compare(a.Rule, b.Rule), cmp.Compare(a.Key, b.Key)) })
	return out
}

// antiEntropyBlocks adds every live block to b: pop and global ones to
// Local, global ones whose key owns accepts to PoP (when it has an epoch).
func (blockPart) antiEntropy(n *Node, rs *ruleSet, now int64, b *Batch, owns func(string) bool) {
	live := n.liveBlocks(rs, now)
	var pub []blocks.Block
	for _, blk := range live {
		if r := rs.byName[blk.Rule]; b.PoP.Epoch != 0 && r.Scope == ScopeGlobal && (owns == nil || owns(blk.Key)) {
			pub = append(pub, blk)
		}
	}
	blocks.Section.Append(&b.Local, live...)
	blocks.Section.Append(&b.PoP, pub...)
}

// BlockedUntil returns when key's penalty block under rule ends (Unix
// nanoseconds), or 0 when it is not blocked at now.
func (n *Node) BlockedUntil(now int64, rule, key string) int64 {
	r, ok := n.rules.Load().byName[rule]
	if !ok {
		return 0
	}
	if until := n.blocks.Until(r.id, key); until > now {
		return until
	}
	return 0
}

// penalize is Penalize for rule r.
func (n *Node) penalize(now int64, r *ruleState, key string, d *Decision) {
	if r.BlockFor == 0 || d.Blocked || d.Unsure != UnsureNone || (d.Allowed && !d.ShadowDenied) ||
		len(key) == 0 || len(key) > crdt.MaxKeyLen {
		return
	}
	allowed := d.Allowed
	d.Allowed = false
	n.afterGuard(now, r, key, true, d)
	d.Allowed = allowed
}

// blockPart is the penalty box as the node composes it (components.go).
type blockPart struct{}

func (blockPart) section() sectionLen { return blocks.Section }

// from: any replica may send the blocks it holds (a block only ever
// denies); apply checks each against its rule.
func (blockPart) from(Scope) bool { return true }

func (blockPart) state(n *Node, rs *ruleSet, now int64, self *wire.Delta) {
	blocks.Section.Set(self, n.liveBlocks(rs, now))
}

func (blockPart) sweep(n *Node, now int64) { n.blocks.Sweep(now) }
