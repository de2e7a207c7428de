package kafka

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/vigil-cep/vigil/internal/testpki"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// writeUsersFile writes a users file (mode 0600) and returns its path.
func writeUsersFile(t *testing.T, dir, src string) string {
	t.Helper()
	path := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// startSecureBroker starts a broker with the users of src, over TLS when
// pki is not nil, closed at the end of the test.
func startSecureBroker(t *testing.T, src, dataDir string, pki *testpki.PKI) *Broker {
	t.Helper()
	users, err := LoadBrokerUsers(writeUsersFile(t, t.TempDir(), src), nil)
	if err != nil {
		t.Fatal(err)
	}
	cfg := BrokerConfig{Listen: "127.0.0.1:0", DataDir: dataDir, Users: users, Partitions: 1}
	if pki != nil {
		cfg.TLS = pki.ServerTLS(t, false)
	}
	b, err := StartBroker(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(b.Close)
	return b
}

// userConfig is the client connection of user to b.
func userConfig(b *Broker, pki *testpki.PKI, mech, user, pass string) kconf.Config {
	kc := kconf.Config{Brokers: []string{b.Addr()}, Protocol: kconf.SASLPlaintext, Mechanism: mech, Username: user, Password: kconf.Secret(pass)}
	if pki != nil {
		kc.Protocol, kc.CAFile = kconf.SASLSSL, pki.CA
	}
	return kc
}

func testCtx(t *testing.T, d time.Duration) context.Context {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

// newUserClient returns a franz-go client of kc, closed at the end of the test.
func newUserClient(t *testing.T, kc kconf.Config, extra ...kgo.Opt) *kgo.Client {
	t.Helper()
	opts, err := kc.Opts()
	if err != nil {
		t.Fatal(err)
	}
	cl, err := kgo.NewClient(append(append(opts, kgo.RequestRetries(2), kgo.RecordRetries(2)), extra...)...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(cl.Close)
	return cl
}

// produce writes one record as kc and returns the produce error.
func produce(t *testing.T, kc kconf.Config, topic, value string, extra ...kgo.Opt) error {
	t.Helper()
	cl := newUserClient(t, kc, append([]kgo.Opt{kgo.AllowAutoTopicCreation()}, extra...)...)
	return cl.ProduceSync(testCtx(t, 20*time.Second), &kgo.Record{Topic: topic, Value: []byte(value)}).FirstErr()
}

// consumeValues reads topic as kc (in group when not empty) until it has
// want values or the deadline passes, and returns what it read.
func consumeValues(t *testing.T, kc kconf.Config, topic, group string, want int) ([]string, error) {
	t.Helper()
	opts := []kgo.Opt{kgo.ConsumeTopics(topic), kgo.ConsumeResetOffset(kgo.NewOffset().AtStart()), kgo.FetchMaxWait(200 * time.Millisecond)}
	if group != "" {
		opts = append(opts, kgo.ConsumerGroup(group))
	}
	cl := newUserClient(t, kc, opts...)
	ctx := testCtx(t, 20*time.Second)
	var got []string
	for len(got) < want {
		fs := cl.PollFetches(ctx)
		if ctx.Err() != nil {
			return got, ctx.Err()
		}
		var errs []error
		fs.EachError(func(_ string, _ int32, err error) { errs = append(errs, err) })
		if err := errors.Join(errs...); err != nil {
			return got, err
		}
		fs.EachRecord(func(r *kgo.Record) { got = append(got, string(r.Value)) })
	}
	return got, nil
}

// TestBrokerSASLMechanisms: a user of each mechanism connects over TLS with
// a client built from kconf; a wrong password, an unknown user and a client
// without SASL are refused, the first two at once with
// SaslAuthenticationFailed.
func TestBrokerSASLMechanisms(t *testing.T) {
	pki := testpki.New(t, "broker")
	b := startSecureBroker(t, `
users:
  - name: plain-user
    password: plain-password-1
    mechanism: PLAIN
    write: [mech.*]
  - name: scram256-user
    password: scram256-password
    mechanism: scram-sha-256
    write: [mech.*]
  - name: scram512-user
    password: scram512-password
    write: [mech.*]
`, "", pki)
	for _, u := range []struct{ mech, name, pass string }{
		{kconf.MechPlain, "plain-user", "plain-password-1"},
		{kconf.MechScramSHA256, "scram256-user", "scram256-password"},
		{kconf.MechScramSHA512, "scram512-user", "scram512-password"},
	} {
		kc := userConfig(b, pki, u.mech, u.name, u.pass)
		if err := kconf.Ping(testCtx(t, 20*time.Second), kc); err != nil {
			t.Errorf("%s: %v", u.mech, err)
			continue
		}
		if err := produce(t, kc, "mech."+u.name, "hello"); err != nil {
			t.Errorf("%s: produce: %v", u.mech, err)
		}
	}
	for _, bad := range []kconf.Config{
		userConfig(b, pki, kconf.MechScramSHA512, "scram512-user", "not-the-password"),
		userConfig(b, pki, kconf.MechScramSHA256, "scram512-user", "scram512-password"), // a mechanism the user has not
		userConfig(b, pki, kconf.MechPlain, "plain-user", "not-the-password"),
		userConfig(b, pki, kconf.MechPlain, "nobody", "plain-password-1"),
	} {
		start := time.Now()
		err := kconf.Ping(testCtx(t, 20*time.Second), bad)
		if !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s: %v, want SaslAuthenticationFailed", bad, err)
		} else if d := time.Since(start); d > 5*time.Second {
			t.Errorf("%s: refused after %v", bad, d)
		}
		if err != nil && strings.Contains(err.Error(), string(bad.Password)) {
			t.Errorf("the error holds the password: %v", err)
		}
	}
	noSASL := kconf.Config{Brokers: []string{b.Addr()}, Protocol: kconf.SSL, CAFile: pki.CA}
	if err := kconf.Ping(testCtx(t, 10*time.Second), noSASL); err == nil {
		t.Error("a client without SASL was let in")
	}
}

const aclUsers = `
users:
  - name: admin
    password: admin-password-1
    superuser: true
  - name: analyst
    password: analyst-password
    read: [vigil.rules, vigil.decisions]
    write: [vigil.rules]
  - name: reader
    password: reader-password
    read: ["vigil.*"]
    groups: [readers]
  - name: gateway
    password: gateway-password
    write: ["in.*"]
`

// TestBrokerACLs: what the users file grants is what each user may do.
func TestBrokerACLs(t *testing.T) {
	pki := testpki.New(t, "acl")
	b := startSecureBroker(t, aclUsers, "", pki)
	as := func(user string) kconf.Config {
		return userConfig(b, pki, kconf.MechScramSHA512, user, user+"-password")
	}
	admin := userConfig(b, pki, kconf.MechScramSHA512, "admin", "admin-password-1")
	if err := produce(t, admin, "vigil.decisions", "d1"); err != nil {
		t.Fatalf("superuser: %v", err)
	}
	if err := produce(t, as("analyst"), "vigil.rules", "v1"); err != nil {
		t.Errorf("analyst writes vigil.rules: %v", err)
	}
	if err := produce(t, as("analyst"), "vigil.decisions", "forged"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("analyst writes vigil.decisions: %v, want TopicAuthorizationFailed", err)
	}
	if err := produce(t, as("gateway"), "in.transactions", "tx"); err != nil {
		t.Errorf("gateway writes in.transactions (prefix in.*): %v", err)
	}
	if err := produce(t, as("gateway"), "vigil.rules", "evil"); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("gateway writes vigil.rules: %v, want TopicAuthorizationFailed", err)
	}
	// The reader may not write: without idempotence the produce itself is
	// refused; with it (franz-go's default), already its producer id.
	if err := produce(t, as("reader"), "vigil.decisions", "forged", kgo.DisableIdempotentWrite()); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("reader writes vigil.decisions: %v, want TopicAuthorizationFailed", err)
	}
	if err := produce(t, as("reader"), "vigil.decisions", "forged"); !errors.Is(err, kerr.ClusterAuthorizationFailed) {
		t.Errorf("reader writes vigil.decisions idempotently: %v, want ClusterAuthorizationFailed", err)
	}
	if got, err := consumeValues(t, as("reader"), "vigil.decisions", "readers", 1); err != nil || !slices.Equal(got, []string{"d1"}) {
		t.Errorf("reader reads vigil.decisions in its group: %q, %v", got, err)
	}
	if _, err := consumeValues(t, as("reader"), "vigil.decisions", "others", 1); !errors.Is(err, kerr.GroupAuthorizationFailed) {
		t.Errorf("reader in a group it was not given: %v, want GroupAuthorizationFailed", err)
	}
	if _, err := consumeValues(t, as("gateway"), "vigil.decisions", "", 1); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("gateway reads vigil.decisions: %v, want TopicAuthorizationFailed", err)
	}
	if got, err := consumeValues(t, as("analyst"), "vigil.rules", "", 1); err != nil || !slices.Equal(got, []string{"v1"}) {
		t.Errorf("analyst reads vigil.rules without a group: %q, %v", got, err)
	}
	// PushRules, as `vigil rules push` runs it, with the analyst's grants.
	if _, err := PushRules(testCtx(t, 30*time.Second), as("analyst"), "vigil.rules2", []byte(rulesA), 0, "", ""); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("analyst pushes on a topic it was not given: %v", err)
	}
}

