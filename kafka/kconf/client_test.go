package kconf

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"crypto/tls"
	"crypto/x509"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net"
	"net/url"
	"os"
	"sort"
	"strings"
	"sync/atomic"
	"testing"
	"testing/synctest"

	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vigil-cep/vigil/internal/testpki"
)

// countingListener counts the connections a broker accepts.
type countingListener struct {
	net.Listener
	n atomic.Int32
}

func (l *countingListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err == nil {
		l.n.Add(1)
	}
	return c, err
}

// secureBroker starts a kfake cluster on 127.0.0.1 with TLS from pki and
// SASL users of every mechanism kfake implements. It returns the address,
// the listener (counting connections) and a counter of SASL
// authentications.
func secureBroker(t *testing.T, tc *tls.Config) (string, *countingListener, *atomic.Int32) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	cl := &countingListener{Listener: ln}
	c, err := kfake.NewCluster(kfake.NumBrokers(1), kfake.EnableSASL(),
		kfake.Superuser(MechPlain, "plain-user", password),
		kfake.Superuser(MechScramSHA256, "scram256-user", password),
		kfake.Superuser(MechScramSHA512, "scram512-user", password),
		kfake.TLS(tc),
		kfake.ListenFn(func(string, string) (net.Listener, error) { return cl, nil }))
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(c.Close)
	var auths atomic.Int32
	c.ControlKey(int16(kmsg.SASLAuthenticate), func(kmsg.Request) (kmsg.Response, error, bool) {
		c.KeepControl()
		auths.Add(1)
		return nil, nil, false // observe only
	})
	return ln.Addr().String(), cl, &auths
}

// Every mechanism the embedded broker offers connects over TLS, with the
// CA given or with hostname checks off.
func TestMechanismsConnect(t *testing.T) {
	pki := testpki.New(t, "kconf")
	addr, _, _ := secureBroker(t, pki.ServerTLS(t, false))
	for _, mech := range []string{MechPlain, MechScramSHA256, MechScramSHA512} {
		t.Run(mech, func(t *testing.T) {
			user := map[string]string{MechPlain: "plain-user", MechScramSHA256: "scram256-user", MechScramSHA512: "scram512-user"}[mech]
			c := Config{Brokers: []string{addr}, Protocol: SASLSSL, Mechanism: mech, Username: user, Password: password, CAFile: pki.CA}
			if err := Ping(context.Background(), c); err != nil {
				t.Fatal(err)
			}
		})
	}
}

// A certificate that does not name the host dialed is refused, unless
// ssl.endpoint.identification.algorithm=none, which still checks the chain.
func TestHostnameCheck(t *testing.T) {
	pki := testpki.New(t, "kconf")
	certFile, keyFile := pki.Issue(t, "elsewhere", x509.ExtKeyUsageServerAuth, "elsewhere.example")
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		t.Fatal(err)
	}
	addr, _, _ := secureBroker(t, &tls.Config{Certificates: []tls.Certificate{cert}})
	c := Config{Brokers: []string{addr}, Protocol: SASLSSL, Mechanism: MechScramSHA512,
		Username: "scram512-user", Password: password, CAFile: pki.CA}
	if err := Ping(context.Background(), c); !strings.Contains(fmt.Sprint(err), "TLS: the broker's certificate does not name the host dialed") {
		t.Errorf("with the check: %v", err)
	}
	c.NoHostnameCheck = true
	if err := Ping(context.Background(), c); err != nil {
		t.Errorf("without the check: %v", err)
	}
	c.CAFile = testpki.New(t, "untrusted").CA
	if err := Ping(context.Background(), c); !strings.Contains(fmt.Sprint(err), "not signed by a CA") {
		t.Errorf("without the check, untrusted CA: %v", err)
	}
}

