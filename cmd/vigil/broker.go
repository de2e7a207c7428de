package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"

	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
	"github.com/vigil-cep/vigil/telemetry"
)

func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("broker", "broker [--listen HOST:PORT] [--data-dir DIR] [--sasl-users FILE] [--tls-cert FILE --tls-key FILE]", stderr)
	listen := fs.String("listen", "127.0.0.1:9092", "address to listen on (port 0 picks a free one); beyond loopback only with --sasl-users")
	dir := fs.String("data-dir", "vigil-data/broker", "where the log is kept; empty keeps it in memory")
	partitions := fs.Int("partitions", int(kafka.DefaultConfig.Partitions), "partitions of auto-created topics")
	syncWrites := fs.Bool("sync-writes", false, "fsync every produced batch")
	sec := addBrokerSecurityFlags(fs, "", "listen")
	if err := parse(fs, args); err != nil {
		return err
	}
	if err := positive(fs, "partitions"); err != nil {
		return err
	}
	log, err := telemetry.NewLogger(stderr, "text", "info")
	if err != nil {
		return err
	}
	cfg := kafka.BrokerConfig{Listen: *listen, DataDir: *dir, Partitions: int32(*partitions), SyncWrites: *syncWrites}
	if err := sec.apply(&cfg, log); err != nil {
		return err
	}
	b, err := kafka.StartBroker(cfg)
	if err != nil {
		return err
	}
	log.Info("broker", "addr", b.Addr(), "sasl_users", len(cfg.Users), "tls", b.Certificate() != nil)
	// Tests and scripts read the address as the last word of this line.
	fmt.Fprintf(stdout, "vigil broker listening on %s\n", b.Addr())
	<-ctx.Done()
	b.Close()
	return nil
}

// brokerSecurity is the embedded broker's security flags: --sasl-users,
// --tls-cert, --tls-key and --advertise on vigil broker; the same with the
// prefix broker- on vigil serve, whose --kafka-* names belong to Kafka client
// properties (VIGIL_KAFKA_SASL_USERS would read as the property sasl.users).
type brokerSecurity struct {
	prefix     string // of the flag names
	listenFlag string // the flag of the listening address, for messages
	users      *string
	cert, key  *string
	advertise  *string
}

// addBrokerSecurityFlags registers the broker's security flags on fs, each
// name starting with prefix; listenFlag names the flag of the address the
// broker listens on.
func addBrokerSecurityFlags(fs *flag.FlagSet, prefix, listenFlag string) *brokerSecurity {
	return &brokerSecurity{
		prefix:     prefix,
		listenFlag: listenFlag,
		users: fs.String(prefix+"sasl-users", "", "users file (YAML) of the embedded broker: SASL users (PLAIN, SCRAM-SHA-256/512) and the topics and groups each may use; "+
			"turns on authentication and ACLs; required to listen beyond loopback (docs/service.md, \"Securing the embedded broker\")"),
		cert:      fs.String(prefix+"tls-cert", "", "PEM certificate (or chain) of the embedded broker's TLS listener, with --"+prefix+"tls-key"),
		key:       fs.String(prefix+"tls-key", "", "PEM private key of --"+prefix+"tls-cert"),
		advertise: fs.String(prefix+"advertise", "", "host[:port] the embedded broker tells clients to connect to (default: the --"+listenFlag+" address; set it when that is 0.0.0.0)"),
	}
}

