package kafka

import (
	"context"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kfake"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl/scram"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// Broker is the embedded Kafka-protocol broker (franz-go's kfake): one node,
// persisted under a directory, so that `vigil serve` works on a machine with
// no Kafka and `vigil broker` can stand in for one in tests and demos. Any
// Kafka client (kcat, franz-go, librdkafka) talks to it.
//
// With Users it authenticates every connection (SASL PLAIN, SCRAM-SHA-256,
// SCRAM-SHA-512) and authorizes every request with ACLs derived from what
// the users file grants; with TLS it encrypts. See StartBroker.
type Broker struct {
	c       *kfake.Cluster
	g       *gate
	addr    string
	dataDir string
	leaf    *x509.Certificate // the server certificate, with TLS
	sasl    bool
}

// BrokerConfig says where the broker listens, keeps its data, and whom it
// lets in.
type BrokerConfig struct {
	Listen     string // host:port; port 0 picks a free one
	DataDir    string // "" keeps everything in memory
	Partitions int32  // partitions of topics created without a count
	SyncWrites bool   // fsync every produced batch (slower, survives power loss)

	// Advertise is the address the broker tells clients to connect to (in
	// metadata): "host" or "host:port" (the port defaults to the one it
	// listens on). "" is the listening address, which is useless to remote
	// clients when it is a wildcard (0.0.0.0).
	Advertise string

	// Users turns on SASL and ACLs: only they may connect, each may do what
	// its entry grants (superusers anything). Nil: no authentication, and
	// anyone who reaches the port may do anything.
	Users []BrokerUser

	// TLS, when set, is the server side of TLS; or TLSCertFile and
	// TLSKeyFile name a PEM certificate (chain) and its key. Not both.
	TLS                     *tls.Config
	TLSCertFile, TLSKeyFile string

	Logger *slog.Logger // nil: no logs
}

// authStateFiles are the files in which kfake persists SASL users (sasl.json,
// which holds PLAIN passwords in clear) and ACLs (acls.json). The broker
// removes them before it starts and after it stops: see StartBroker.
var authStateFiles = []string{"sasl.json", "acls.json"}

// StartBroker starts a broker; Close stops it.
//
// With Users, the users are the only ones at every start, whatever a data
// directory remembers. kfake persists users and ACLs in the data directory
// and, on a restart, loads them over the configured users, and does not
// apply configured ACLs at all when it loaded state. So the broker removes
// its persisted users and ACLs before kfake starts (the configured users
// then stand), and grants the ACLs itself once kfake runs, as a superuser
// that exists for this start only (a random name and password that never
// leave the process), over an in-memory connection. The listener accepts
// no outside connection until the ACLs are in force: a client that connects
// early waits in the listen backlog rather than being refused for want of
// an ACL.
func StartBroker(cfg BrokerConfig) (*Broker, error) {
	log := cfg.Logger
	if log == nil {
		log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	tc, leaf, err := cfg.serverTLS()
	if err != nil {
		return nil, fmt.Errorf("broker: %w", err)
	}
	if err := validateBrokerUsers(cfg.Users); err != nil {
		return nil, fmt.Errorf("broker: users: %w", err)
	}
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker: listen on %s: %w", cfg.Listen, err)
	}
	g, err := newGate(ln, cfg.Advertise, tc, len(cfg.Users) > 0, log)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ClusterID("vigil-embedded"),
		// Producers such as kcat may write to a topic before Vigil created it.
		kfake.AllowAutoTopicCreation(),
		// kfake binds 127.0.0.1:<port> itself; hand it the listener we opened
		// so that the address (and a port of 0) is ours to choose.
		kfake.ListenFn(func(string, string) (net.Listener, error) { return g, nil }),
	}
	if cfg.Partitions > 0 {
		opts = append(opts, kfake.DefaultNumPartitions(int(cfg.Partitions)))
	}
	var admin BrokerUser
	if len(cfg.Users) > 0 {
		admin = BrokerUser{Name: "vigil-internal-" + randomHex(8), Password: kconf.Secret(randomHex(32)),
			Mechanism: kconf.MechScramSHA512, Superuser: true}
		opts = append(opts, kfake.EnableSASL(), kfake.EnableACLs(),
			kfake.Superuser(admin.Mechanism, admin.Name, string(admin.Password)))
		for _, u := range cfg.Users {
			if u.Superuser {
				opts = append(opts, kfake.Superuser(u.Mechanism, u.Name, string(u.Password)))
			} else {
				// No ACLs here: kfake applies seed ACLs only to a new data
				// directory; grantACLs applies them at every start.
				opts = append(opts, kfake.User(u.Mechanism, u.Name, string(u.Password)))
			}
		}
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
			g.Close()
			return nil, fmt.Errorf("broker: %w", err)
		}
		if err := removeAuthState(cfg.DataDir); err != nil {
			g.Close()
			return nil, fmt.Errorf("broker: %w", err)
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		g.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	b := &Broker{c: c, g: g, addr: ln.Addr().String(), dataDir: cfg.DataDir, leaf: leaf, sasl: len(cfg.Users) > 0}
	if cfg.DataDir != "" {
		// A new data directory gets sasl.json at once; it is never read.
		if err := removeAuthState(cfg.DataDir); err != nil {
			b.Close()
			return nil, fmt.Errorf("broker: %w", err)
		}
	}
	if b.sasl {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		err := b.secure(ctx, admin, cfg.Users)
		cancel()
		if err != nil {
			b.Close()
			return nil, fmt.Errorf("broker: %w", err)
		}
	}
	g.open()
	return b, nil
}

// secure grants the users' ACLs and installs the ApiVersions shim, over an
// in-memory connection as the per-start superuser admin.
func (b *Broker) secure(ctx context.Context, admin BrokerUser, users []BrokerUser) error {
	cl, err := kgo.NewClient(
		kgo.SeedBrokers(b.addr), // any address: every dial goes to b.Dial
		kgo.Dialer(b.Dial),
		kgo.SASL(scram.Auth{User: admin.Name, Pass: string(admin.Password)}.AsSha512Mechanism()),
	)
	if err != nil {
		return err
	}
	defer cl.Close()

	var creations []kmsg.CreateACLsRequestCreation
	for _, u := range users {
		creations = append(creations, u.acls()...)
	}
	if len(creations) > 0 {
		req := kmsg.NewPtrCreateACLsRequest()
		req.Creations = creations
		resp, err := req.RequestWith(ctx, cl)
		if err != nil {
			return fmt.Errorf("granting the users' ACLs: %w", err)
		}
		for i, r := range resp.Results {
			if err := kerr.ErrorForCode(r.ErrorCode); err != nil {
				c := creations[i]
				return fmt.Errorf("granting %s %s on %s %s: %w", c.Principal, c.Operation, c.ResourceType, c.ResourceName, err)
			}
		}
	}

	// kfake's own ApiVersions answer, which the shim edits.
	avReq := kmsg.NewPtrApiVersionsRequest()
	av, err := avReq.RequestWith(ctx, cl)
	if err == nil {
		err = kerr.ErrorForCode(av.ErrorCode)
	}
	if err != nil {
		return fmt.Errorf("reading the broker's API versions: %w", err)
	}
	b.librdkafkaSASLShim(av)
	return nil
}

// librdkafkaSASLShim makes librdkafka (kcat, confluent-kafka-*) authenticate.
//
// librdkafka starts SASL with a SaslHandshake only when the broker
// advertises SaslHandshake (key 17) from version 0: it derives its "SASL
// handshake" feature from the range 0..0 and, without it, gives up ("SASL
// Handshake not supported by broker (required by mechanism SCRAM-SHA-512)").
// kfake implements SaslHandshake v1 only, and advertises 1..1. So
// ApiVersions answers say 0..1; librdkafka then sends v1 (the highest both
// know), which kfake handles. A client that sends v0 anyway gets kfake's
// refusal of the version, as before.
//
// kfake has no hook on its own responses, so the shim answers ApiVersions
// itself with kfake's answer as it was at start (av: the API keys and
// features, which do not change while it runs) and key 17's MinVersion
// lowered, in the version the client asked. Requests kfake would answer
// with an error (a version above its own, bad client software names,
// KIP-1242 cluster and node ids) go to kfake unchanged.
func (b *Broker) librdkafkaSASLShim(av *kmsg.ApiVersionsResponse) {
	keys := slices.Clone(av.ApiKeys)
	var maxVersion int16 = -1
	for i := range keys {
		switch keys[i].ApiKey {
		case int16(kmsg.SASLHandshake):
			keys[i].MinVersion = 0
		case int16(kmsg.ApiVersions):
			maxVersion = keys[i].MaxVersion
		}
	}
	b.c.ControlKey(int16(kmsg.ApiVersions), func(kreq kmsg.Request) (kmsg.Response, error, bool) {
		b.c.KeepControl()
		req := kreq.(*kmsg.ApiVersionsRequest)
		if req.Version > maxVersion ||
			req.Version >= 3 && !(softwareNameRE.MatchString(req.ClientSoftwareName) && softwareNameRE.MatchString(req.ClientSoftwareVersion)) ||
			req.Version >= 5 && (req.ClusterID != nil || req.NodeID != -1) {
			return nil, nil, false
		}
		resp := req.ResponseKind().(*kmsg.ApiVersionsResponse)
		resp.ApiKeys = slices.Clone(keys)
		resp.SupportedFeatures = slices.Clone(av.SupportedFeatures)
		resp.FinalizedFeatures = slices.Clone(av.FinalizedFeatures)
		resp.FinalizedFeaturesEpoch = av.FinalizedFeaturesEpoch
		return resp, nil, true
	})
}

// serverTLS returns the TLS configuration of the listener and its leaf
// certificate, or nil without TLS.
func (cfg BrokerConfig) serverTLS() (*tls.Config, *x509.Certificate, error) {
	files := cfg.TLSCertFile != "" || cfg.TLSKeyFile != ""
	switch {
	case cfg.TLS != nil && files:
		return nil, nil, errors.New("TLS is given both as a configuration and as files")
	case cfg.TLSCertFile == "" && cfg.TLSKeyFile != "", cfg.TLSCertFile != "" && cfg.TLSKeyFile == "":
		return nil, nil, errors.New("the TLS certificate and key go together")
	case cfg.TLS == nil && !files:
		return nil, nil, nil
	}
	var tc *tls.Config
	if files {
		cert, err := tls.LoadX509KeyPair(cfg.TLSCertFile, cfg.TLSKeyFile)
		if err != nil {
			return nil, nil, fmt.Errorf("TLS certificate %s and key %s: %w", cfg.TLSCertFile, cfg.TLSKeyFile, err)
		}
		tc = &tls.Config{Certificates: []tls.Certificate{cert}}
	} else {
		tc = cfg.TLS.Clone()
	}
	if tc.MinVersion == 0 {
		tc.MinVersion = tls.VersionTLS12
	}
	var leaf *x509.Certificate
	if len(tc.Certificates) > 0 && len(tc.Certificates[0].Certificate) > 0 {
		leaf = tc.Certificates[0].Leaf
		if leaf == nil {
			var err error
			if leaf, err = x509.ParseCertificate(tc.Certificates[0].Certificate[0]); err != nil {
				return nil, nil, fmt.Errorf("TLS certificate: %w", err)
			}
		}
		if now := time.Now(); now.After(leaf.NotAfter) {
			return nil, nil, fmt.Errorf("the TLS certificate (%s) expired on %s", leaf.Subject, leaf.NotAfter.Format(time.RFC3339))
		}
	} else if tc.GetCertificate == nil && tc.GetConfigForClient == nil {
		return nil, nil, errors.New("the TLS configuration has no certificate")
	}
	return tc, leaf, nil
}

// removeAuthState removes kfake's persisted users and ACLs from dir.
func removeAuthState(dir string) error {
	for _, name := range authStateFiles {
		if err := os.Remove(filepath.Join(dir, name)); err != nil && !errors.Is(err, os.ErrNotExist) {
			return fmt.Errorf("removing the users and ACLs of the last run: %w", err)
		}
	}
	return nil
}

func randomHex(n int) string {
	b := make([]byte, n)
	rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// softwareNameRE is what Kafka accepts as client software name and version
// (ApiVersions v3+), as kfake checks it.
var softwareNameRE = regexp.MustCompile(`^[a-zA-Z0-9](?:[a-zA-Z0-9\-.]*[a-zA-Z0-9])?$`)

// Addr returns the address the broker listens on (a wildcard such as
// 0.0.0.0:9092 when it listens on every interface).
func (b *Broker) Addr() string { return b.addr }

// Dial opens a connection to the broker inside the process, whatever
// network and address it is given (it has kgo.Dialer's signature): no
// socket, so none of the system calls a loopback connection costs on each
// request and response, and no TLS, since the bytes never leave the
// process. With SASL the client still authenticates, and is authorized, as
// over the network. vigil serve's own clients reach its embedded broker so
// (docs/design.md "Delivery").
func (b *Broker) Dial(ctx context.Context, _, _ string) (net.Conn, error) { return b.g.dial(ctx) }

// SASL reports whether clients must authenticate.
func (b *Broker) SASL() bool { return b.sasl }

// Certificate returns the broker's TLS certificate, or nil without TLS (or
// when the TLS configuration chooses it per connection).
func (b *Broker) Certificate() *x509.Certificate { return b.leaf }

// Cluster exposes the kfake cluster to tests that inject faults (slow
// produce responses, for instance).
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// Close stops the broker and flushes its data directory. It removes the
// users and ACLs kfake saved there (PLAIN passwords among them): the next
// start takes them from its configuration.
func (b *Broker) Close() {
	b.c.Close()
	if b.dataDir != "" {
		removeAuthState(b.dataDir)
	}
}

// gate is the broker's listener. It hands kfake in-memory connections
// (dial) at once, and connections from the network only once open is
// called, when the broker is configured. It does TLS for kfake (kfake's
// own TLS option would wrap it, hiding the Kafka protocol from authConn),
// and, with SASL, wraps network connections in authConn. Its Addr is the
// advertised address, which kfake puts in metadata.
type gate struct {
	ln     net.Listener
	addr   net.Addr
	tls    *tls.Config // nil: plaintext
	sasl   bool
	log    *slog.Logger
	conns  chan net.Conn
	done   chan struct{}
	openMu sync.Once
	doneMu sync.Once
	err    error // why Accept fails, set before done is closed
}

func newGate(ln net.Listener, advertise string, tc *tls.Config, sasl bool, log *slog.Logger) (*gate, error) {
	g := &gate{ln: ln, addr: ln.Addr(), tls: tc, sasl: sasl, log: log, conns: make(chan net.Conn), done: make(chan struct{})}
	if advertise != "" {
		host, port, err := net.SplitHostPort(advertise)
		if err != nil { // no port: the one we listen on
			host = advertise
			_, port, _ = net.SplitHostPort(ln.Addr().String())
		}
		if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 || host == "" {
			return nil, fmt.Errorf("advertised address %q: want host or host:port", advertise)
		}
		g.addr = advertisedAddr(net.JoinHostPort(host, port))
	}
	return g, nil
}

type advertisedAddr string

func (advertisedAddr) Network() string  { return "tcp" }
func (a advertisedAddr) String() string { return string(a) }

func (g *gate) Addr() net.Addr { return g.addr }

func (g *gate) Accept() (net.Conn, error) {
	select {
	case c := <-g.conns:
		return c, nil
	case <-g.done:
		return nil, g.err
	}
}

func (g *gate) Close() error {
	g.stop(net.ErrClosed)
	return g.ln.Close()
}

func (g *gate) stop(err error) {
	g.doneMu.Do(func() {
		g.err = err
		close(g.done)
	})
}

func (g *gate) closed() bool {
	select {
	case <-g.done:
		return true
	default:
		return false
	}
}

// open starts accepting connections from the network.
func (g *gate) open() {
	g.openMu.Do(func() { go g.acceptLoop() })
}

func (g *gate) acceptLoop() {
	var delay time.Duration
	for {
		c, err := g.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				g.stop(err)
				return
			}
			// Out of file descriptors, say: wait and go on, as net/http
			// does, rather than stop serving for good.
			delay = min(max(2*delay, 5*time.Millisecond), time.Second)
			g.log.Warn("broker: accept", "err", err, "retry_in", delay)
			select {
			case <-time.After(delay):
				continue
			case <-g.done:
				return
			}
		}
		delay = 0
		if g.tls != nil {
			c = tls.Server(c, g.tls) // the handshake runs on kfake's first read
		}
		if g.sasl {
			c = &authConn{Conn: c, g: g}
		}
		select {
		case g.conns <- c:
		case <-g.done:
			c.Close()
			return
		}
	}
}

