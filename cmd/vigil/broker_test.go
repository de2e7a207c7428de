package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"flag"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"

	"github.com/vigil-cep/vigil/internal/testpki"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// ebUsers is the users file of the tests of the embedded broker: the
// service's superuser is not the first user, and a second superuser follows.
const ebUsers = `users:
  - name: analyst
    password: analyst-password-1
    read: [vigil.rules]
    write: [vigil.rules]
  - name: vigil
    password: vigil-service-password
    superuser: true
  - name: root
    password: root-password-12
    mechanism: PLAIN
    superuser: true
  - name: gateway
    password: gateway-password-1
    write: [transactions, logins, devices]
`

func writeEBUsers(t *testing.T, src string, mode os.FileMode) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "users.yaml")
	if err := os.WriteFile(path, []byte(src), mode); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, mode); err != nil { // past the umask
		t.Fatal(err)
	}
	return path
}

func pingCtx(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// TestBrokerRefusesOpenNonLoopback: neither vigil broker nor vigil serve's
// embedded broker listens beyond loopback without SASL users; both exit 1
// with a message that says what to do, before listening.
func TestBrokerRefusesOpenNonLoopback(t *testing.T) {
	code, _, stderr := runCLI(t, "broker", "--listen", "0.0.0.0:0", "--data-dir", "")
	if code != 1 || !strings.Contains(stderr, "the broker would listen on 0.0.0.0:0, beyond this machine, with no SASL users") ||
		!strings.Contains(stderr, "give --sasl-users FILE") || !strings.Contains(stderr, "listen on 127.0.0.1 (--listen)") {
		t.Errorf("vigil broker --listen 0.0.0.0:0: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "serve", "--kafka-listen", "0.0.0.0:0", "--data-dir", t.TempDir(), "--http", "")
	if code != 1 || !strings.Contains(stderr, "give --broker-sasl-users FILE") || !strings.Contains(stderr, "(--kafka-listen)") {
		t.Errorf("vigil serve --kafka-listen 0.0.0.0:0: exit %d, %q", code, stderr)
	}
	code, _, stderr = runCLI(t, "broker", "--listen", "127.0.0.1:0", "--data-dir", "", "--sasl-users", writeEBUsers(t, "users: []\n", 0o600))
	if code != 1 || !strings.Contains(stderr, "users.yaml:1: no users") {
		t.Errorf("an empty users file: exit %d, %q", code, stderr)
	}
}

// TestBrokerSecurityFlags: with a users file the broker may listen on every
// interface (checked without binding one: apply decides before listening),
// with warnings about TLS, the advertised address and the file's mode.
func TestBrokerSecurityFlags(t *testing.T) {
	fs := flag.NewFlagSet("broker", flag.ContinueOnError)
	sec := addBrokerSecurityFlags(fs, "", "listen")
	if err := fs.Parse([]string{"--sasl-users", writeEBUsers(t, ebUsers, 0o644)}); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	cfg := kafka.BrokerConfig{Listen: "0.0.0.0:0"}
	if err := sec.apply(&cfg, slog.New(slog.NewTextHandler(&logs, nil))); err != nil {
		t.Fatalf("0.0.0.0 with users: %v", err)
	}
	if len(cfg.Users) != 4 {
		t.Errorf("users: %d", len(cfg.Users))
	}
	for _, w := range []string{"group or others may access it: chmod 600 it", "mode=0644", "without TLS", "plain_users=1", "give --advertise HOST"} {
		if !strings.Contains(logs.String(), w) {
			t.Errorf("logs lack %q:\n%s", w, logs.String())
		}
	}
	if strings.Contains(logs.String(), "password-1") {
		t.Errorf("a password in the logs:\n%s", logs.String())
	}

	for addr, want := range map[string]bool{"127.0.0.1:9092": true, "localhost:1": true, "[::1]:1": true, "127.3.0.1:1": true,
		"0.0.0.0:9092": false, ":9092": false, "10.1.2.3:9092": false, "kafka.example:9092": false, "nonsense": false} {
		if got := loopbackListen(addr); got != want {
			t.Errorf("loopbackListen(%q) = %v", addr, got)
		}
	}
	for addr, want := range map[string]string{"0.0.0.0:9092": "127.0.0.1:9092", "[::]:5": "127.0.0.1:5", "127.0.0.1:7": "127.0.0.1:7", "10.1.2.3:8": "10.1.2.3:8"} {
		if got := dialAddr(addr); got != want {
			t.Errorf("dialAddr(%q) = %q, want %q", addr, got, want)
		}
	}
}

// syncBuffer is a bytes.Buffer safe for a writer and a reader.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// TestBrokerCommandSecured runs vigil broker with a users file and TLS, in
// the process: its superuser connects with SCRAM over TLS, a client without
// credentials does not, and it stops with its context.
func TestBrokerCommandSecured(t *testing.T) {
	pki := testpki.New(t, "cmd")
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	out, outW := io.Pipe()
	var stderr syncBuffer
	done := make(chan int, 1)
	go func() {
		done <- run(ctx, []string{"broker", "--listen", "127.0.0.1:0", "--data-dir", filepath.Join(t.TempDir(), "b"),
			"--sasl-users", writeEBUsers(t, ebUsers, 0o600), "--tls-cert", pki.ServerCert, "--tls-key", pki.ServerKey}, outW, &stderr)
		outW.Close()
	}()
	line, err := bufio.NewReader(out).ReadString('\n')
	if err != nil {
		t.Fatalf("no address: %v; stderr:\n%s", err, stderr.String())
	}
	go io.Copy(io.Discard, out)
	addr := lastField(line)
	vigil := kconf.Config{Brokers: []string{addr}, Protocol: kconf.SASLSSL, Mechanism: kconf.MechScramSHA512,
		Username: "vigil", Password: "vigil-service-password", CAFile: pki.CA}
	if err := kconf.Ping(pingCtx(t), vigil); err != nil {
		t.Errorf("the superuser: %v", err)
	}
	wrong := vigil
	wrong.Password = "not-the-password"
	if err := kconf.Ping(pingCtx(t), wrong); !errors.Is(err, kerr.SaslAuthenticationFailed) {
		t.Errorf("a wrong password: %v", err)
	}
	if err := kconf.Ping(pingCtx(t), kconf.Config{Brokers: []string{addr}, Protocol: kconf.SSL, CAFile: pki.CA}); err == nil {
		t.Error("a client without SASL was let in")
	}
	if !strings.Contains(stderr.String(), "sasl_users=4 tls=true") {
		t.Errorf("the log does not say the broker is secured:\n%s", stderr.String())
	}
	cancel()
	select {
	case code := <-done:
		if code != 0 {
			t.Errorf("exit %d; stderr:\n%s", code, stderr.String())
		}
	case <-time.After(30 * time.Second):
		t.Fatal("vigil broker did not stop with its context")
	}
}

// TestStartEmbeddedBroker: vigil serve's clients reach its embedded broker
// in the process, as the first superuser of the users file, while the
// network gets TLS; credentials of the client properties win; a file
// without a superuser, or credentials without users, are errors.
func TestStartEmbeddedBroker(t *testing.T) {
	pki := testpki.New(t, "embedded")
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	flags := func(users string, tls bool) *brokerSecurity {
		fs := flag.NewFlagSet("serve", flag.ContinueOnError)
		sec := addBrokerSecurityFlags(fs, "broker-", "kafka-listen")
		args := []string{"--broker-sasl-users", users}
		if tls {
			args = append(args, "--broker-tls-cert", pki.ServerCert, "--broker-tls-key", pki.ServerKey)
		}
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return sec
	}
	users := writeEBUsers(t, ebUsers, 0o600)
	start := func(sec *brokerSecurity, kc kconf.Config) (*embeddedBroker, error) {
		e, err := startEmbeddedBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", DataDir: filepath.Join(t.TempDir(), "broker")}, sec, kc, log)
		if err == nil {
			t.Cleanup(e.Close)
		}
		return e, err
	}

	e, err := start(flags(users, true), kconf.Config{ClientID: "serve-test"})
	if err != nil {
		t.Fatal(err)
	}
	c := e.Client
	if c.Protocol != kconf.SASLPlaintext || c.Dial == nil || c.Mechanism != kconf.MechScramSHA512 || c.Username != "vigil" || c.ClientID != "serve-test" {
		t.Errorf("client: %s %+v", c, c)
	}
	if err := kconf.Ping(pingCtx(t), c); err != nil {
		t.Errorf("serve's client: %v", err)
	}
	// From the network, the broker takes TLS only.
	remote := c
	remote.Dial = nil
	if kconf.Ping(pingCtx(t), remote) == nil {
		t.Error("the broker's TLS listener answers a plaintext client")
	}
	remote.Protocol, remote.CAFile = kconf.SASLSSL, pki.CA
	if err := kconf.Ping(pingCtx(t), remote); err != nil {
		t.Errorf("over TLS from the network: %v", err)
	}
	e.Close()

	// The properties' credentials win.
	e, err = start(flags(users, false), kconf.Config{Mechanism: kconf.MechPlain, Username: "root", Password: "root-password-12"})
	if err != nil {
		t.Fatal(err)
	}
	if c := e.Client; c.Protocol != kconf.SASLPlaintext || c.Username != "root" || c.Dial == nil {
		t.Errorf("client with the properties' credentials: %s", c)
	}
	if err := kconf.Ping(pingCtx(t), e.Client); err != nil {
		t.Errorf("as root: %v", err)
	}

	noSuper := writeEBUsers(t, "users:\n  - name: a\n    password: a-password-123\n", 0o600)
	if _, err := start(flags(noSuper, false), kconf.Config{}); err == nil || !strings.Contains(err.Error(), "has no superuser for vigil serve") {
		t.Errorf("no superuser: %v", err)
	}
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	if _, err := start(addBrokerSecurityFlags(fs, "broker-", "kafka-listen"), kconf.Config{Mechanism: kconf.MechPlain, Username: "x", Password: "y"}); err == nil ||
		!strings.Contains(err.Error(), "the embedded broker has no users (--broker-sasl-users)") {
		t.Errorf("credentials without users: %v", err)
	}
}

// TestServeSecuredEmbeddedBroker runs vigil serve with its embedded broker
// secured: the service works as its superuser (it seeds the rules topic),
// the analyst reads the ruleset it seeded, the gateway may not.
func TestServeSecuredEmbeddedBroker(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	pki := testpki.New(t, "serve")
	p, line := startVigil(t, "vigil serving", "serve", "--kafka-listen", "127.0.0.1:0", "--data-dir", t.TempDir(),
		"--broker-sasl-users", writeEBUsers(t, ebUsers, 0o600), "--broker-tls-cert", pki.ServerCert, "--broker-tls-key", pki.ServerKey)
	m := regexp.MustCompile(` on (\S+) \(decisions`).FindStringSubmatch(line)
	if m == nil {
		t.Fatalf("no broker address in %q", line)
	}
	as := func(user, pass string) kconf.Config {
		return kconf.Config{Brokers: []string{m[1]}, Protocol: kconf.SASLSSL, Mechanism: kconf.MechScramSHA512,
			Username: user, Password: kconf.Secret(pass), CAFile: pki.CA}
	}
	vs, err := kafka.ReadRules(pingCtx(t), as("analyst", "analyst-password-1"), kafka.DefaultTopics.Rules)
	if err != nil || len(vs) != 1 {
		t.Errorf("the analyst reads the rules: %v; %+v", err, vs)
	}
	if _, err := kafka.ReadRules(pingCtx(t), as("gateway", "gateway-password-1"), kafka.DefaultTopics.Rules); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("the gateway reads the rules: %v, want TopicAuthorizationFailed", err)
	}
	if strings.Contains(p.logs(), "vigil-service-password") {
		t.Errorf("the log holds the service's password:\n%s", p.logs())
	}
}
