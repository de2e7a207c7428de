package main

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/internal/testpki"
)

// securedCluster is a `vigil broker` with SCRAM-SHA-512 over TLS and ACLs,
// and a properties file per user: the same files work with kcat -F.
type securedCluster struct {
	addr  string
	pki   *testpki.PKI
	props map[string]string // user → client.properties
}

const securedUsers = `users:
  - name: vigil
    password: vigil-service-password
    superuser: true
  - name: analyst
    password: analyst-password-1
    read: [vigil.rules]
    write: [vigil.rules]
  - name: reader
    password: reader-password-1
    read: [vigil.rules, vigil.decisions]
  - name: gateway
    password: gateway-password-1
    write: [transactions, logins, devices]
`

var securedPasswords = map[string]string{"vigil": "vigil-service-password", "analyst": "analyst-password-1",
	"reader": "reader-password-1", "gateway": "gateway-password-1"}

func startSecuredCluster(t *testing.T) *securedCluster {
	t.Helper()
	dir := t.TempDir()
	c := &securedCluster{pki: testpki.New(t, "e2e"), props: map[string]string{}}
	users := filepath.Join(dir, "users.yaml")
	if err := os.WriteFile(users, []byte(securedUsers), 0o600); err != nil {
		t.Fatal(err)
	}
	_, line := startVigil(t, "vigil broker listening on", "broker", "--listen", "127.0.0.1:0",
		"--data-dir", filepath.Join(dir, "broker"), "--sasl-users", users,
		"--tls-cert", c.pki.ServerCert, "--tls-key", c.pki.ServerKey)
	c.addr = lastField(line)
	for user, pass := range securedPasswords {
		c.props[user] = c.writeProps(t, user, pass, c.pki.CA)
	}
	return c
}