// dial returns an in-memory connection to the broker; with SASL its server
// end answers a failed authentication as a network connection's does.
func (g *gate) dial(ctx context.Context) (net.Conn, error) {
	client, server := net.Pipe()
	var conn net.Conn = server
	if g.sasl {
		conn = &authConn{Conn: server, g: g}
	}
	var err error
	select {
	case g.conns <- conn:
		return client, nil
	case <-g.done:
		err = g.err
	case <-ctx.Done():
		err = ctx.Err()
	}
	client.Close()
	server.Close()
	return nil, err
}

// authConn makes a failed authentication an answer rather than a hang-up.
//
// When a SaslAuthenticate fails (a wrong password, an unknown user, a
// mechanism the user has not), kfake closes the connection without a
// response, where Kafka answers SASL_AUTHENTICATION_FAILED and then closes:
// clients then report a connection closed by the broker, and some retry as
// if the network had failed. authConn watches the requests kfake reads and
// the responses it writes (kfake writes one whole response per Write), and
// when kfake closes the connection with a SaslAuthenticate unanswered, it
// answers it with SASL_AUTHENTICATION_FAILED first. Not while the broker
// shuts down: an authentication in flight then did not fail.
type authConn struct {
	net.Conn
	g *gate

	mu      sync.Mutex
	hdr     []byte // the start of the request being read: size, key, version, correlation id
	left    int64  // bytes of the request still to read after hdr
	lost    bool   // a request too short to parse: stop watching
	pending *saslPending

	closeOnce sync.Once
}