// A wrong password and an untrusted CA each fail at once with one error that
// says what to check, after one attempt, and never with the password.
func TestConnectFailuresAreOneClearError(t *testing.T) {
	pki := testpki.New(t, "kconf")
	addr, conns, auths := secureBroker(t, pki.ServerTLS(t, false))
	good := Config{Brokers: []string{addr}, Protocol: SASLSSL, Mechanism: MechScramSHA512, Username: "scram512-user",
		Password: password, CAFile: pki.CA}

	t.Run("wrong password", func(t *testing.T) {
		c := good
		c.Password = "not-" + password
		auths.Store(0)
		err := Ping(context.Background(), c)
		msg := fmt.Sprint(err)
		// kfake closes the connection where Kafka answers
		// SASL_AUTHENTICATION_FAILED; both name what to check.
		if !strings.Contains(msg, "check sasl.username and sasl.password") {
			t.Errorf("error: %s", msg)
		}
		if strings.Contains(msg, password) {
			t.Errorf("the error holds the password: %s", msg)
		}
		// SCRAM's two messages, on one connection and on the one
		// franz-go opens again when the first closes: no loop.
		if n := auths.Load(); n > 4 {
			t.Errorf("%d SASLAuthenticate requests, want at most 4", n)
		}
	})
	t.Run("untrusted CA", func(t *testing.T) {
		c := good
		c.CAFile = testpki.New(t, "untrusted").CA
		before := conns.n.Load()
		err := Ping(context.Background(), c)
		want := fmt.Sprintf("kafka %s via SASL_SSL SCRAM-SHA-512 as scram512-user: TLS: the broker's certificate is not signed by a CA in ssl.ca.location %s: ", addr, c.CAFile)
		if msg := fmt.Sprint(err); !strings.HasPrefix(msg, want) {
			t.Errorf("error:\n%s\nwant it to start with:\n%s", msg, want)
		}
		if n := conns.n.Load() - before; n != 1 {
			t.Errorf("%d connections, want 1", n)
		}
	})
	t.Run("plaintext to a TLS listener", func(t *testing.T) {
		c := Config{Brokers: []string{addr}, Protocol: SASLPlaintext, Mechanism: MechScramSHA512, Username: "scram512-user", Password: password}
		err := Ping(context.Background(), c)
		if msg := fmt.Sprint(err); !strings.Contains(msg, "check security.protocol") {
			t.Errorf("error: %s", msg)
		}
	})
	t.Run("no SASL to a SASL listener", func(t *testing.T) {
		c := Config{Brokers: []string{addr}, Protocol: SSL, CAFile: pki.CA}
		err := Ping(context.Background(), c)
		if msg := fmt.Sprint(err); !strings.Contains(msg, "check security.protocol") {
			t.Errorf("error: %s", msg)
		}
	})
	t.Run("missing CA file", func(t *testing.T) {
		c := good
		c.CAFile = "/nonexistent/ca.pem"
		if _, err := c.Opts(); fmt.Sprint(err) != "ssl.ca.location: open /nonexistent/ca.pem: no such file or directory" {
			t.Errorf("error: %v", err)
		}
	})
}

// The OAUTHBEARER token is read from its file at every authentication: a
// renewed token is used from the next connection on.
func TestOAuthBearerTokenFile(t *testing.T) {
	tok := writeFile(t, "token", "eyJ.first.token\n")
	c := Config{Brokers: []string{"k:9093"}, Protocol: SASLSSL, Mechanism: MechOAuthBearer}
	if err := c.Set(Setting{"sasl.oauthbearer.token.endpoint.url", "file://" + tok, "test"}); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	first := func() string {
		t.Helper()
		_, msg, err := c.mechanism().Authenticate(context.Background(), "k:9093")
		if err != nil {
			t.Fatal(err)
		}
		return string(msg)
	}
	if got, want := first(), "n,,\x01auth=Bearer eyJ.first.token\x01\x01"; got != want {
		t.Errorf("first message %q, want %q", got, want)
	}
	if err := os.WriteFile(tok, []byte("eyJ.renewed.token"), 0o600); err != nil {
		t.Fatal(err)
	}
	if got, want := first(), "n,,\x01auth=Bearer eyJ.renewed.token\x01\x01"; got != want {
		t.Errorf("after renewal %q, want %q", got, want)
	}
	os.WriteFile(tok, nil, 0o600)
	if _, _, err := c.mechanism().Authenticate(context.Background(), "k:9093"); fmt.Sprint(err) != "OAUTHBEARER token: "+tok+" is empty" {
		t.Errorf("empty token file: %v", err)
	}
}

