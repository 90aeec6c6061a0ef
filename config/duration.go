package config

import (
	"fmt"
	"time"
)

// Duration is a time.Duration written in Go syntax ("50ms", "1m"). A plain
// value.
type Duration time.Duration

// D returns d as a time.Duration.
func (d Duration) D() time.Duration { return time.Duration(d) }

// String formats d in Go syntax.
func (d Duration) String() string { return time.Duration(d).String() }

// MarshalText formats d in Go syntax.
func (d Duration) MarshalText() ([]byte, error) { return []byte(d.String()), nil }

// UnmarshalText parses Go duration syntax.
func (d *Duration) UnmarshalText(b []byte) error {
	v, err := time.ParseDuration(string(b))
	if err != nil {
		return fmt.Errorf("bad duration %q (want Go syntax such as 50ms, 2s, 1m)", b)
	}
	*d = Duration(v)
	return nil
}