type saslPending struct {
	corr    int32
	version int16
}

const requestHeaderBytes = 4 + 2 + 2 + 4

func (c *authConn) Read(p []byte) (int, error) {
	n, err := c.Conn.Read(p)
	c.observe(p[:n])
	return n, err
}

// observe follows the request stream: b are the next bytes read.
func (c *authConn) observe(b []byte) {
	c.mu.Lock()
	defer c.mu.Unlock()
	for len(b) > 0 && !c.lost {
		if c.left > 0 {
			k := min(int64(len(b)), c.left)
			c.left, b = c.left-k, b[k:]
			continue
		}
		k := min(requestHeaderBytes-len(c.hdr), len(b))
		c.hdr, b = append(c.hdr, b[:k]...), b[k:]
		if len(c.hdr) < requestHeaderBytes {
			continue
		}
		size := int64(binary.BigEndian.Uint32(c.hdr))
		if size < requestHeaderBytes-4 {
			c.lost = true
			return
		}
		if key := int16(binary.BigEndian.Uint16(c.hdr[4:])); key == int16(kmsg.SASLAuthenticate) {
			c.pending = &saslPending{version: int16(binary.BigEndian.Uint16(c.hdr[6:])), corr: int32(binary.BigEndian.Uint32(c.hdr[8:]))}
		}
		c.left, c.hdr = size-(requestHeaderBytes-4), c.hdr[:0]
	}
}

