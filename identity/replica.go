package identity

import (
	"cmp"
	"errors"
	"fmt"
	"strconv"
	"strings"
)

// Replica identifies the owner of one G-counter entry: a node of a PoP, in
// one incarnation (a number that is new at every start, so a restarted
// node's fresh counts are never hidden behind its old maximum). A replica
// whose Node is PoPNode is a PoP's aggregate instead, and its Incarnation is
// the PoP's epoch. A Replica is a plain value, safe for concurrent use.
type Replica struct {
	PoPID
	Node        string
	Incarnation uint64
}

// PoPNode is the Node name of a PoP's aggregate replica. Validate accepts it
// (an aggregate is a valid sender), but no node may be called so (ValidName
// refuses it): it would be taken for its PoP's aggregate.
const PoPNode = "*"

// PoPReplica returns the aggregate replica of PoP p in one epoch.
func PoPReplica(p PoPID, epoch uint64) Replica {
	return Replica{PoPID: p, Node: PoPNode, Incarnation: epoch}
}

// IsPoP reports whether r is an aggregate replica: a PoP's, or a region's
// (IsRegion).
func (r Replica) IsPoP() bool { return r.Node == PoPNode }

// RegionPoP is the PoP name of a region's aggregate replica
// (region/*/*#epoch, RegionReplica): like PoPNode, ValidName refuses it for
// any real PoP.
const RegionPoP = "*"

// RegionReplica returns the aggregate replica of region under region epoch
// epoch: for each (rule, key, window) the region total, the sum of its PoPs'
// totals, which one PoP of the region at a time publishes to the other
// regions.
func RegionReplica(region string, epoch uint64) Replica {
	return Replica{PoPID: PoPID{Region: region, PoP: RegionPoP}, Node: PoPNode, Incarnation: epoch}
}

// IsRegion reports whether r is a region's aggregate replica.
func (r Replica) IsRegion() bool { return r.Node == PoPNode && r.PoP == RegionPoP }

// ErrBadReplica is returned for a replica identity that cannot be valid.
var ErrBadReplica = errors.New("identity: bad replica identity")

// String formats r as region/pop/node#incarnation.
func (r Replica) String() string {
	return r.PoPID.String() + "/" + r.Node + "#" + strconv.FormatUint(r.Incarnation, 10)
}

// Validate reports whether r's names are valid (ValidName; the Node of an
// aggregate is PoPNode, and the PoP of a region's aggregate RegionPoP).
func (r Replica) Validate() error {
	if r.IsRegion() {
		if err := ValidName(r.Region); err != nil {
			return fmt.Errorf("%w: region: %w", ErrBadReplica, err)
		}
		return nil
	}
	if err := r.PoPID.Validate(); err != nil {
		return fmt.Errorf("%w: %w", ErrBadReplica, err)
	}
	if r.IsPoP() {
		return nil
	}
	if err := ValidName(r.Node); err != nil {
		return fmt.Errorf("%w: node: %w", ErrBadReplica, err)
	}
	return nil
}

// SamePoP reports whether r and o belong to the same PoP (nodes or aggregate).
func (r Replica) SamePoP(o Replica) bool { return r.PoPID == o.PoPID }

// ParseReplica parses region/pop/node#incarnation (Replica.String) and
// validates the result.
func ParseReplica(s string) (Replica, error) {
	name, inc, ok := strings.Cut(s, "#")
	parts := strings.Split(name, "/")
	if !ok || len(parts) != 3 {
		return Replica{}, fmt.Errorf("%w: %q is not region/pop/node#incarnation", ErrBadReplica, s)
	}
	n, err := strconv.ParseUint(inc, 10, 64)
	if err != nil {
		return Replica{}, fmt.Errorf("%w: %q: incarnation: %w", ErrBadReplica, s, err)
	}
	r := Replica{PoPID: PoPID{Region: parts[0], PoP: parts[1]}, Node: parts[2], Incarnation: n}
	return r, r.Validate()
}

// CompareReplicas orders replicas by region, PoP, node and incarnation.
func CompareReplicas(a, b Replica) int {
	if c := cmp.Compare(a.Region, b.Region); c != 0 {
		return c
	}
	if c := cmp.Compare(a.PoP, b.PoP); c != 0 {
		return c
	}
	if c := cmp.Compare(a.Node, b.Node); c != 0 {
		return c
	}
	return cmp.Compare(a.Incarnation, b.Incarnation)
}
