package config

import (
	"fmt"
	"strings"
)

// validate checks a match: upper-case methods, a path prefix that starts
// with '/'. Errors start with "match.".
func (m Match) validate() error {
	for j, meth := range m.Methods {
		if meth == "" || meth != strings.ToUpper(meth) || strings.ContainsAny(meth, " \t/:\"") {
			return fmt.Errorf("match.methods[%d]: %q is not an upper-case HTTP method", j, meth)
		}
	}
	if p := m.PathPrefix; p != "" && !strings.HasPrefix(p, "/") {
		return fmt.Errorf("match.path_prefix: %q must start with '/'", p)
	}
	return nil
}

// empty reports whether m matches every request.
func (m Match) empty() bool {
	return m.PathPrefix == "" && len(m.Methods) == 0 && m.Host == ""
}
