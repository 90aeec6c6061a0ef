package identity

import (
	"errors"
	"fmt"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/geolimit/geolimit/wire/codec"
)

// PoPID names one PoP of one region. It is geolimit's one PoP identity: the
// replication protocol, the transports, the configuration, the status page
// and the simulator all name a PoP by it, and a Replica embeds it. A PoPID is
// a plain value, safe for concurrent use; the zero value names no PoP and is
// not valid.
//
// As JSON it is {"region": …, "pop": …}; as text, region/pop (String,
// ParsePoPID).
type PoPID struct {
	Region string `json:"region"`
	PoP    string `json:"pop"`
}

// MaxNameLen caps the length in bytes of a region, PoP or node name.
const MaxNameLen = codec.MaxNameLen

// ErrBadName is returned (wrapped, with the name) for a region, PoP or node
// name that ValidName refuses.
var ErrBadName = errors.New("identity: bad name")

// ValidName reports whether s can name a region, a PoP or a node: 1 to
// MaxNameLen bytes of printable UTF-8 without '.', '*', '>', '/', '#' or
// white space. Such a name is one token of a NATS subject (no separator, no
// wildcard), one part of a memberlist label and node name, and one part of
// the region/pop and region/pop/node#incarnation forms. It is the only
// validator of these names.
func ValidName(s string) error {
	if s == "" || len(s) > MaxNameLen {
		return badName(s)
	}
	for i := 0; i < len(s); i++ {
		switch c := s[i]; {
		case c >= utf8.RuneSelf:
			return validUnicode(s, i)
		case c <= ' ' || c == 0x7f || c == '.' || c == '*' || c == '>' || c == '/' || c == '#':
			return badName(s)
		}
	}
	return nil
}

// validUnicode is ValidName's slow path for the non-ASCII rest s[i:].
func validUnicode(s string, i int) error {
	if !utf8.ValidString(s[i:]) {
		return badName(s)
	}
	for _, c := range s[i:] {
		if strings.ContainsRune(".*>/#", c) || unicode.IsSpace(c) || !unicode.IsPrint(c) {
			return badName(s)
		}
	}
	return nil
}

func badName(s string) error {
	return fmt.Errorf("%w: %q must be 1-%d bytes of printable UTF-8 without '.', '*', '>', '/', '#' or white space", ErrBadName, s, MaxNameLen)
}

// Validate reports whether both of p's names are valid (ValidName), naming
// the one that is not.
func (p PoPID) Validate() error {
	if err := ValidName(p.Region); err != nil {
		return fmt.Errorf("region: %w", err)
	}
	if err := ValidName(p.PoP); err != nil {
		return fmt.Errorf("pop: %w", err)
	}
	return nil
}

// String formats p as region/pop.
func (p PoPID) String() string { return p.Region + "/" + p.PoP }

// Less orders PoPIDs by region, then PoP.
func (p PoPID) Less(o PoPID) bool {
	if p.Region != o.Region {
		return p.Region < o.Region
	}
	return p.PoP < o.PoP
}

// ParsePoPID parses region/pop (PoPID.String); both names must be valid.
func ParsePoPID(s string) (PoPID, error) {
	region, pop, ok := strings.Cut(s, "/")
	if !ok {
		return PoPID{}, fmt.Errorf("%w: %q is not region/pop", ErrBadName, s)
	}
	p := PoPID{Region: region, PoP: pop}
	if err := p.Validate(); err != nil {
		return PoPID{}, fmt.Errorf("%q: %w", s, err)
	}
	return p, nil
}
