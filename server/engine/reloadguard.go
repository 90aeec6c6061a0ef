package engine

import (
	"errors"
	"fmt"
	"strings"

	"github.com/geolimit/geolimit/config"
)

// checkRuleRemoval refuses a reload from old to next that removes half or
// more of old's rules (every rule included) unless next says
// allow_rule_removal: true. A truncated or wrongly generated file looks like
// that (a file cut in the middle keeps about half), and dropping rules drops
// what they count.
func checkRuleRemoval(old, next *config.Config) error {
	if next.AllowRuleRemoval || len(old.Rules) == 0 {
		return nil
	}
	keep := make(map[string]bool, len(next.Rules))
	for _, r := range next.Rules {
		keep[r.Name] = true
	}
	var removed []string
	for _, r := range old.Rules {
		if !keep[r.Name] {
			removed = append(removed, r.Name)
		}
	}
	if 2*len(removed) < len(old.Rules) {
		return nil
	}
	shown := removed
	if len(shown) > 10 {
		shown = append(shown[:10:10], "...")
	}
	return fmt.Errorf("%w: the new file removes %d of the %d running rules (%s); set allow_rule_removal: true in it to allow that",
		errRuleRemoval, len(removed), len(old.Rules), strings.Join(shown, ", "))
}

var errRuleRemoval = errors.New("rules: reload refused")
