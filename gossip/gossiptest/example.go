package gossiptest

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"math/big"
	mrand "math/rand/v2"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// WriteCerts writes into dir the files examples/secure-multi-region's
// gen-certs.sh makes: a CA (ca.pem, ca-key.pem) and, for each name, a
// certificate and key signed by it (<name>-cert.pem, <name>-key.pem), valid
// for 127.0.0.1 and localhost, for both server and client use. It returns
// the CA file.
func WriteCerts(tb testing.TB, dir string, names ...string) string {
	tb.Helper()
	if err := os.MkdirAll(dir, 0o700); err != nil {
		tb.Fatal(err)
	}
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	now := time.Now()
	caTmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "geolimit test CA"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageCRLSign,
		IsCA:                  true,
		BasicConstraintsValid: true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTmpl, caTmpl, &caKey.PublicKey, caKey)
	if err != nil {
		tb.Fatal(err)
	}
	caCert, err := x509.ParseCertificate(caDER)
	if err != nil {
		tb.Fatal(err)
	}
	write := func(name, typ string, der []byte) {
		if err := os.WriteFile(filepath.Join(dir, name), pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	writeKey := func(name string, k *ecdsa.PrivateKey) {
		b, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			tb.Fatal(err)
		}
		write(name, "EC PRIVATE KEY", b)
	}
	write("ca.pem", "CERTIFICATE", caDER)
	writeKey("ca-key.pem", caKey)
	for i, name := range names {
		k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			tb.Fatal(err)
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(int64(i + 2)),
			Subject:      pkix.Name{CommonName: "nats-" + name},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.Add(24 * time.Hour),
			KeyUsage:     x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment,
			ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth},
			IPAddresses:  []net.IP{net.ParseIP("127.0.0.1")},
			DNSNames:     []string{"localhost"},
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, caCert, &k.PublicKey, caKey)
		if err != nil {
			tb.Fatal(err)
		}
		write(name+"-cert.pem", "CERTIFICATE", der)
		writeKey(name+"-key.pem", k)
	}
	return filepath.Join(dir, "ca.pem")
}

// Example is a copy of an example directory (configs of geolimit and of
// nats-server) that runs on free ports.
type Example struct {
	// Dir is the copy.
	Dir string
	// Ports maps every 127.0.0.1:<port> of the originals to the free
	// address that replaced it.
	Ports map[string]string
}

// FreeAddr returns a 127.0.0.1 address free a moment ago, for a server a
// test starts later (a config file names it). The port is drawn below
// Linux's default range of ephemeral ports (32768-60999), which the
// kernel hands out to the outgoing connections and port-0 listeners of
// tests running meanwhile: a port from that range, free when drawn, is
// soon some connection's source port. The port stays reserved for the test
// (reservePort) until it ends, so that another test process drawing
// meanwhile, as go test runs packages side by side, cannot draw it too
// before the server binds it.
func FreeAddr(tb testing.TB) string {
	tb.Helper()
	for range 1000 {
		port := 20000 + mrand.IntN(12000)
		if !reservePort(tb, port) {
			continue // another test holds it: draw again
		}
		l, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(port))
		if err != nil {
			continue // taken: draw again
		}
		addr := l.Addr().String()
		if err := l.Close(); err != nil {
			tb.Fatal(err)
		}
		return addr
	}
	tb.Fatal("gossiptest: no free port in 20000-31999")
	return ""
}

var loopbackPort = regexp.MustCompile(`127\.0\.0\.1:(\d{4,5})`)

// CopyExample copies the regular files of the directory src, which the
// files name as rel (e.g. "examples/secure-multi-region", the path from the
// repository root), into a temporary directory: every 127.0.0.1:<port> is
// rewritten to a free port (the same one for the same port across files)
// and every rel + "/" to the copy's directory, so that the files find each
// other (and a certs/ directory written there) from any working directory.
func CopyExample(tb testing.TB, src, rel string) *Example {
	tb.Helper()
	e := &Example{Dir: tb.TempDir(), Ports: map[string]string{}}
	ents, err := os.ReadDir(src)
	if err != nil {
		tb.Fatal(err)
	}
	for _, ent := range ents {
		if !ent.Type().IsRegular() {
			continue
		}
		b, err := os.ReadFile(filepath.Join(src, ent.Name()))
		if err != nil {
			tb.Fatal(err)
		}
		s := strings.ReplaceAll(string(b), strings.TrimSuffix(rel, "/")+"/", e.Dir+"/")
		s = loopbackPort.ReplaceAllStringFunc(s, func(m string) string {
			if e.Ports[m] == "" {
				e.Ports[m] = FreeAddr(tb)
			}
			return e.Ports[m]
		})
		if err := os.WriteFile(filepath.Join(e.Dir, ent.Name()), []byte(s), 0o600); err != nil {
			tb.Fatal(err)
		}
	}
	return e
}

// Path returns the copy of the example file name.
func (e *Example) Path(name string) string { return filepath.Join(e.Dir, name) }

// Addr returns the free address that replaced orig ("127.0.0.1:4222").
func (e *Example) Addr(tb testing.TB, orig string) string {
	tb.Helper()
	a := e.Ports[orig]
	if a == "" {
		tb.Fatalf("gossiptest: %s is not in the example", orig)
	}
	return a
}
