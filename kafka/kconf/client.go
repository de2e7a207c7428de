package kconf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/twmb/franz-go/pkg/kerr"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"
	"github.com/twmb/franz-go/pkg/sasl"
	"github.com/twmb/franz-go/pkg/sasl/aws"
	"github.com/twmb/franz-go/pkg/sasl/oauth"
	"github.com/twmb/franz-go/pkg/sasl/plain"
	"github.com/twmb/franz-go/pkg/sasl/scram"
)

// Opts returns the franz-go options of the connection: the seed brokers, the
// TLS dialer and the SASL mechanism. Files (CA, certificate, key) are read
// here, once, so that a missing or malformed one is an error at start.
func (c *Config) Opts() ([]kgo.Opt, error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	opts := []kgo.Opt{kgo.SeedBrokers(c.Brokers...)}
	if c.ClientID != "" {
		opts = append(opts, kgo.ClientID(c.ClientID))
	}
	if c.TLS() {
		tc, err := c.TLSConfig()
		if err != nil {
			return nil, err
		}
		opts = append(opts, kgo.DialTLSConfig(tc))
	}
	if c.Dial != nil {
		opts = append(opts, kgo.Dialer(c.Dial))
	}
	if c.SASL() {
		opts = append(opts, kgo.SASL(c.mechanism()))
	}
	return opts, nil
}

// TLSConfig returns the client's TLS configuration: the CAs of CAFile or the
// system roots, the client certificate, and the broker's host name checked
// unless NoHostnameCheck (franz-go sets ServerName to the host it dials).
func (c *Config) TLSConfig() (*tls.Config, error) {
	tc := &tls.Config{MinVersion: tls.VersionTLS12}
	if c.CAFile != "" {
		pem, err := os.ReadFile(c.CAFile)
		if err != nil {
			return nil, fmt.Errorf("ssl.ca.location: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("ssl.ca.location: %s holds no PEM certificate", c.CAFile)
		}
		tc.RootCAs = pool
	}
	if c.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(c.CertFile, c.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("ssl.certificate.location, ssl.key.location: %w", err)
		}
		tc.Certificates = []tls.Certificate{cert}
	}
	if c.NoHostnameCheck {
		// Go verifies the chain and the name together; to keep the chain
		// check without the name, skip both and verify the chain here.
		roots := tc.RootCAs
		tc.InsecureSkipVerify = true
		tc.VerifyConnection = func(cs tls.ConnectionState) error {
			if len(cs.PeerCertificates) == 0 {
				return errors.New("the broker sent no certificate")
			}
			inter := x509.NewCertPool()
			for _, ic := range cs.PeerCertificates[1:] {
				inter.AddCert(ic)
			}
			_, err := cs.PeerCertificates[0].Verify(x509.VerifyOptions{Roots: roots, Intermediates: inter})
			return err
		}
	}
	return tc, nil
}

func (c *Config) mechanism() sasl.Mechanism {
	switch c.Mechanism {
	case MechPlain:
		return plain.Auth{User: c.Username, Pass: string(c.Password)}.AsMechanism()
	case MechScramSHA256:
		return scram.Auth{User: c.Username, Pass: string(c.Password)}.AsSha256Mechanism()
	case MechScramSHA512:
		return scram.Auth{User: c.Username, Pass: string(c.Password)}.AsSha512Mechanism()
	case MechOAuthBearer:
		return oauth.Oauth(c.oauthToken)
	case MechAWSMSKIAM:
		return aws.ManagedStreamingIAM(c.awsCredentials)
	}
	panic("kconf: mechanism not validated: " + c.Mechanism)
}

// oauthToken reads the token file at every authentication (every new
// connection, and every re-authentication the broker asks for), so a renewed
// token is used from the next one on.
func (c *Config) oauthToken(context.Context) (oauth.Auth, error) {
	b, err := os.ReadFile(c.TokenFile)
	if err != nil {
		return oauth.Auth{}, fmt.Errorf("OAUTHBEARER token: %w", err)
	}
	tok := strings.TrimSpace(string(b))
	if tok == "" {
		return oauth.Auth{}, fmt.Errorf("OAUTHBEARER token: %s is empty", c.TokenFile)
	}
	return oauth.Auth{Token: tok}, nil
}

// awsCredentials returns the keys of sasl.username and sasl.password or,
// without them, of the standard AWS environment variables, read at each
// authentication (a session token rotates).
func (c *Config) awsCredentials(context.Context) (aws.Auth, error) {
	if c.Username != "" {
		return aws.Auth{AccessKey: c.Username, SecretKey: string(c.Password), SessionToken: os.Getenv("AWS_SESSION_TOKEN"), UserAgent: "vigil"}, nil
	}
	a := aws.Auth{AccessKey: os.Getenv("AWS_ACCESS_KEY_ID"), SecretKey: os.Getenv("AWS_SECRET_ACCESS_KEY"),
		SessionToken: os.Getenv("AWS_SESSION_TOKEN"), UserAgent: "vigil"}
	if a.AccessKey == "" || a.SecretKey == "" {
		return aws.Auth{}, errors.New("AWS_MSK_IAM: no credentials: set sasl.username and sasl.password, or AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY")
	}
	return a, nil
}

