// Package kconf is how Vigil connects to a Kafka cluster: the bootstrap
// brokers, TLS and SASL, read from the client properties Kafka users already
// write for their other clients (a file that also works with `kcat -F`), and
// turned into franz-go options that every Kafka client Vigil opens shares.
//
// Secrets (sasl.password, the OAUTHBEARER token, AWS keys) are held as
// [Secret], which prints as "[redacted]": a Config can be logged, dumped or
// wrapped in an error without leaking them. See docs/design.md "Kafka
// security".
package kconf

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"sort"
	"strings"
)

// Security protocols, as Kafka names them (security.protocol).
const (
	Plaintext     = "PLAINTEXT"
	SSL           = "SSL"
	SASLPlaintext = "SASL_PLAINTEXT"
	SASLSSL       = "SASL_SSL"
)

// SASL mechanisms (sasl.mechanism).
const (
	MechPlain       = "PLAIN"
	MechScramSHA256 = "SCRAM-SHA-256"
	MechScramSHA512 = "SCRAM-SHA-512"
	MechOAuthBearer = "OAUTHBEARER"
	MechAWSMSKIAM   = "AWS_MSK_IAM"
)

// Config says how to reach a cluster. The zero value with Brokers set is a
// plaintext connection without authentication.
type Config struct {
	Brokers  []string
	Protocol string // security.protocol; "" is PLAINTEXT
	ClientID string // client.id; "" keeps franz-go's default

	Mechanism string // sasl.mechanism
	Username  string // sasl.username (for AWS_MSK_IAM: the access key id)
	Password  Secret // sasl.password (for AWS_MSK_IAM: the secret access key)
	// TokenFile holds the OAUTHBEARER token, re-read at every authentication
	// so that whoever renews it (a sidecar, a cron job) only rewrites the file.
	TokenFile string

	CAFile   string // ssl.ca.location; "" trusts the system roots
	CertFile string // ssl.certificate.location: the client certificate, with KeyFile
	KeyFile  string // ssl.key.location
	// NoHostnameCheck turns off the check that the broker's certificate names
	// the host dialed (ssl.endpoint.identification.algorithm=none). The chain
	// is still verified.
	NoHostnameCheck bool

	// Dial, when set, opens every connection in place of the network: the
	// embedded broker's in-process connections (kafka.Broker.Dial). They
	// never leave the process, so they carry no TLS; SASL is as over the
	// network.
	Dial func(ctx context.Context, network, addr string) (net.Conn, error) `json:"-"`
}

// Secret is a value that never prints: fmt, slog and encoding/json all show
// "[redacted]" (or "" when it is empty, so that a dump says it is unset).
type Secret string

func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return "[redacted]"
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return fmt.Sprintf("%q", s.String()) }

// LogValue keeps slog from printing the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText keeps encoding/json and YAML from printing the value.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// TLS reports whether connections use TLS.
func (c *Config) TLS() bool { return c.Protocol == SSL || c.Protocol == SASLSSL }

// SASL reports whether connections authenticate with SASL.
func (c *Config) SASL() bool { return c.Protocol == SASLPlaintext || c.Protocol == SASLSSL }

// Principal is who the cluster sees: "User:<name>" for PLAIN and SCRAM, the
// empty string when the client does not authenticate or its identity is not
// a user name it knows (OAUTHBEARER, AWS_MSK_IAM: the broker derives it).
func (c *Config) Principal() string {
	if !c.SASL() {
		return ""
	}
	switch c.Mechanism {
	case MechPlain, MechScramSHA256, MechScramSHA512:
		return "User:" + c.Username
	}
	return ""
}

// String describes the connection without its secrets, for logs and errors.
func (c Config) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s via %s", strings.Join(c.Brokers, ","), c.protocol())
	if c.Dial != nil {
		b.WriteString(" in-process")
	}
	if c.SASL() {
		fmt.Fprintf(&b, " %s", c.Mechanism)
		if c.Username != "" && c.Mechanism != MechAWSMSKIAM {
			fmt.Fprintf(&b, " as %s", c.Username)
		}
	}
	return b.String()
}

// LogValue is String, for slog.
func (c Config) LogValue() slog.Value { return slog.StringValue(c.String()) }

func (c *Config) protocol() string {
	if c.Protocol == "" {
		return Plaintext
	}
	return c.Protocol
}

// A property is one client setting Vigil reads, under Kafka's name for it.
type property struct {
	name string
	set  func(c *Config, v string) error
}

