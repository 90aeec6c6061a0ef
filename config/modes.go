package config

import (
	"fmt"

	"github.com/geolimit/geolimit/replicated/modes"
)

// ModeAuthority says who may set rules' modes at run time (the kill
// switch, PUT /v1/rules/{name}/mode) fleet-wide. Without keys any node may,
// and a write from another PoP is taken only in the name of a node of that
// PoP. With verify_keys every write must be signed by one of them, only a
// node with sign_key may set modes, and nodes take signed writes from
// anyone (nobody can forge one): the setting for open links, and for
// authenticated ones where one PoP's credentials must not switch a rule
// off everywhere.
type ModeAuthority struct {
	// VerifyKeys are PEM files of Ed25519 public keys (PKIX, as `openssl
	// pkey -pubout` writes them); a write signed by any of them is taken.
	VerifyKeys []string `yaml:"verify_keys"`
	// SignKey is a PEM file of an Ed25519 private key (PKCS #8, as
	// `openssl genpkey -algorithm ed25519` writes it) on the nodes that may
	// set modes; its public half needs no listing in VerifyKeys.
	SignKey string `yaml:"sign_key"`
}

// Load reads the keys; nil without any.
func (m ModeAuthority) Load() (*modes.Authority, error) {
	for i, f := range m.VerifyKeys {
		if f == "" {
			return nil, fmt.Errorf("mode_authority.verify_keys[%d]: empty path", i)
		}
	}
	a, err := modes.LoadAuthority(m.VerifyKeys, m.SignKey)
	if err != nil {
		return nil, fmt.Errorf("mode_authority: %w", err)
	}
	return a, nil
}
