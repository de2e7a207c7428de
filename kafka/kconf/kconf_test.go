package kconf

import (
	"bytes"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

const password = "pa55-w0rd-never-printed"

func writeFile(t *testing.T, name, text string) string {
	t.Helper()
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

func TestReadProperties(t *testing.T) {
	p := writeFile(t, "client.properties", `# kcat -F reads this file too
bootstrap.servers=a:9093,b:9093
security.protocol = SASL_SSL
! a Java-style comment
sasl.mechanism: SCRAM-SHA-512
sasl.username analyst

sasl.password=`+password+`
ssl.ca.location=/etc/ssl/ca.pem
`)
	got, err := ReadProperties(p)
	if err != nil {
		t.Fatal(err)
	}
	want := []Setting{
		{"bootstrap.servers", "a:9093,b:9093", p + ":2"},
		{"security.protocol", "SASL_SSL", p + ":3"},
		{"sasl.mechanism", "SCRAM-SHA-512", p + ":5"},
		{"sasl.username", "analyst", p + ":6"},
		{"sasl.password", password, p + ":8"},
		{"ssl.ca.location", "/etc/ssl/ca.pem", p + ":9"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Fatalf("settings (-want +got):\n%s", d)
	}
	var c Config
	if err := c.Set(got...); err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	wantC := Config{Brokers: []string{"a:9093", "b:9093"}, Protocol: SASLSSL, Mechanism: MechScramSHA512,
		Username: "analyst", Password: password, CAFile: "/etc/ssl/ca.pem"}
	if d := cmp.Diff(wantC, c); d != "" {
		t.Fatalf("config (-want +got):\n%s", d)
	}
	if got, want := c.String(), "a:9093,b:9093 via SASL_SSL SCRAM-SHA-512 as analyst"; got != want {
		t.Errorf("String() = %q, want %q", got, want)
	}
	if got, want := c.Principal(), "User:analyst"; got != want {
		t.Errorf("Principal() = %q, want %q", got, want)
	}
}

func TestReadPropertiesMalformed(t *testing.T) {
	p := writeFile(t, "bad.properties", "bootstrap.servers=a:1\n=nothing\n")
	_, err := ReadProperties(p)
	if got, want := fmt.Sprint(err), p+":2: want name=value"; got != want {
		t.Errorf("error %q, want %q", got, want)
	}
}

// An unknown property is an error that names it, where it was set, and
// every property Vigil knows; a bad value never echoes a secret.
func TestSetErrors(t *testing.T) {
	var c Config
	err := c.Set(
		Setting{"sasl.pasword", password, "f.properties:4"},
		Setting{"security.protocol", "TLS", "VIGIL_KAFKA_SECURITY_PROTOCOL"},
		Setting{"sasl.oauthbearer.token.endpoint.url", "https://idp.example/token", "config vigil.yaml:3"},
	)
	want := `f.properties:4: unknown Kafka client property "sasl.pasword"; Vigil reads: bootstrap.servers, client.id, ` +
		`sasl.mechanism, sasl.mechanisms, sasl.oauthbearer.token.endpoint.url, sasl.password, sasl.username, ` +
		`security.protocol, ssl.ca.location, ssl.certificate.location, ssl.endpoint.identification.algorithm, ` +
		`ssl.key.location` + "\n" +
		`VIGIL_KAFKA_SECURITY_PROTOCOL: security.protocol: "TLS" is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL` + "\n" +
		`config vigil.yaml:3: sasl.oauthbearer.token.endpoint.url: "https://idp.example/token": Vigil reads the token from a file ` +
		`(file:///path/to/token); fetching it from an identity provider is left to a sidecar that writes that file`
	if got := fmt.Sprint(err); got != want {
		t.Errorf("error:\n%s\nwant:\n%s", got, want)
	}
	if strings.Contains(fmt.Sprint(err), password) {
		t.Error("the error holds the password")
	}
}

func TestValidate(t *testing.T) {
	b := []string{"k:9092"}
	tests := []struct {
		name string
		c    Config
		want string
	}{
		{"plaintext", Config{Brokers: b}, ""},
		{"no brokers", Config{}, "no bootstrap brokers: give --brokers or bootstrap.servers"},
		{"SASL without mechanism", Config{Brokers: b, Protocol: SASLSSL}, "security.protocol is SASL_SSL but sasl.mechanism is not set"},
		{"mechanism without SASL", Config{Brokers: b, Protocol: SSL, Mechanism: MechPlain, Username: "u", Password: "p"},
			"sasl.mechanism is PLAIN but security.protocol is SSL: use SASL_SSL (or SASL_PLAINTEXT)"},
		{"credentials without SASL", Config{Brokers: b, Username: "u"},
			"sasl.username or sasl.password is set but security.protocol is PLAINTEXT: use SASL_SSL (or SASL_PLAINTEXT)"},
		{"SCRAM without password", Config{Brokers: b, Protocol: SASLSSL, Mechanism: MechScramSHA256, Username: "u"},
			"sasl.mechanism SCRAM-SHA-256 needs sasl.username and sasl.password"},
		{"OAUTHBEARER without token", Config{Brokers: b, Protocol: SASLSSL, Mechanism: MechOAuthBearer},
			"sasl.mechanism OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url=file:///path/to/token"},
		{"AWS with half the keys", Config{Brokers: b, Protocol: SASLSSL, Mechanism: MechAWSMSKIAM, Username: "AKID"},
			"AWS_MSK_IAM takes the access key id and secret as sasl.username and sasl.password, both or neither (neither: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"},
		{"AWS from the environment", Config{Brokers: b, Protocol: SASLSSL, Mechanism: MechAWSMSKIAM}, ""},
		{"CA without TLS", Config{Brokers: b, CAFile: "ca.pem"}, "ssl.* files are set but security.protocol is PLAINTEXT: use SSL or SASL_SSL"},
		{"certificate without key", Config{Brokers: b, Protocol: SSL, CertFile: "c.pem"}, "ssl.certificate.location and ssl.key.location go together"},
		{"in-process with TLS", Config{Brokers: b, Protocol: SSL, Dial: (&net.Dialer{}).DialContext}, "security.protocol is SSL, but an in-process connection carries no TLS"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.c.Validate()
			got := ""
			if err != nil {
				got = err.Error()
			}
			if got != tt.want {
				t.Errorf("Validate() = %q, want %q", got, tt.want)
			}
		})
	}
}

// A Config can be printed, logged and marshalled whole: the password never
// shows.
func TestSecretNeverPrints(t *testing.T) {
	c := Config{Brokers: []string{"k:9093"}, Protocol: SASLSSL, Mechanism: MechPlain, Username: "u", Password: password}
	var logged bytes.Buffer
	slog.New(slog.NewJSONHandler(&logged, nil)).Info("kafka", "cluster", c, "password", c.Password)
	js, err := json.Marshal(c)
	if err != nil {
		t.Fatal(err)
	}
	for name, s := range map[string]string{
		"%v": fmt.Sprintf("%v", c), "%+v": fmt.Sprintf("%+v", c), "%#v": fmt.Sprintf("%#v", c),
		//lint:ignore S1025 what is tested is how fmt prints a Secret, not its String
		"%s of the password": fmt.Sprintf("%s", c.Password), "%#v of the password": fmt.Sprintf("%#v", c.Password),
		"slog": logged.String(), "json": string(js),
	} {
		if strings.Contains(s, password) {
			t.Errorf("%s shows the password: %s", name, s)
		}
	}
	if !strings.Contains(string(js), `"Password":"[redacted]"`) {
		t.Errorf("json: %s", js)
	}
}

func TestFromEnv(t *testing.T) {
	env := []string{
		"VIGIL_KAFKA_SASL_PASSWORD=" + password,
		"VIGIL_KAFKA_SECURITY_PROTOCOL=SASL_SSL",
		"VIGIL_KAFKA_PROPERTIES=/etc/vigil/client.properties", // a flag's variable
		"VIGIL_BROKERS=k:9092",
		"KAFKA_SASL_USERNAME=not-ours",
	}
	got := FromEnv(env, map[string]bool{"VIGIL_KAFKA_PROPERTIES": true})
	want := []Setting{
		{"sasl.password", password, "VIGIL_KAFKA_SASL_PASSWORD"},
		{"security.protocol", "SASL_SSL", "VIGIL_KAFKA_SECURITY_PROTOCOL"},
	}
	if d := cmp.Diff(want, got); d != "" {
		t.Errorf("(-want +got):\n%s", d)
	}
	if got := EnvName("ssl.endpoint.identification.algorithm"); got != "VIGIL_KAFKA_SSL_ENDPOINT_IDENTIFICATION_ALGORITHM" {
		t.Errorf("EnvName = %s", got)
	}
	for _, name := range Known() {
		if strings.Contains(name, "_") {
			t.Errorf("property %q has an underscore: its variable would not map back", name)
		}
	}
}