func (c *authConn) Write(p []byte) (int, error) {
	if len(p) >= 8 {
		c.mu.Lock()
		if c.pending != nil && c.pending.corr == int32(binary.BigEndian.Uint32(p[4:])) {
			c.pending = nil
		}
		c.mu.Unlock()
	}
	return c.Conn.Write(p)
}

func (c *authConn) Close() error {
	c.closeOnce.Do(func() {
		c.mu.Lock()
		p := c.pending
		c.pending = nil
		c.mu.Unlock()
		if p == nil || c.g.closed() {
			return
		}
		resp := kmsg.NewPtrSASLAuthenticateResponse()
		resp.Version = p.version
		resp.ErrorCode = kerr.SaslAuthenticationFailed.Code
		msg := "Authentication failed: invalid credentials (user, password, or a mechanism the user does not have)"
		resp.ErrorMessage = &msg
		buf := binary.BigEndian.AppendUint32(make([]byte, 4, 64), uint32(p.corr))
		if resp.IsFlexible() {
			buf = append(buf, 0) // the response header's empty tagged fields
		}
		buf = resp.AppendTo(buf)
		binary.BigEndian.PutUint32(buf, uint32(len(buf)-4))
		c.Conn.SetWriteDeadline(time.Now().Add(time.Second))
		c.Conn.Write(buf)
	})
	return c.Conn.Close()
}