// DefaultPingTimeout bounds Ping when its context has no deadline.
const DefaultPingTimeout = 15 * time.Second

// Ping connects to the cluster once and asks for its metadata, so that an
// unreachable broker, a wrong password or an untrusted certificate is one
// clear error at start (see Explain) rather than retries in the background.
func Ping(ctx context.Context, c Config) error {
	opts, err := c.Opts()
	if err != nil {
		return err
	}
	return c.Check(ctx, opts)
}

// Check is Ping over the options Opts returned, for a caller that has them
// already (the files they read are read once).
func (c Config) Check(ctx context.Context, opts []kgo.Opt) error {
	if _, ok := ctx.Deadline(); !ok {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, DefaultPingTimeout)
		defer cancel()
	}
	cl, err := kgo.NewClient(append(slices.Clip(opts), kgo.RequestRetries(0))...)
	if err != nil {
		return c.Explain(err)
	}
	defer cl.Close()
	// One metadata request, not cl.Ping, which tries every seed and every
	// broker it knows in turn: one attempt, one error.
	req := kmsg.NewPtrMetadataRequest()
	req.Topics = []kmsg.MetadataRequestTopic{}
	_, err = req.RequestWith(ctx, cl)
	return c.Explain(err)
}

// Explain turns a connection error into one sentence that says what to
// check: the password, the CA, the protocol. It never includes a secret (the
// errors of franz-go and crypto/tls hold none). nil stays nil.
func (c Config) Explain(err error) error {
	if err == nil {
		return nil
	}
	var (
		unknownCA  x509.UnknownAuthorityError
		hostErr    x509.HostnameError
		invalid    x509.CertificateInvalidError
		recordErr  tls.RecordHeaderError
		certVerify *tls.CertificateVerificationError
	)
	where := fmt.Sprintf("kafka %s", c)
	switch {
	case errors.Is(err, kerr.SaslAuthenticationFailed):
		return fmt.Errorf("%s: authentication failed: the broker refused the %s credentials of %q (check sasl.username and sasl.password): %w", where, c.Mechanism, c.Username, err)
	case errors.Is(err, kerr.UnsupportedSaslMechanism):
		return fmt.Errorf("%s: the broker does not offer SASL %s (check sasl.mechanism): %w", where, c.Mechanism, err)
	case errors.Is(err, kerr.TopicAuthorizationFailed), errors.Is(err, kerr.GroupAuthorizationFailed),
		errors.Is(err, kerr.ClusterAuthorizationFailed), errors.Is(err, kerr.TransactionalIDAuthorizationFailed):
		who := c.Principal()
		if who == "" {
			who = "this client"
		}
		return fmt.Errorf("%s: the broker's ACLs do not allow %s this: %w", where, who, err)
	case errors.Is(err, kerr.IllegalSaslState):
		return fmt.Errorf("%s: the broker is not expecting SASL (check security.protocol): %w", where, err)
	case errors.As(err, &unknownCA), errors.As(err, &certVerify) && errors.As(certVerify.Err, &unknownCA):
		trust := "the system's roots"
		if c.CAFile != "" {
			trust = "ssl.ca.location " + c.CAFile
		}
		return fmt.Errorf("%s: TLS: the broker's certificate is not signed by a CA in %s: %w", where, trust, err)
	case errors.As(err, &hostErr):
		return fmt.Errorf("%s: TLS: the broker's certificate does not name the host dialed (%w); fix the certificate or the address, or set ssl.endpoint.identification.algorithm=none", where, err)
	case errors.As(err, &invalid):
		return fmt.Errorf("%s: TLS: the broker's certificate is not valid: %w", where, err)
	case errors.As(err, &recordErr):
		return fmt.Errorf("%s: TLS: the broker did not answer in TLS (is it a plaintext listener? check security.protocol): %w", where, err)
	case isFirstReadEOF(err):
		// franz-go's message says which step (TLS, SASL) it suspects.
		return fmt.Errorf("%s: check security.protocol: %w", where, err)
	case c.SASL() && errors.Is(err, io.EOF):
		// Kafka answers a failed authentication with an error code, but
		// some brokers (franz-go's kfake among them) close the connection.
		return fmt.Errorf("%s: the broker closed the connection during authentication: check sasl.username and sasl.password, and that it accepts %s (check sasl.mechanism): %w", where, c.Mechanism, err)
	case !c.TLS() && (errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || isReset(err)):
		return fmt.Errorf("%s: the broker closed the connection: it may expect TLS (check security.protocol): %w", where, err)
	case errors.Is(err, context.DeadlineExceeded):
		return fmt.Errorf("%s: no answer in time (is the broker up and reachable? does it expect TLS?): %w", where, err)
	}
	return fmt.Errorf("%s: %w", where, err)
}

// isFirstReadEOF reports a connection closed right after its first request
// (franz-go's ErrFirstReadEOF).
func isFirstReadEOF(err error) bool {
	_, ok := errors.AsType[*kgo.ErrFirstReadEOF](err)
	return ok
}

func isReset(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && strings.Contains(op.Err.Error(), "reset")
}