// writeProps writes a client properties file for user.
func (c *securedCluster) writeProps(t *testing.T, user, pass, ca string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), user+".properties")
	src := fmt.Sprintf("bootstrap.servers=%s\nsecurity.protocol=SASL_SSL\nsasl.mechanism=SCRAM-SHA-512\n"+
		"sasl.username=%s\nsasl.password=%s\nssl.ca.location=%s\n", c.addr, user, pass, ca)
	if err := os.WriteFile(p, []byte(src), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// kcat runs kcat -F props with args and returns its standard output.
func (c *securedCluster) kcat(t *testing.T, user string, stdin string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("kcat", append([]string{"-F", c.props[user]}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr strings.Builder
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return string(out), fmt.Errorf("kcat %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return string(out), nil
}

// TestServeSecuredKafka runs the service against a broker that takes only
// SCRAM-SHA-512 over TLS and enforces ACLs: it consumes, decides and
// checkpoints to the Kafka store as its own principal; kcat reads the
// decisions with the same properties files; a wrong password and an
// untrusted CA each stop it at once with one clear error; a principal
// without write on vigil.rules cannot publish a ruleset, and the one that
// did is recorded as its author.
func TestServeSecuredKafka(t *testing.T) {
	if testing.Short() {
		t.Skip("end-to-end")
	}
	needKcat(t)
	c := startSecuredCluster(t)

	// Refusals first, before anything exists: one error line each, exit 1,
	// and no password in it.
	for _, tt := range []struct {
		name, props, want string
	}{
		{"wrong password", c.writeProps(t, "vigil", "not-the-password", c.pki.CA), "check sasl.username and sasl.password"},
		{"untrusted CA", c.writeProps(t, "vigil", securedPasswords["vigil"], testpki.New(t, "untrusted").CA),
			"TLS: the broker's certificate is not signed by a CA in ssl.ca.location"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			cmd := exec.CommandContext(ctx, vigilBinary(t), "serve", "--kafka-properties", tt.props,
				"--data-dir", t.TempDir(), "--http", "")
			out, err := cmd.CombinedOutput()
			if ctx.Err() != nil {
				t.Fatalf("vigil serve still running after a minute:\n%s", out)
			}
			if code := cmd.ProcessState.ExitCode(); err == nil || code != 1 {
				t.Fatalf("exit %d, want 1:\n%s", code, out)
			}
			var errLines []string
			for l := range strings.Lines(string(out)) {
				if strings.Contains(l, "vigil serve:") || strings.Contains(l, "level=ERROR") {
					errLines = append(errLines, l)
				}
			}
			if len(errLines) != 1 || !strings.Contains(errLines[0], tt.want) {
				t.Errorf("want one error line saying %q, got:\n%s", tt.want, out)
			}
			if strings.Contains(string(out), "not-the-password") || strings.Contains(string(out), securedPasswords["vigil"]) {
				t.Errorf("the output holds a password:\n%s", out)
			}
		})
	}

	genArgs := []string{"--events", "8000", "--users", "800", "--seed", "11"}
	p, _ := startVigil(t, "vigil serving", "serve", "--kafka-properties", c.props["vigil"], "--checkpoints", "kafka",
		"--data-dir", t.TempDir(), "--checkpoint-interval", "1s")
	if strings.Contains(p.logs(), securedPasswords["vigil"]) {
		t.Errorf("the log holds the password:\n%s", p.logs())
	}

	// The gateway writes the workload with kcat, as in the other end-to-end
	// tests; the reader reads the decisions with kcat.
	dir := t.TempDir()
	for _, topic := range []string{"transactions", "logins", "devices"} {
		file := filepath.Join(dir, topic+".tsv")
		if out, err := exec.Command(vigilBinary(t), append([]string{"gen", "--kafka", topic, "--out", file}, genArgs...)...).CombinedOutput(); err != nil {
			t.Fatalf("vigil gen: %v\n%s", err, out)
		}
		if _, err := c.kcat(t, "gateway", "", "-P", "-t", topic, "-K", "\t", "-X", "partitioner=murmur2_random", "-l", file); err != nil {
			t.Fatal(err)
		}
	}
	want := replayDecisions(t, genArgs...)
	var recs []kafkaRecord
	deadline := time.Now().Add(3 * time.Minute)
	for {
		out, err := c.kcat(t, "reader", "", "-C", "-t", "vigil.decisions", "-e", "-q", "-f", "%k\t%s\n")
		if err != nil {
			t.Fatal(err)
		}
		recs = recs[:0]
		seen := map[string]bool{}
		for l := range strings.Lines(out) {
			k, v, _ := strings.Cut(strings.TrimSuffix(l, "\n"), "\t")
			recs = append(recs, kafkaRecord{k, v})
			seen[k] = true
		}
		missing := 0
		for id := range want {
			if !seen[id] {
				missing++
			}
		}
		if missing == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d transactions undecided after 3 minutes; vigil's log:\n%s", missing, len(want), p.logs())
		}
		time.Sleep(500 * time.Millisecond) // polling a running service for its output
	}
	checkDecisions(t, recs, want)

	// The checkpoints went to the Kafka store, which only the service's
	// principal may read.
	for start := time.Now(); ; {
		out, err := c.kcat(t, "vigil", "", "-C", "-t", "vigil.checkpoints", "-e", "-q", "-f", "%o\n")
		if err != nil {
			t.Fatal(err)
		}
		if strings.Count(out, "\n") > 0 {
			break
		}
		if time.Since(start) > time.Minute {
			t.Fatalf("no checkpoint on vigil.checkpoints after a minute; vigil's log:\n%s", p.logs())
		}
		time.Sleep(200 * time.Millisecond) // polling for the next checkpoint interval
	}
	if _, err := c.kcat(t, "reader", "", "-C", "-t", "vigil.checkpoints", "-e", "-q"); err == nil {
		t.Error("reader may read vigil.checkpoints")
	}

	// Publishing: refused to the reader, recorded with the analyst's
	// principal.
	pulled := filepath.Join(t.TempDir(), "rules.yaml")
	if code, out, stderr := runCLI(t, "rules", "pull", "--kafka-properties", c.props["analyst"], "--out", pulled); code != 0 {
		t.Fatalf("pull: exit %d: %s %s", code, out, stderr)
	}
	doc, _ := os.ReadFile(pulled)
	os.WriteFile(pulled, append(doc, []byte("# reviewed\n")...), 0o600)
	code, out, stderr := runCLI(t, "rules", "push", "--kafka-properties", c.props["reader"], pulled)
	if code == 0 || !strings.Contains(stderr, "the broker's ACLs do not allow User:reader") {
		t.Errorf("push as reader: exit %d, stdout %q, stderr %q; want refused by the ACLs", code, out, stderr)
	}
	if code, out, stderr := runCLI(t, "rules", "push", "--kafka-properties", c.props["analyst"], pulled); code != 0 {
		t.Fatalf("push as analyst: exit %d: %s %s", code, out, stderr)
	}
	if code, out, stderr := runCLI(t, "rules", "pull", "--kafka-properties", c.props["reader"], "--out", pulled); code != 0 ||
		!strings.Contains(out, "by User:analyst at") {
		t.Errorf("pull after the analyst's push: exit %d, %q %q; want the author User:analyst", code, out, stderr)
	}
}