// TestBrokerRestartTakesTheUsersFile: after a restart on the same data
// directory, the users file as it is now is all that counts: a removed
// user is refused, a changed password and changed grants take effect, a
// new user is let in; the data are still there; and no users or ACLs are
// left in the directory while the broker is down.
func TestBrokerRestartTakesTheUsersFile(t *testing.T) {
	pki := testpki.New(t, "restart")
	dir := t.TempDir()
	b := startSecureBroker(t, `
users:
  - name: admin
    password: admin-password-1
    superuser: true
  - name: alice
    password: alice-password-1
    write: [t]
  - name: bob
    password: bob-password-old
    mechanism: PLAIN
    write: [t]
`, dir, pki)
	if err := produce(t, userConfig(b, pki, kconf.MechScramSHA512, "alice", "alice-password-1"), "t", "from alice"); err != nil {
		t.Fatal(err)
	}
	if err := produce(t, userConfig(b, pki, kconf.MechPlain, "bob", "bob-password-old"), "t", "from bob"); err != nil {
		t.Fatal(err)
	}
	b.Close()
	for _, f := range authStateFiles {
		if _, err := os.Stat(filepath.Join(dir, f)); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("%s after Close: %v", f, err)
		}
	}

	b = startSecureBroker(t, `
users:
  - name: admin
    password: admin-password-1
    superuser: true
  - name: bob
    password: bob-password-new
    mechanism: PLAIN
    read: [t]
  - name: carol
    password: carol-password-1
    write: [t]
`, dir, pki)
	for _, gone := range []kconf.Config{
		userConfig(b, pki, kconf.MechScramSHA512, "alice", "alice-password-1"),
		userConfig(b, pki, kconf.MechPlain, "bob", "bob-password-old"),
	} {
		if err := kconf.Ping(testCtx(t, 20*time.Second), gone); !errors.Is(err, kerr.SaslAuthenticationFailed) {
			t.Errorf("%s after the restart: %v, want SaslAuthenticationFailed", gone, err)
		}
	}
	bob := userConfig(b, pki, kconf.MechPlain, "bob", "bob-password-new")
	if got, err := consumeValues(t, bob, "t", "", 2); err != nil || !slices.Equal(got, []string{"from alice", "from bob"}) {
		t.Errorf("bob reads t with his new password and grant: %q, %v", got, err)
	}
	if err := produce(t, bob, "t", "x", kgo.DisableIdempotentWrite()); !errors.Is(err, kerr.TopicAuthorizationFailed) {
		t.Errorf("bob writes t after losing the grant: %v, want TopicAuthorizationFailed", err)
	}
	if err := produce(t, userConfig(b, pki, kconf.MechScramSHA512, "carol", "carol-password-1"), "t", "from carol"); err != nil {
		t.Errorf("carol, new in the file: %v", err)
	}
}