// AWS_MSK_IAM signs a SigV4 presigned request for kafka-cluster:Connect. The
// signature is checked against one computed here from AWS's documented
// algorithm, and pinned, at a fixed time (synctest's clock starts at
// 2000-01-01T00:00:00Z).
func TestAWSMSKIAMSignature(t *testing.T) {
	const (
		host   = "b-1.vigil.abc123.c2.kafka.eu-west-1.amazonaws.com"
		access = "AKIDEXAMPLE"
		secret = "wJalrXUtnFEMI/K7MDENG+bPxRfiCYEXAMPLEKEY"
	)
	t.Setenv("AWS_SESSION_TOKEN", "")
	c := Config{Brokers: []string{host + ":9098"}, Protocol: SASLSSL, Mechanism: MechAWSMSKIAM, Username: access, Password: secret}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	synctest.Test(t, func(t *testing.T) {
		_, msg, err := c.mechanism().Authenticate(context.Background(), host+":9098")
		if err != nil {
			t.Fatal(err)
		}
		var got map[string]string
		if err := json.Unmarshal(msg, &got); err != nil {
			t.Fatal(err)
		}
		want := map[string]string{
			"version": "2020_10_22", "host": host, "user-agent": "vigil", "action": "kafka-cluster:Connect",
			"x-amz-algorithm": "AWS4-HMAC-SHA256", "x-amz-credential": access + "/20000101/eu-west-1/kafka-cluster/aws4_request",
			"x-amz-date": "20000101T000000Z", "x-amz-expires": "900", "x-amz-signedheaders": "host",
		}
		sig := got["x-amz-signature"]
		delete(got, "x-amz-signature")
		for k, v := range want {
			if got[k] != v {
				t.Errorf("%s = %q, want %q", k, got[k], v)
			}
		}
		if len(got) != len(want) {
			t.Errorf("keys %v, want %v", got, want)
		}
		if exp := sigV4(secret, host, "eu-west-1", "20000101", "20000101T000000Z", map[string]string{
			"Action":              "kafka-cluster:Connect",
			"X-Amz-Algorithm":     "AWS4-HMAC-SHA256",
			"X-Amz-Credential":    access + "/20000101/eu-west-1/kafka-cluster/aws4_request",
			"X-Amz-Date":          "20000101T000000Z",
			"X-Amz-Expires":       "900",
			"X-Amz-SignedHeaders": "host",
		}); sig != exp {
			t.Errorf("signature %s, want %s (computed from the SigV4 algorithm)", sig, exp)
		}
		const pinned = "aafede43e0eba72e5e2e5f41d99c6ab56ef7c80569170609a64f56ad111d15fd"
		if sig != pinned {
			t.Errorf("signature %s, pinned %s", sig, pinned)
		}
	})
}

// sigV4 computes a presigned GET / request's signature as AWS documents it
// (Signature Version 4: canonical request, string to sign, derived key),
// signing only the host header, with an empty payload.
func sigV4(secret, host, region, date, stamp string, query map[string]string) string {
	keys := make([]string, 0, len(query))
	for k := range query {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var q []string
	for _, k := range keys {
		q = append(q, uriEncode(k)+"="+uriEncode(query[k]))
	}
	empty := sha256.Sum256(nil)
	canonical := strings.Join([]string{"GET", "/", strings.Join(q, "&"), "host:" + host + "\n", "host", hex.EncodeToString(empty[:])}, "\n")
	ch := sha256.Sum256([]byte(canonical))
	scope := date + "/" + region + "/kafka-cluster/aws4_request"
	toSign := "AWS4-HMAC-SHA256\n" + stamp + "\n" + scope + "\n" + hex.EncodeToString(ch[:])
	mac := func(key []byte, s string) []byte {
		h := hmac.New(sha256.New, key)
		h.Write([]byte(s))
		return h.Sum(nil)
	}
	k := mac([]byte("AWS4"+secret), date)
	k = mac(k, region)
	k = mac(k, "kafka-cluster")
	k = mac(k, "aws4_request")
	return hex.EncodeToString(mac(k, toSign))
}

// uriEncode is SigV4's encoding: every byte but the unreserved ones as %XX.
func uriEncode(s string) string {
	return strings.ReplaceAll(url.QueryEscape(s), "+", "%20")
}

// A broker that requires client certificates accepts the one of
// ssl.certificate.location and ssl.key.location.
func TestClientCertificate(t *testing.T) {
	pki := testpki.New(t, "kconf")
	addr, _, _ := secureBroker(t, pki.ServerTLS(t, true))
	c := Config{Brokers: []string{addr}, Protocol: SASLSSL, Mechanism: MechScramSHA256,
		Username: "scram256-user", Password: password, CAFile: pki.CA, CertFile: pki.ClientCert, KeyFile: pki.ClientKey}
	if err := Ping(context.Background(), c); err != nil {
		t.Fatal(err)
	}
	c.CertFile, c.KeyFile = "", ""
	if err := Ping(context.Background(), c); err == nil {
		t.Fatal("connected without a client certificate")
	}
}
