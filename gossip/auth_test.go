package gossip

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nats-io/jwt/v2"
	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nkeys"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/geolimit/geolimit/identity"
	"github.com/geolimit/geolimit/repl"
)

// startNATSWith starts an embedded nats-server with extra options.
func startNATSWith(t *testing.T, set func(*server.Options)) *server.Server {
	t.Helper()
	opts := &server.Options{Host: "127.0.0.1", Port: -1, NoLog: true, NoSigs: true}
	set(opts)
	s, err := server.NewServer(opts)
	require.NoError(t, err)
	go s.Start()
	require.True(t, s.ReadyForConnections(10*time.Second))
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

// twoPoPs replicates a global count between two PoPs through url with the
// given client settings.
func twoPoPs(t *testing.T, url string, set func(*NATSConfig)) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var ms []*member
	for _, id := range []identity.PoPID{{Region: "eu", PoP: "ams"}, {Region: "us", PoP: "iad"}} {
		cfg := NATSConfig{Self: id, Name: id.PoP, URL: url}
		set(&cfg)
		o := Options{Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour}, Global: NATSConnect(cfg)}
		ms = append(ms, startMember(t, ctx, newNode(t, id.Region, id.PoP, id.PoP+"-1", testRules()), o))
	}
	_, err := ms[0].node.Decide(time.Now().UnixNano(), "api", "k", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return total(ms[1].node, "api", "k") == 1 }, 10*time.Second, poll, "replicated")
}

func TestNATSUserPassword(t *testing.T) {
	s := startNATSWith(t, func(o *server.Options) { o.Username, o.Password = "edge", "s3cret" })
	twoPoPs(t, s.ClientURL(), func(c *NATSConfig) { c.User, c.Password = "edge", "s3cret" })

	// With a wrong password nothing gets through, while a node with the
	// right one receives the same count.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := func(id identity.PoPID, password string) *member {
		return startMember(t, ctx, newNode(t, id.Region, id.PoP, id.PoP+"-1", testRules()), Options{
			Settings: repl.Settings{FlushInterval: 10 * time.Millisecond, AntiEntropyInterval: time.Hour},
			Global:   NATSConnect(NATSConfig{Self: id, Name: id.PoP, URL: s.ClientURL(), User: "edge", Password: password}),
		})
	}
	good, other, bad := start(identity.PoPID{Region: "eu", PoP: "fra"}, "s3cret"), start(identity.PoPID{Region: "us", PoP: "sjc"}, "s3cret"), start(identity.PoPID{Region: "ap", PoP: "syd"}, "wrong")
	_, err := good.node.Decide(time.Now().UnixNano(), "api", "k2", 1)
	require.NoError(t, err)
	require.Eventually(t, func() bool { return total(other.node, "api", "k2") == 1 }, 10*time.Second, poll, "the authenticated node receives it")
	assert.Zero(t, total(bad.node, "api", "k2"))
	assert.Zero(t, bad.rep.Stats()[0].MessagesReceived)
}

func TestNATSTLS(t *testing.T) {
	dir := t.TempDir()
	caFile, cert := selfSignedCA(t, dir)
	s := startNATSWith(t, func(o *server.Options) {
		o.TLSConfig = &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
		o.TLS = true
		o.TLSTimeout = 2
	})
	twoPoPs(t, s.ClientURL(), func(c *NATSConfig) { c.RootCAs = []string{caFile} })
}

// selfSignedCA writes a self-signed certificate for 127.0.0.1 (its own CA)
// and returns the PEM file and the key pair.
func selfSignedCA(t *testing.T, dir string) (string, tls.Certificate) {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "geolimit test"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(time.Hour),
		IPAddresses:           []net.IP{net.ParseIP("127.0.0.1")},
		KeyUsage:              x509.KeyUsageDigitalSignature | x509.KeyUsageCertSign,
		ExtKeyUsage:           []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	certPEM := pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der})
	kb, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	keyPEM := pem.EncodeToMemory(&pem.Block{Type: "EC PRIVATE KEY", Bytes: kb})
	path := filepath.Join(dir, "ca.pem")
	require.NoError(t, os.WriteFile(path, certPEM, 0o600))
	pair, err := tls.X509KeyPair(certPEM, keyPEM)
	require.NoError(t, err)
	return path, pair
}

// TestNATSCredentials authenticates with a credentials file (user JWT and
// nkey seed) against a server in operator mode.
func TestNATSCredentials(t *testing.T) {
	okp, err := nkeys.CreateOperator()
	require.NoError(t, err)
	opub, err := okp.PublicKey()
	require.NoError(t, err)
	ojwt, err := jwt.NewOperatorClaims(opub).Encode(okp)
	require.NoError(t, err)
	oc, err := jwt.DecodeOperatorClaims(ojwt)
	require.NoError(t, err)
	akp, err := nkeys.CreateAccount()
	require.NoError(t, err)
	apub, err := akp.PublicKey()
	require.NoError(t, err)
	ajwt, err := jwt.NewAccountClaims(apub).Encode(okp)
	require.NoError(t, err)
	ukp, err := nkeys.CreateUser()
	require.NoError(t, err)
	upub, err := ukp.PublicKey()
	require.NoError(t, err)
	ujwt, err := jwt.NewUserClaims(upub).Encode(akp)
	require.NoError(t, err)
	seed, err := ukp.Seed()
	require.NoError(t, err)
	creds, err := jwt.FormatUserConfig(ujwt, seed)
	require.NoError(t, err)
	path := filepath.Join(t.TempDir(), "edge.creds")
	require.NoError(t, os.WriteFile(path, creds, 0o600))

	resolver := &server.MemAccResolver{}
	require.NoError(t, resolver.Store(apub, ajwt))
	s := startNATSWith(t, func(o *server.Options) {
		o.TrustedOperators = []*jwt.OperatorClaims{oc}
		o.AccountResolver = resolver
	})
	twoPoPs(t, s.ClientURL(), func(c *NATSConfig) { c.CredentialsFile = path })
}