// properties are the client properties Vigil knows. The names are those of
// Kafka's Java client and librdkafka, so that one file configures Vigil,
// kcat and the team's other clients.
var properties = []property{
	// bootstrap.servers: host:port,... (--brokers overrides it)
	{name: "bootstrap.servers", set: func(c *Config, v string) error {
		c.Brokers = splitList(v)
		if len(c.Brokers) == 0 {
			return errors.New("no broker address")
		}
		return nil
	}},
	// security.protocol: PLAINTEXT, SSL, SASL_PLAINTEXT or SASL_SSL
	{name: "security.protocol", set: func(c *Config, v string) error {
		switch p := strings.ToUpper(v); p {
		case Plaintext, SSL, SASLPlaintext, SASLSSL:
			c.Protocol = p
			return nil
		}
		return fmt.Errorf("%q is not one of PLAINTEXT, SSL, SASL_PLAINTEXT, SASL_SSL", v)
	}},
	// sasl.mechanism: PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER or AWS_MSK_IAM
	{name: "sasl.mechanism", set: setMechanism},
	// sasl.mechanisms: librdkafka's name for sasl.mechanism
	{name: "sasl.mechanisms", set: setMechanism},
	{name: "sasl.username", set: func(c *Config, v string) error { c.Username = v; return nil }},
	{name: "sasl.password", set: func(c *Config, v string) error { c.Password = Secret(v); return nil }},
	// sasl.oauthbearer.token.endpoint.url: file:///path: the OAUTHBEARER token, re-read at each authentication
	{name: "sasl.oauthbearer.token.endpoint.url", set: func(c *Config, v string) error {
		path, ok := strings.CutPrefix(v, "file://")
		if !ok || path == "" {
			return fmt.Errorf("%q: Vigil reads the token from a file (file:///path/to/token); fetching it from an identity provider is left to a sidecar that writes that file", v)
		}
		c.TokenFile = path
		return nil
	}},
	// ssl.ca.location: PEM file of the CAs that sign the brokers' certificates (default: the system roots)
	{name: "ssl.ca.location", set: func(c *Config, v string) error { c.CAFile = v; return nil }},
	// ssl.certificate.location: PEM client certificate (mutual TLS), with ssl.key.location
	{name: "ssl.certificate.location", set: func(c *Config, v string) error { c.CertFile = v; return nil }},
	// ssl.key.location: PEM private key of the client certificate
	{name: "ssl.key.location", set: func(c *Config, v string) error { c.KeyFile = v; return nil }},
	// ssl.endpoint.identification.algorithm: https (default: check the broker's host name) or none
	{name: "ssl.endpoint.identification.algorithm", set: func(c *Config, v string) error {
		switch strings.ToLower(v) {
		case "https":
			c.NoHostnameCheck = false
		case "none", "":
			c.NoHostnameCheck = true
		default:
			return fmt.Errorf("%q is not https or none", v)
		}
		return nil
	}},
	{name: "client.id", set: func(c *Config, v string) error { c.ClientID = v; return nil }},
}

func setMechanism(c *Config, v string) error {
	switch m := strings.ToUpper(v); m {
	case MechPlain, MechScramSHA256, MechScramSHA512, MechOAuthBearer, MechAWSMSKIAM:
		c.Mechanism = m
		return nil
	}
	return fmt.Errorf("%q is not one of PLAIN, SCRAM-SHA-256, SCRAM-SHA-512, OAUTHBEARER, AWS_MSK_IAM", v)
}

func lookup(name string) *property {
	for i := range properties {
		if properties[i].name == name {
			return &properties[i]
		}
	}
	return nil
}

// Known returns the names of the properties Vigil reads, sorted.
func Known() []string {
	names := make([]string, len(properties))
	for i, p := range properties {
		names[i] = p.name
	}
	sort.Strings(names)
	return names
}

// Setting is one property and where it was read, for error messages.
type Setting struct {
	Name, Value string
	Source      string // "file.properties:3", "VIGIL_KAFKA_SASL_PASSWORD", "config vigil.yaml:7"
}

// Set applies settings in order (a later one overrides an earlier one) and
// checks the result. An unknown property is an error that lists the known
// ones; a secret's value never appears in an error.
func (c *Config) Set(settings ...Setting) error {
	var errs []error
	for _, s := range settings {
		p := lookup(s.Name)
		if p == nil {
			errs = append(errs, fmt.Errorf("%s: unknown Kafka client property %q; Vigil reads: %s", s.Source, s.Name, strings.Join(Known(), ", ")))
			continue
		}
		if err := p.set(c, strings.TrimSpace(s.Value)); err != nil {
			errs = append(errs, fmt.Errorf("%s: %s: %w", s.Source, s.Name, err))
		}
	}
	return errors.Join(errs...)
}