// apply completes cfg, whose Listen is set, with the flags: it loads the
// users file and names the TLS files. It refuses an address beyond loopback
// without users, as the API refuses one without keys, and warns about one
// without TLS.
func (s *brokerSecurity) apply(cfg *kafka.BrokerConfig, log *slog.Logger) error {
	cfg.TLSCertFile, cfg.TLSKeyFile, cfg.Advertise, cfg.Logger = *s.cert, *s.key, *s.advertise, log
	if *s.users != "" {
		users, err := kafka.LoadBrokerUsers(*s.users, log)
		if err != nil {
			return err
		}
		cfg.Users = users
	}
	if loopbackListen(cfg.Listen) {
		return nil
	}
	if len(cfg.Users) == 0 {
		return fmt.Errorf("the broker would listen on %s, beyond this machine, with no SASL users: anyone who reaches the port "+
			"could publish a ruleset, read every decision and write input; give --%ssasl-users FILE "+
			"(docs/service.md, \"Securing the embedded broker\"), or listen on 127.0.0.1 (--%s)", cfg.Listen, s.prefix, s.listenFlag)
	}
	if cfg.TLSCertFile == "" {
		msg := "the broker listens beyond loopback without TLS: records travel in clear"
		plain := 0
		for _, u := range cfg.Users {
			if u.Mechanism == kconf.MechPlain {
				plain++
			}
		}
		if plain > 0 {
			msg += ", and so do the passwords of PLAIN users"
		}
		log.Warn(msg+"; give --"+s.prefix+"tls-cert and --"+s.prefix+"tls-key", "listen", cfg.Listen, "plain_users", plain)
	}
	if host, _, err := net.SplitHostPort(cfg.Listen); err == nil && wildcardHost(host) && cfg.Advertise == "" {
		log.Warn("the broker listens on every interface and its metadata sends clients to that wildcard address, "+
			"which they cannot follow from another machine: give --"+s.prefix+"advertise HOST", "listen", cfg.Listen)
	}
	return nil
}

// loopbackListen reports whether addr (host:port) listens on loopback only.
func loopbackListen(addr string) bool {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return false
	}
	ip := net.ParseIP(host)
	return host == "localhost" || ip != nil && ip.IsLoopback()
}

// wildcardHost reports whether host is every interface: "", 0.0.0.0 or ::.
func wildcardHost(host string) bool {
	ip := net.ParseIP(host)
	return host == "" || ip != nil && ip.IsUnspecified()
}

// dialAddr is the address to reach a broker listening on addr from this
// machine: 127.0.0.1 for a wildcard.
func dialAddr(addr string) string {
	host, port, err := net.SplitHostPort(addr)
	if err != nil || !wildcardHost(host) {
		return addr
	}
	return net.JoinHostPort("127.0.0.1", port)
}

// embeddedBroker is the broker vigil serve starts without --brokers, and
// the connection its own clients use to reach it.
type embeddedBroker struct {
	*kafka.Broker
	Client kconf.Config
}

// startEmbeddedBroker starts vigil serve's broker with cfg (Listen, DataDir,
// Partitions) and the security flags s, and returns it with the connection
// serve's clients must use: in the process (kafka.Broker.Dial), so without
// TLS whatever the listener has; with SASL, as the first superuser of the
// users file, unless kc (from --kafka-properties, VIGIL_KAFKA_* and kafka.*
// config keys) gives credentials, which then win.
func startEmbeddedBroker(cfg kafka.BrokerConfig, s *brokerSecurity, kc kconf.Config, log *slog.Logger) (*embeddedBroker, error) {
	if err := s.apply(&cfg, log); err != nil {
		return nil, err
	}
	client := kconf.Config{ClientID: kc.ClientID}
	creds := kc.Mechanism != "" || kc.Username != "" || kc.Password != ""
	switch {
	case len(cfg.Users) == 0 && creds:
		return nil, fmt.Errorf("the Kafka client properties give SASL credentials, but the embedded broker has no users (--%ssasl-users)", s.prefix)
	case creds:
		switch kc.Mechanism {
		case kconf.MechPlain, kconf.MechScramSHA256, kconf.MechScramSHA512:
		case "":
			return nil, errors.New("the Kafka client properties give SASL credentials for the embedded broker but no sasl.mechanism")
		default:
			return nil, fmt.Errorf("sasl.mechanism %s: the embedded broker takes PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", kc.Mechanism)
		}
		client.Mechanism, client.Username, client.Password = kc.Mechanism, kc.Username, kc.Password
	case len(cfg.Users) > 0:
		i := slices.IndexFunc(cfg.Users, func(u kafka.BrokerUser) bool { return u.Superuser })
		if i < 0 {
			return nil, fmt.Errorf("%s has no superuser for vigil serve itself to connect as: mark its user \"superuser: true\" "+
				"(or give its credentials with --kafka-properties)", *s.users)
		}
		u := cfg.Users[i]
		client.Mechanism, client.Username, client.Password = u.Mechanism, u.Name, u.Password
	}
	b, err := kafka.StartBroker(cfg)
	if err != nil {
		return nil, err
	}
	client.Brokers = []string{dialAddr(b.Addr())}
	client.Dial = b.Dial
	if client.Mechanism != "" {
		client.Protocol = kconf.SASLPlaintext
	}
	return &embeddedBroker{Broker: b, Client: client}, nil
}