// TestBrokerAdvertise: metadata names the advertised address, with the
// listening port when it gives none.
func TestBrokerAdvertise(t *testing.T) {
	b, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0", Advertise: "localhost"})
	if err != nil {
		t.Fatal(err)
	}
	defer b.Close()
	cl, err := kgo.NewClient(kgo.SeedBrokers(b.Addr()))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	resp, err := kmsg.NewPtrMetadataRequest().RequestWith(testCtx(t, 20*time.Second), cl)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(b.Addr(), ":")
	if len(resp.Brokers) != 1 || fmt.Sprintf("%s:%d", resp.Brokers[0].Host, resp.Brokers[0].Port) != "localhost:"+port {
		t.Errorf("metadata brokers %+v, want localhost:%s", resp.Brokers, port)
	}
	if _, err := StartBroker(BrokerConfig{Listen: "127.0.0.1:0", Advertise: "host:port"}); err == nil {
		t.Error("a bad advertised address was accepted")
	}
}

// TestBrokerKcat: librdkafka (kcat) authenticates with SCRAM-SHA-512 over
// TLS, which needs the ApiVersions shim (see librdkafkaSASLShim), reads the
// metadata and produces where its user may.
func TestBrokerKcat(t *testing.T) {
	kcat, err := exec.LookPath("kcat")
	if err != nil {
		if kcat, err = exec.LookPath("kafkacat"); err != nil {
			t.Skip("kcat is not installed")
		}
	}
	pki := testpki.New(t, "kcat")
	b := startSecureBroker(t, aclUsers, "", pki)
	dir := t.TempDir()
	props := filepath.Join(dir, "client.properties")
	if err := os.WriteFile(props, fmt.Appendf(nil, `bootstrap.servers=%s
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=analyst
sasl.password=analyst-password
ssl.ca.location=%s
`, b.Addr(), pki.CA), 0o600); err != nil {
		t.Fatal(err)
	}
	run := func(stdin string, args ...string) (string, error) {
		ctx := testCtx(t, 60*time.Second)
		cmd := exec.CommandContext(ctx, kcat, append([]string{"-F", props}, args...)...)
		cmd.Stdin = strings.NewReader(stdin)
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	out, err := run("", "-m", "20", "-L")
	if err != nil || !strings.Contains(out, "1 brokers:") {
		t.Fatalf("kcat -L: %v\n%s", err, out)
	}
	if out, err := run("from kcat\n", "-P", "-t", "vigil.rules"); err != nil {
		t.Fatalf("kcat -P: %v\n%s", err, out)
	}
	if got, err := consumeValues(t, userConfig(b, pki, kconf.MechScramSHA512, "admin", "admin-password-1"), "vigil.rules", "", 1); err != nil || !slices.Equal(got, []string{"from kcat"}) {
		t.Errorf("what kcat wrote: %q, %v", got, err)
	}
	// A wrong password is refused as such (see authConn), not as a
	// connection closed; kcat retries until its metadata timeout.
	if err := os.WriteFile(props, fmt.Appendf(nil, `bootstrap.servers=%s
security.protocol=SASL_SSL
sasl.mechanisms=SCRAM-SHA-512
sasl.username=analyst
sasl.password=wrong-password
ssl.ca.location=%s
`, b.Addr(), pki.CA), 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := run("", "-m", "2", "-L"); err == nil || !strings.Contains(out, "SASL authentication error: Authentication failed") {
		t.Errorf("kcat with a wrong password: %v\n%s", err, out)
	}
}

// TestBrokerUsersFile: the parser's reading of a good file, and its
// positioned errors on a bad one, none of which holds a password.
func TestBrokerUsersFile(t *testing.T) {
	users, err := ParseBrokerUsers("users.yaml", []byte(aclUsers))
	if err != nil {
		t.Fatal(err)
	}
	want := []BrokerUser{
		{Name: "admin", Password: "admin-password-1", Mechanism: kconf.MechScramSHA512, Superuser: true},
		{Name: "analyst", Password: "analyst-password", Mechanism: kconf.MechScramSHA512,
			Read: []string{"vigil.rules", "vigil.decisions"}, Write: []string{"vigil.rules"}},
		{Name: "reader", Password: "reader-password", Mechanism: kconf.MechScramSHA512, Read: []string{"vigil.*"}, Groups: []string{"readers"}},
		{Name: "gateway", Password: "gateway-password", Mechanism: kconf.MechScramSHA512, Write: []string{"in.*"}},
	}
	if fmt.Sprintf("%#v", users) != fmt.Sprintf("%#v", want) || users[1].Password != "analyst-password" {
		t.Errorf("users:\n%#v\nwant\n%#v", users, want)
	}
	acls := users[2].acls()
	if len(acls) != 5 || acls[0].ResourceName != "vigil." || acls[0].ResourcePatternType != kmsg.ACLResourcePatternTypePrefixed ||
		acls[3].ResourceType != kmsg.ACLResourceTypeGroup || acls[3].ResourcePatternType != kmsg.ACLResourcePatternTypeLiteral {
		t.Errorf("reader's ACLs: %+v", acls)
	}
	if a := (BrokerUser{Name: "x", Read: []string{"*"}}).acls(); a[0].ResourceName != "*" || a[0].ResourcePatternType != kmsg.ACLResourcePatternTypeLiteral {
		t.Errorf(`"*" is %+v, want Kafka's literal wildcard`, a[0])
	}

	const secret = "s3cret-pa55word"
	_, err = ParseBrokerUsers("bad.yaml", []byte(`users:
  - name: ok-user
    password: `+secret+`
    mechanism: SCRAM-SHA-1
  - name: "has space"
    password: `+secret+`
  - name: short
    password: short
    read: vigil.rules
  - name: wild
    password: `+secret+`
    write: ["vi*gil"]
    colour: blue
  - name: boss
    password: `+secret+`
    superuser: yes please
  - name: root
    password: `+secret+`
    superuser: true
    read: [x]
  - name: ok-user
    password: `+secret+`
  - password: `+secret+`
`))
	if err == nil {
		t.Fatal("a bad file was accepted")
	}
	for _, w := range []string{
		`bad.yaml:4: user "ok-user": mechanism "SCRAM-SHA-1" is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512`,
		`bad.yaml:5: name "has space": use letters, digits`,
		`bad.yaml:8: user "short": the password is shorter than 12 bytes`,
		`bad.yaml:9: user "short": read is a list of topic names`,
		`bad.yaml:12: user "wild": write: "vi*gil": '*' may only end a name`,
		`bad.yaml:13: unknown key "colour"`,
		`bad.yaml:16: user "boss": superuser is true or false`,
		`bad.yaml:20: user "root": a superuser bypasses the ACLs; read means nothing for it`,
		`bad.yaml:21: user "ok-user" is listed twice (first on line 2)`,
		`bad.yaml:23: a user without a name`,
	} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("errors lack %q:\n%v", w, err)
		}
	}
	if strings.Contains(err.Error(), secret) || strings.Contains(err.Error(), "short\n") {
		t.Errorf("an error holds a password:\n%v", err)
	}
	for src, w := range map[string]string{
		"":                     "e.yaml: no users",
		"users: []":            "e.yaml:1: no users",
		"people: []":           `e.yaml:1: unknown key "people"`,
		"- a":                  "e.yaml:1: want a map",
		"users:\n  - name: [x": "e.yaml: yaml: line ",
	} {
		if _, err := ParseBrokerUsers("e.yaml", []byte(src)); err == nil || !strings.Contains(err.Error(), w) {
			t.Errorf("%q: %v, want %q", src, err, w)
		}
	}
}
