package modes

import (
	"crypto/ed25519"
	"crypto/x509"
	"encoding/pem"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"

	"github.com/geolimit/geolimit/identity"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// key returns a deterministic Ed25519 key pair from seed.
func key(seed byte) (ed25519.PublicKey, ed25519.PrivateKey) {
	s := make([]byte, ed25519.SeedSize)
	for i := range s {
		s[i] = seed
	}
	priv := ed25519.NewKeyFromSeed(s)
	return priv.Public().(ed25519.PublicKey), priv
}

var (
	ams = identity.PoPID{Region: "eu", PoP: "ams"}
	iad = identity.PoPID{Region: "us", PoP: "iad"}
)

func write(by identity.PoPID) RuleMode {
	return RuleMode{Rule: "api", Mode: Off, At: 1_700_000_000_000_000_000, By: identity.Replica{PoPID: by, Node: by.PoP + "-1", Incarnation: 3}}
}

// TestAuthorityWithoutKeys: any node may set a mode; from another PoP a
// write is taken only in the name of a node of the PoP that sent it, and
// members of the own PoP relay any.
func TestAuthorityWithoutKeys(t *testing.T) {
	var a *Authority // no keys
	require.NoError(t, a.CanSet())
	assert.False(t, a.Signed())
	w := write(iad)
	a.Sign(&w)
	assert.False(t, w.IsSigned(), "nothing to sign with")
	assert.NoError(t, a.Take(&w, Source{PoP: iad}), "iad's own write, from iad")
	assert.ErrorIs(t, a.Take(&w, Source{PoP: ams}), ErrNotWriter, "iad's write from ams: set_by forged or relayed")
	assert.NoError(t, a.Take(&w, Source{PoP: ams, Member: true}), "a member relays")
}

// TestAuthorityWithKeys: only signed writes are taken, from anyone;
// unsigned, badly signed, signed by an unknown key, or altered after
// signing are refused; a node without the sign key may not set modes.
func TestAuthorityWithKeys(t *testing.T) {
	pub, priv := key(1)
	_, other := key(2)
	signer := NewAuthority(nil, priv)
	verifier := NewAuthority([]ed25519.PublicKey{pub}, nil)
	require.NoError(t, signer.CanSet())
	assert.ErrorIs(t, verifier.CanSet(), ErrNoSignKey)

	w := write(ams)
	signer.Sign(&w)
	require.True(t, w.IsSigned())
	for _, src := range []Source{{PoP: ams}, {PoP: iad}, {PoP: iad, Member: true}} {
		assert.NoError(t, verifier.Take(&w, src), "a signed write is taken from %+v", src)
		assert.NoError(t, signer.Take(&w, src), "the signer verifies its own")
	}

	unsigned := write(ams)
	assert.ErrorIs(t, verifier.Take(&unsigned, Source{PoP: ams}), ErrUnsigned)
	forged := write(ams)
	NewAuthority(nil, other).Sign(&forged)
	assert.ErrorIs(t, verifier.Take(&forged, Source{PoP: ams}), ErrBadSignature, "signed by a key nobody trusts")
	rng := rand.New(rand.NewPCG(9, 9))
	for name, alter := range map[string]func(m *RuleMode){
		"mode":   func(m *RuleMode) { m.Mode = Enforce },
		"time":   func(m *RuleMode) { m.At += 1 + rng.Int64N(1e9) },
		"rule":   func(m *RuleMode) { m.Rule = "login" },
		"writer": func(m *RuleMode) { m.By.Node = "evil" },
		"sig":    func(m *RuleMode) { m.Sig[rng.IntN(len(m.Sig))] ^= 1 },
	} {
		m := w
		alter(&m)
		assert.ErrorIs(t, verifier.Take(&m, Source{PoP: ams}), ErrBadSignature, "altered %s", name)
	}
}

// TestLoadAuthority reads keys as openssl writes them and names the file
// that is wrong.
func TestLoadAuthority(t *testing.T) {
	dir := t.TempDir()
	pub, priv := key(3)
	pkix, err := x509.MarshalPKIXPublicKey(pub)
	require.NoError(t, err)
	pkcs8, err := x509.MarshalPKCS8PrivateKey(priv)
	require.NoError(t, err)
	pubFile, privFile := filepath.Join(dir, "modes.pub"), filepath.Join(dir, "modes.key")
	require.NoError(t, os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pkix}), 0o600))
	require.NoError(t, os.WriteFile(privFile, pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: pkcs8}), 0o600))

	a, err := LoadAuthority([]string{pubFile}, privFile)
	require.NoError(t, err)
	w := write(ams)
	a.Sign(&w)
	v, err := LoadAuthority([]string{pubFile}, "")
	require.NoError(t, err)
	assert.NoError(t, v.Take(&w, Source{PoP: iad}))

	none, err := LoadAuthority(nil, "")
	require.NoError(t, err)
	assert.Nil(t, none)
	_, err = LoadAuthority([]string{privFile}, "")
	assert.ErrorContains(t, err, privFile, "a private key where a public one belongs")
	_, err = LoadAuthority(nil, pubFile)
	assert.ErrorContains(t, err, pubFile)
	_, err = LoadAuthority([]string{filepath.Join(dir, "missing.pub")}, "")
	assert.ErrorContains(t, err, "missing.pub")
}
