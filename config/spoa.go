package config

import "fmt"

// SPOA configures the HAProxy agent (listen.spoa).
type SPOA struct {
	// Insecure lets listen.spoa listen beyond loopback. SPOP has no
	// authentication: whoever reaches the port can spend counts, so keep
	// it on a network only HAProxy reaches.
	Insecure bool `yaml:"insecure"`
}

// validateSPOA checks listen.spoa: an address, on loopback unless
// spoa.insecure.
func (c *Config) validateSPOA() error {
	if c.Listen.SPOA == "" {
		return nil
	}
	if err := checkAddr(c.Listen.SPOA, false); err != nil {
		return fmt.Errorf("listen.spoa: %w", err)
	}
	if !c.SPOA.Insecure && !IsLoopback(c.Listen.SPOA) {
		return fmt.Errorf("listen.spoa: %s is beyond loopback, and HAProxy's SPOP has no authentication (whoever reaches the port can spend counts); listen on loopback, or write spoa.insecure: true for a network only HAProxy reaches", c.Listen.SPOA)
	}
	return nil
}
