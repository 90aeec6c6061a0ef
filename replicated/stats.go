package replicated

// What a node did with a received delta.

// ApplyStats counts what Apply did with a delta's entries.
type ApplyStats struct {
	Merged, Unchanged, Stale, Ahead, Full int
	// UnknownRule: the entry names a rule this node does not have.
	UnknownRule int
	// WrongScope: a node-scope rule, a pop-scope rule from outside the PoP, or
	// a sender that may not use the transport: via ScopePoP only other nodes of
	// the own PoP, via ScopeGlobal only PoP aggregates.
	WrongScope int
	// BadEntry: an empty or oversized key.
	BadEntry int
	// Echo: the delta came from this very replica, or is this PoP's own
	// aggregate of the current epoch.
	Echo int
	// Clamped: entries whose count was above the rule's limit, more than
	// one replica can admit in a window; they were merged as the limit.
	// These entries are also counted by their merge outcome.
	Clamped int
	// Blocks counts what was done with penalty blocks (package replicated/blocks).
	Blocks BlockApplyStats
	// Memos counts what was done with remembered decisions (package replicated/memos).
	Memos MemoApplyStats
	// Inflight counts what was done with members' in-flight counts
	// (package replicated/inflight).
	Inflight InflightApplyStats
}

// Rejected is the number of entries Apply refused for a reason that points
// at a misconfigured or hostile sender.
func (a ApplyStats) Rejected() int { return a.UnknownRule + a.WrongScope + a.BadEntry }

// Add adds b's counts to a's.
func (a *ApplyStats) Add(b ApplyStats) {
	a.Merged += b.Merged
	a.Unchanged += b.Unchanged
	a.Stale += b.Stale
	a.Ahead += b.Ahead
	a.Full += b.Full
	a.UnknownRule += b.UnknownRule
	a.WrongScope += b.WrongScope
	a.BadEntry += b.BadEntry
	a.Echo += b.Echo
	a.Clamped += b.Clamped
	a.Blocks.Add(b.Blocks)
	a.Memos.Add(b.Memos)
	a.Inflight.Add(b.Inflight)
}

// BlockApplyStats counts what Apply did with a delta's blocks. Blocks of an
// unknown rule, a wrong scope or a bad key are counted in ApplyStats'
// UnknownRule, WrongScope and BadEntry.
type BlockApplyStats struct {
	// Merged blocks were new or ended later than the one held.
	Merged int
	// Unchanged: the node held a block ending as late or later.
	Unchanged int
	// Expired blocks had ended already.
	Expired int
	// Ignored: the rule has no BlockFor on this node.
	Ignored int
	// Full: new blocks dropped because the block table was full.
	Full int
	// Clamped blocks ended later than now + BlockFor + MaxSkew; they were
	// merged as ending then (a faulty or hostile peer, or a longer BlockFor
	// there). Also counted by their merge outcome.
	Clamped int
}

// Add adds b's counts to a's.
func (a *BlockApplyStats) Add(b BlockApplyStats) {
	a.Merged += b.Merged
	a.Unchanged += b.Unchanged
	a.Expired += b.Expired
	a.Ignored += b.Ignored
	a.Full += b.Full
	a.Clamped += b.Clamped
}

// MemoApplyStats counts what Apply did with a delta's remembered decisions.
// Memos of an unknown rule or a wrong scope are counted in ApplyStats'
// UnknownRule and WrongScope.
type MemoApplyStats struct {
	// Merged memos were new or replaced one decided later.
	Merged int
	// Unchanged: the node remembered the same decision or one decided first.
	Unchanged int
	// Expired memos were over already.
	Expired int
	// Refused: new memos dropped because the table was full and they would
	// have been forgotten first.
	Refused int
	// Clamped memos were remembered until later than now + TTL + MaxSkew;
	// they were merged as ending then. Also counted by their merge outcome.
	Clamped int
}

// Add adds b's counts to a's.
func (a *MemoApplyStats) Add(b MemoApplyStats) {
	a.Merged += b.Merged
	a.Unchanged += b.Unchanged
	a.Expired += b.Expired
	a.Refused += b.Refused
	a.Clamped += b.Clamped
}

// InflightApplyStats counts what Apply did with a delta's in-flight counts.
// Counts of an unknown rule, a wrong scope or a bad key are counted in
// ApplyStats' UnknownRule, WrongScope and BadEntry.
type InflightApplyStats struct {
	// Merged counts were newer than the sender's count held.
	Merged int
	// Unchanged: the node held the sender's count of that version or a
	// newer one.
	Unchanged int
	// Refused: new counts dropped because the table of members' counts
	// was full.
	Refused int
	// Clamped counts were above the rule's limit, more than a member can
	// hold; they were merged as the limit. Also counted by their merge
	// outcome.
	Clamped int
}

// Add adds b's counts to a's.
func (a *InflightApplyStats) Add(b InflightApplyStats) {
	a.Merged += b.Merged
	a.Unchanged += b.Unchanged
	a.Refused += b.Refused
	a.Clamped += b.Clamped
}