// Validate checks that the settings make one coherent connection.
func (c *Config) Validate() error {
	var errs []error
	if len(c.Brokers) == 0 {
		errs = append(errs, errors.New("no bootstrap brokers: give --brokers or bootstrap.servers"))
	}
	switch {
	case c.SASL() && c.Mechanism == "":
		errs = append(errs, fmt.Errorf("security.protocol is %s but sasl.mechanism is not set", c.Protocol))
	case !c.SASL() && c.Mechanism != "":
		errs = append(errs, fmt.Errorf("sasl.mechanism is %s but security.protocol is %s: use SASL_SSL (or SASL_PLAINTEXT)", c.Mechanism, c.protocol()))
	case !c.SASL() && (c.Username != "" || c.Password != ""):
		errs = append(errs, fmt.Errorf("sasl.username or sasl.password is set but security.protocol is %s: use SASL_SSL (or SASL_PLAINTEXT)", c.protocol()))
	}
	if c.SASL() {
		switch c.Mechanism {
		case MechPlain, MechScramSHA256, MechScramSHA512:
			if c.Username == "" || c.Password == "" {
				errs = append(errs, fmt.Errorf("sasl.mechanism %s needs sasl.username and sasl.password", c.Mechanism))
			}
		case MechOAuthBearer:
			if c.TokenFile == "" {
				errs = append(errs, errors.New("sasl.mechanism OAUTHBEARER needs sasl.oauthbearer.token.endpoint.url=file:///path/to/token"))
			}
		case MechAWSMSKIAM:
			if (c.Username == "") != (c.Password == "") {
				errs = append(errs, errors.New("AWS_MSK_IAM takes the access key id and secret as sasl.username and sasl.password, both or neither (neither: AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY)"))
			}
		}
	}
	if c.Dial != nil && c.TLS() {
		errs = append(errs, fmt.Errorf("security.protocol is %s, but an in-process connection carries no TLS", c.Protocol))
	}
	if !c.TLS() && (c.CAFile != "" || c.CertFile != "" || c.KeyFile != "") {
		errs = append(errs, fmt.Errorf("ssl.* files are set but security.protocol is %s: use SSL or SASL_SSL", c.protocol()))
	}
	if (c.CertFile == "") != (c.KeyFile == "") {
		errs = append(errs, errors.New("ssl.certificate.location and ssl.key.location go together"))
	}
	return errors.Join(errs...)
}

// ReadProperties reads a Java-style properties file: "name=value" lines
// (":" and the first space also separate), "#" and "!" start comments. It
// returns the settings in file order, each with its file:line source.
func ReadProperties(path string) ([]Setting, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("kafka properties: %w", err)
	}
	var out []Setting
	sc := bufio.NewScanner(bytes.NewReader(src))
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' || line[0] == '!' {
			continue
		}
		i := strings.IndexAny(line, "=: \t")
		if i <= 0 {
			return nil, fmt.Errorf("%s:%d: want name=value", path, n)
		}
		name, value := line[:i], strings.TrimSpace(line[i+1:])
		if line[i] == ' ' || line[i] == '\t' { // "name = value" or "name value"
			value = strings.TrimSpace(strings.TrimLeft(value, "=:"))
		}
		out = append(out, Setting{Name: name, Value: value, Source: fmt.Sprintf("%s:%d", path, n)})
	}
	return out, sc.Err()
}

// EnvPrefix starts the environment variables that set properties:
// VIGIL_KAFKA_SASL_PASSWORD sets sasl.password.
const EnvPrefix = "VIGIL_KAFKA_"

// FromEnv returns the settings of the VIGIL_KAFKA_* variables of environ
// ("NAME=value" entries, os.Environ()), skipping the names in skip (the
// variables of flags that start with kafka-, such as --kafka-properties).
// A variable names its property upper-cased with dots as underscores; Kafka's
// property names have no underscores, so the mapping is one to one.
func FromEnv(environ []string, skip map[string]bool) []Setting {
	var out []Setting
	for _, kv := range environ {
		name, value, ok := strings.Cut(kv, "=")
		if !ok || !strings.HasPrefix(name, EnvPrefix) || skip[name] {
			continue
		}
		prop := strings.ToLower(strings.ReplaceAll(strings.TrimPrefix(name, EnvPrefix), "_", "."))
		out = append(out, Setting{Name: prop, Value: value, Source: name})
	}
	sort.SliceStable(out, func(i, j int) bool { return out[i].Source < out[j].Source })
	return out
}

// EnvName is the variable that sets the property name.
func EnvName(name string) string {
	return EnvPrefix + strings.ToUpper(strings.ReplaceAll(name, ".", "_"))
}

func splitList(v string) []string {
	var out []string
	for _, s := range strings.Split(v, ",") {
		if s = strings.TrimSpace(s); s != "" {
			out = append(out, s)
		}
	}
	return out
}
