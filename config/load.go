package config

import (
	"errors"
	"fmt"
	"os"
)

// Load reads the file at path: defaults, then the file, then rule defaults,
// then Validate.
func Load(path string) (*Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	c, err := ParseFile(b)
	if err != nil {
		return nil, fmt.Errorf("config: %s: %w", path, errors.Unwrap(err))
	}
	return c, nil
}

// ErrNoRules is ParseFile's error for a file without rules.
var ErrNoRules = errors.New("rules: at least one rule required (a file without rules, such as an empty or truncated one, would drop every count)")

// ParseFile is Parse for the content of a config file: a file must hold at
// least one rule, so that an empty or truncated file (caught mid-write by a
// reload) is refused instead of dropping every rule and its counts.
func ParseFile(b []byte) (*Config, error) {
	c, err := Parse(b)
	if err != nil {
		return nil, err
	}
	if len(c.Rules) == 0 {
		return nil, fmt.Errorf("config: %w", ErrNoRules)
	}
	return c, nil
}

// Parse parses YAML over DefaultConfig, applies rule defaults and validates.
// Unknown fields are errors naming them.
func Parse(b []byte) (*Config, error) {
	c := DefaultConfig()
	// With nats.embedded.config_file, the file's client address wins over
	// the default: tell an unset listen from the default one.
	c.NATS.Embedded.Listen = ""
	if err := decode(b, c); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	if e := &c.NATS.Embedded; e.ConfigFile == "" {
		if e.Listen == "" {
			e.Listen = DefaultEmbeddedListen
		}
		if e.Gateway != nil && e.Gateway.Name == "" {
			e.Gateway.Name = c.Node.Region
		}
	}
	c.ApplyRuleDefaults()
	if err := c.Validate(); err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	return c, nil
}
