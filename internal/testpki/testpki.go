// Package testpki makes throwaway certificate authorities for tests: a CA,
// a server certificate for loopback names, and a client certificate, written
// as PEM files under a test's temporary directory. It is for tests only; the
// keys are ECDSA P-256 and valid for a day.
package testpki

import (
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
)

// PKI is one CA and the files of the certificates it signed.
type PKI struct {
	Dir string
	CA  string // CA certificate (PEM)

	ServerCert, ServerKey string // for localhost, 127.0.0.1 and ::1
	ClientCert, ClientKey string // CN=client

	ca    *x509.Certificate
	caKey *ecdsa.PrivateKey
}

// New makes a CA and its server and client certificates under t.TempDir().
// name tells two CAs of one test apart in their subjects.
func New(t testing.TB, name string) *PKI {
	t.Helper()
	p := &PKI{Dir: t.TempDir()}
	key := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: name + " test CA"},
		NotBefore:             time.Now().Add(-time.Hour),
		NotAfter:              time.Now().Add(24 * time.Hour),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		t.Fatal(err)
	}
	p.ca, _ = x509.ParseCertificate(der)
	p.caKey = key
	p.CA = p.write(t, "ca.pem", "CERTIFICATE", der)
	p.ServerCert, p.ServerKey = p.Issue(t, "server", x509.ExtKeyUsageServerAuth, "localhost", "127.0.0.1", "::1")
	p.ClientCert, p.ClientKey = p.Issue(t, "client", x509.ExtKeyUsageClientAuth)
	return p
}

// Issue signs a certificate for cn with the given names (DNS names or IP
// addresses) and writes it and its key; it returns their paths.
func (p *PKI) Issue(t testing.TB, cn string, usage x509.ExtKeyUsage, names ...string) (cert, key string) {
	t.Helper()
	k := newKey(t)
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    time.Now().Add(-time.Hour),
		NotAfter:     time.Now().Add(24 * time.Hour),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{usage},
	}
	for _, n := range names {
		if ip := net.ParseIP(n); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, n)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, p.ca, &k.PublicKey, p.caKey)
	if err != nil {
		t.Fatal(err)
	}
	kder, err := x509.MarshalECPrivateKey(k)
	if err != nil {
		t.Fatal(err)
	}
	return p.write(t, cn+".pem", "CERTIFICATE", der), p.write(t, cn+"-key.pem", "EC PRIVATE KEY", kder)
}

// ServerTLS returns a server configuration with the server certificate; with
// clientAuth it also requires a client certificate signed by the CA.
func (p *PKI) ServerTLS(t testing.TB, clientAuth bool) *tls.Config {
	t.Helper()
	cert, err := tls.LoadX509KeyPair(p.ServerCert, p.ServerKey)
	if err != nil {
		t.Fatal(err)
	}
	tc := &tls.Config{Certificates: []tls.Certificate{cert}, MinVersion: tls.VersionTLS12}
	if clientAuth {
		pool := x509.NewCertPool()
		pool.AddCert(p.ca)
		tc.ClientCAs = pool
		tc.ClientAuth = tls.RequireAndVerifyClientCert
	}
	return tc
}

func (p *PKI) write(t testing.TB, name, typ string, der []byte) string {
	path := filepath.Join(p.Dir, name)
	if err := os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: typ, Bytes: der}), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

func newKey(t testing.TB) *ecdsa.PrivateKey {
	k, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	return k
}
