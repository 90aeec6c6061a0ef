package frontend

import (
	"strings"

	"github.com/geolimit/geolimit/config"
)

// Matcher is a compiled config.Match: the one matcher of rules and of the
// load shedder's classes. Read only once built; the zero Matcher matches
// every request.
type Matcher struct {
	methods []string
	host    string // lower case, no port
	prefix  string
	// fold: match prefix regardless of case (match.ignore_case).
	fold bool
}

// NewMatcher compiles a validated match.
func NewMatcher(m config.Match) Matcher {
	return Matcher{methods: m.Methods, host: strings.ToLower(m.Host), prefix: m.PathPrefix, fold: m.IgnoreCase}
}

// Matches reports whether the request o meets every field of the match.
func (mt *Matcher) Matches(o *Origin) bool {
	if len(mt.methods) > 0 {
		ok := false
		for _, m := range mt.methods {
			// Methods are case-sensitive in HTTP, but an upstream that
			// takes "post" for POST must not let "post" escape a POST rule.
			if o.Method == m || strings.EqualFold(o.Method, m) {
				ok = true
				break
			}
		}
		if !ok {
			return false
		}
	}
	if mt.prefix != "" && !strings.HasPrefix(o.Path, mt.prefix) &&
		!(mt.fold && len(o.Path) >= len(mt.prefix) && strings.EqualFold(o.Path[:len(mt.prefix)], mt.prefix)) {
		return false
	}
	if mt.host != "" && !strings.EqualFold(HostOnly(o.Host), mt.host) {
		return false
	}
	return true
}
