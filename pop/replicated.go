package pop

import "github.com/geolimit/geolimit/replicated"

// The names the node shares with its replication layer (package replicated).
type (
	// Scope says how far a rule's counts travel.
	Scope = replicated.Scope
	// Batch is what a node sends.
	Batch = replicated.Batch
	// Allowance is what the replication layer tells a node about one
	// scope's replication (SetAllowance).
	Allowance = replicated.Allowance
	// ApplyStats counts what Apply did with a delta's entries.
	ApplyStats = replicated.ApplyStats
	// BlockApplyStats counts what Apply did with a delta's blocks.
	BlockApplyStats = replicated.BlockApplyStats
	// MemoApplyStats counts what Apply did with a delta's memos.
	MemoApplyStats = replicated.MemoApplyStats
	// InflightApplyStats counts what Apply did with a delta's in-flight
	// counts.
	InflightApplyStats = replicated.InflightApplyStats
)

// Scopes.
const (
	ScopeNode   = replicated.ScopeNode
	ScopePoP    = replicated.ScopePoP
	ScopeGlobal = replicated.ScopeGlobal
)
