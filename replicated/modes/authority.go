package modes

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/binary"
	"encoding/pem"
	"errors"
	"fmt"
	"os"

	"github.com/geolimit/geolimit/identity"
)

// Who may set a rule's mode, and which writes a node takes.
//
// Without keys (a nil *Authority) any node may set a mode. A write that
// comes from another PoP is taken only when its writer (By) is of that PoP:
// the PoP the transport vouches for (its NATS subject, which per-PoP
// credentials bind to the PoP) must be the writer's, so a PoP cannot set a
// mode in another's name. Inside a PoP members relay each other's writes
// (memberlist is the PoP's own, encrypted beyond loopback). A write from
// another PoP is therefore learned from its writer's PoP, directly or
// through that PoP's anti-entropy.
//
// With keys, the operator decides: every write must carry an Ed25519
// signature by one of the verify keys, checked wherever it arrives, and
// only a node that holds a sign key may set a mode. A signed write may be
// relayed by anyone, since nobody can forge it; an unsigned or badly signed
// one is refused. This is what holds on open links, and against one PoP's
// credentials on authenticated ones.
//
// Dates: a write's At is its writer's hybrid logical clock (package pop
// dates a new write after every write the node holds), and a receiver
// refuses a write dated after its own clock plus the tolerated skew; so an
// operator's write on a node wins over every write that node took, and a
// forger without a key cannot outdate it.
type Authority struct {
	verify []ed25519.PublicKey
	sign   ed25519.PrivateKey
}

// Errors of the trust rule and of setting a mode.
var (
	ErrUnsigned     = errors.New("modes: write not signed by a mode authority key")
	ErrBadSignature = errors.New("modes: write's signature does not verify")
	ErrNotWriter    = errors.New("modes: write names a writer of another PoP than its sender")
	ErrNoSignKey    = errors.New("modes: this node holds no mode_authority.sign_key: it cannot set modes")
)

// NewAuthority returns the authority of verify keys and, for a node that
// may set modes, a sign key (nil otherwise); the sign key's public half is
// a verify key whether listed or not. With neither it returns nil: no
// authority, unsigned writes.
func NewAuthority(verify []ed25519.PublicKey, sign ed25519.PrivateKey) *Authority {
	if len(verify) == 0 && sign == nil {
		return nil
	}
	a := &Authority{verify: append([]ed25519.PublicKey(nil), verify...), sign: sign}
	if sign != nil {
		pub := sign.Public().(ed25519.PublicKey)
		known := false
		for _, k := range a.verify {
			known = known || k.Equal(pub)
		}
		if !known {
			a.verify = append(a.verify, pub)
		}
	}
	return a
}

// LoadAuthority reads PEM files: Ed25519 public keys (PKIX, "PUBLIC KEY")
// and, when signFile is not empty, an Ed25519 private key (PKCS #8,
// "PRIVATE KEY"), as `openssl genpkey -algorithm ed25519` writes them.
func LoadAuthority(verifyFiles []string, signFile string) (*Authority, error) {
	var verify []ed25519.PublicKey
	for _, f := range verifyFiles {
		b, err := readPEM(f, "PUBLIC KEY")
		if err != nil {
			return nil, err
		}
		k, err := x509.ParsePKIXPublicKey(b)
		if err != nil {
			return nil, fmt.Errorf("modes: %s: %w", f, err)
		}
		pub, ok := k.(ed25519.PublicKey)
		if !ok {
			return nil, fmt.Errorf("modes: %s: not an Ed25519 public key", f)
		}
		verify = append(verify, pub)
	}
	var sign ed25519.PrivateKey
	if signFile != "" {
		b, err := readPEM(signFile, "PRIVATE KEY")
		if err != nil {
			return nil, err
		}
		k, err := x509.ParsePKCS8PrivateKey(b)
		if err != nil {
			return nil, fmt.Errorf("modes: %s: %w", signFile, err)
		}
		priv, ok := k.(ed25519.PrivateKey)
		if !ok {
			return nil, fmt.Errorf("modes: %s: not an Ed25519 private key", signFile)
		}
		sign = priv
	}
	return NewAuthority(verify, sign), nil
}

func readPEM(file, typ string) ([]byte, error) {
	raw, err := os.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("modes: %w", err)
	}
	blk, _ := pem.Decode(raw)
	if blk == nil || blk.Type != typ {
		return nil, fmt.Errorf("modes: %s: no PEM block of type %q", file, typ)
	}
	return blk.Bytes, nil
}

// Signed reports whether writes must be signed.
func (a *Authority) Signed() bool { return a != nil }

// CanSet returns nil when this node may set modes: without an authority,
// or with a sign key.
func (a *Authority) CanSet() error {
	if a != nil && a.sign == nil {
		return ErrNoSignKey
	}
	return nil
}

// Sign signs m with the sign key (a node without one leaves m unsigned:
// check CanSet first).
func (a *Authority) Sign(m *RuleMode) {
	if a == nil || a.sign == nil {
		return
	}
	copy(m.Sig[:], ed25519.Sign(a.sign, signed(m)))
}

// Source is where writes came from, as the transport vouches.
type Source struct {
	// PoP is the sending PoP: for a member of the own PoP, the own PoP.
	PoP identity.PoPID
	// Member: a member of the node's own PoP, or the node's own state
	// file.
	Member bool
}

// Take applies the trust rule to a write from src: nil when the node may
// take it.
func (a *Authority) Take(m *RuleMode, src Source) error {
	if a != nil {
		if !m.IsSigned() {
			return ErrUnsigned
		}
		msg := signed(m)
		for _, k := range a.verify {
			if ed25519.Verify(k, msg, m.Sig[:]) {
				return nil
			}
		}
		return ErrBadSignature
	}
	if !src.Member && m.By.PoPID != src.PoP {
		return ErrNotWriter
	}
	return nil
}

// signed returns the bytes a write's signature covers: a domain string, the
// rule's name, the mode, the time and the writer.
func signed(m *RuleMode) []byte {
	b := make([]byte, 0, 64+len(m.Rule))
	b = append(b, "geolimit rule mode 1\x00"...)
	b = binary.BigEndian.AppendUint16(b, uint16(len(m.Rule)))
	b = append(b, m.Rule...)
	b = append(b, m.Mode)
	b = binary.BigEndian.AppendUint64(b, uint64(m.At))
	by := m.By.String()
	b = binary.BigEndian.AppendUint16(b, uint16(len(by)))
	return append(b, by...)
}
