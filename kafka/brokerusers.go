package kafka

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"regexp"
	"slices"
	"strings"

	"github.com/twmb/franz-go/pkg/kmsg"
	"go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// The users file of the embedded broker (vigil broker --sasl-users FILE,
// vigil serve --broker-sasl-users FILE) lists who may connect and what each
// may do:
//
//	users:
//	  - name: vigil                # the service's own principal
//	    password: "…"
//	    mechanism: SCRAM-SHA-512   # PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512 (the default)
//	    superuser: true            # bypasses ACLs; then no read, write or groups
//	  - name: analyst
//	    password: "…"
//	    read: [vigil.rules, vigil.decisions]
//	    write: [vigil.rules]       # may publish rulesets
//	  - name: gateway
//	    password: "…"
//	    write: [transactions, logins, devices]
//	    read: ["vigil.*"]          # a trailing * is a prefix; "*" alone is every topic
//	    groups: [gateway-reader]   # consumer groups it may use, same patterns
//
// The file is the only source of truth: at every start the broker forgets
// the users and ACLs it persisted and takes them from the file (see
// StartBroker). docs/service.md "Securing the embedded broker" describes it.

// BrokerUser is one SASL user of the embedded broker and what it may do.
type BrokerUser struct {
	Name      string
	Password  kconf.Secret
	Mechanism string // kconf.MechPlain, kconf.MechScramSHA256 or kconf.MechScramSHA512
	// Superuser bypasses the ACLs: it may do anything, as the service's own
	// principal must (it creates topics, reads every input, commits offsets).
	Superuser bool
	// Read, Write and Groups are topic and group patterns: a name, a prefix
	// ending in "*" ("vigil.*"), or "*" for every one.
	Read, Write, Groups []string
}

// MinBrokerPasswordBytes is the shortest password the users file accepts.
const MinBrokerPasswordBytes = 12

// userNameRE is what a user name may be: no spaces, and none of the
// characters SCRAM escapes in names (',' and '=') or that Kafka principals
// use as separators (':').
var userNameRE = regexp.MustCompile(`^[A-Za-z0-9_][A-Za-z0-9._@-]*$`)

// userKeys are the keys of a user in the users file, in documentation order.
var userKeys = []string{"name", "password", "mechanism", "superuser", "read", "write", "groups"}

// LoadBrokerUsers reads a users file (YAML, or JSON). It warns on log (nil:
// no warning) when group or others may access the file: it holds passwords.
// Errors name the file and line and never hold a password.
func LoadBrokerUsers(path string, log *slog.Logger) ([]BrokerUser, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("broker users: %w", err)
	}
	if fi, err := os.Stat(path); err == nil && fi.Mode().Perm()&0o077 != 0 && log != nil {
		log.Warn("the broker's users file holds passwords but group or others may access it: chmod 600 it",
			"file", path, "mode", fmt.Sprintf("%#o", fi.Mode().Perm()))
	}
	return ParseBrokerUsers(path, src)
}

// ParseBrokerUsers parses the users file src, read from name (for errors).
// Every mistake is reported, each as "name:line: ...", joined.
func ParseBrokerUsers(name string, src []byte) ([]BrokerUser, error) {
	p := usersParser{name: name}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(src)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("%s: no users: list them under \"users:\"", name)
		}
		// yaml.v3's syntax errors name a line and the kind of token, never
		// the text of a value.
		return nil, fmt.Errorf("%s: %w", name, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("%s:%d: want a map with the key \"users\"", name, root.Line)
	}
	var list *yaml.Node
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		switch {
		case k.Value != "users":
			p.errorf(k, "unknown key %q: the file has one key, \"users\"", k.Value)
		case list != nil:
			p.errorf(k, "\"users\" given twice (first on line %d)", list.Line)
		default:
			list = resolve(v)
		}
	}
	var users []BrokerUser
	switch {
	case list == nil:
		if len(p.errs) == 0 {
			p.errorf(root, "no \"users\" key")
		}
	case list.Kind != yaml.SequenceNode:
		p.errorf(list, "\"users\" is a list of users (\"- name: ...\")")
	case len(list.Content) == 0:
		p.errorf(list, "no users: a broker with SASL on and no user accepts no one")
	default:
		seen := map[string]int{}
		for _, n := range list.Content {
			u, ok := p.user(resolve(n))
			if u.Name != "" {
				if line, dup := seen[u.Name]; dup {
					p.errorf(n, "user %q is listed twice (first on line %d)", u.Name, line)
					continue
				}
				seen[u.Name] = n.Line
			}
			if ok {
				users = append(users, u)
			}
		}
	}
	if err := errors.Join(p.errs...); err != nil {
		return nil, err
	}
	return users, nil
}

type usersParser struct {
	name string
	errs []error
}

func (p *usersParser) errorf(n *yaml.Node, format string, args ...any) {
	p.errs = append(p.errs, fmt.Errorf("%s:%d: %s", p.name, n.Line, fmt.Sprintf(format, args...)))
}

func resolve(n *yaml.Node) *yaml.Node {
	if n.Kind == yaml.AliasNode && n.Alias != nil {
		return n.Alias
	}
	return n
}

// user parses one entry; ok is false when it had errors (reported). The
// name is set when it is valid, even then.
func (p *usersParser) user(n *yaml.Node) (u BrokerUser, ok bool) {
	before := len(p.errs)
	if n.Kind != yaml.MappingNode {
		p.errorf(n, "a user is a map of %s", strings.Join(userKeys, ", "))
		return u, false
	}
	fields := map[string]*yaml.Node{}
	keys := map[string]*yaml.Node{}
	for i := 0; i+1 < len(n.Content); i += 2 {
		k, v := n.Content[i], resolve(n.Content[i+1])
		switch {
		case !slices.Contains(userKeys, k.Value):
			p.errorf(k, "unknown key %q (a user has %s)", k.Value, strings.Join(userKeys, ", "))
		case fields[k.Value] != nil:
			p.errorf(k, "key %q given twice (first on line %d)", k.Value, keys[k.Value].Line)
		default:
			fields[k.Value], keys[k.Value] = v, k
		}
	}
	// who names the user in messages from here on.
	who := fmt.Sprintf("user on line %d", n.Line)
	if v := fields["name"]; v == nil {
		p.errorf(n, "a user without a name")
	} else if s, ok := p.scalar(v, "name"); ok {
		if !userNameRE.MatchString(s) {
			p.errorf(v, "name %q: use letters, digits and . _ @ - (no spaces, ',', '=' or ':')", s)
		} else {
			u.Name = s
			who = fmt.Sprintf("user %q", s)
		}
	}
	if v := fields["password"]; v == nil {
		p.errorf(n, "%s has no password", who)
	} else if s, ok := p.scalar(v, who+": password"); ok {
		// Never quote the value: not in this message, not anywhere.
		switch {
		case len(s) < MinBrokerPasswordBytes:
			p.errorf(v, "%s: the password is shorter than %d bytes", who, MinBrokerPasswordBytes)
		case strings.ContainsAny(s, "\x00\r\n"):
			p.errorf(v, "%s: the password contains a NUL or a line break", who)
		default:
			u.Password = kconf.Secret(s)
		}
	}
	u.Mechanism = kconf.MechScramSHA512
	if v := fields["mechanism"]; v != nil {
		if s, ok := p.scalar(v, who+": mechanism"); ok {
			switch m := strings.ToUpper(s); m {
			case kconf.MechPlain, kconf.MechScramSHA256, kconf.MechScramSHA512:
				u.Mechanism = m
			default:
				p.errorf(v, "%s: mechanism %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", who, s)
			}
		}
	}
	if v := fields["superuser"]; v != nil {
		if v.Kind != yaml.ScalarNode || v.Tag != "!!bool" || v.Decode(&u.Superuser) != nil {
			p.errorf(v, "%s: superuser is true or false", who)
		}
	}
	u.Read = p.patterns(fields["read"], who, "read", "topic")
	u.Write = p.patterns(fields["write"], who, "write", "topic")
	u.Groups = p.patterns(fields["groups"], who, "groups", "group")
	if u.Superuser {
		for _, k := range []string{"read", "write", "groups"} {
			if fields[k] != nil {
				p.errorf(keys[k], "%s: a superuser bypasses the ACLs; %s means nothing for it (drop it, or superuser)", who, k)
			}
		}
	}
	return u, len(p.errs) == before
}

// scalar returns the text of a scalar value (a string, or a number or word
// YAML would type otherwise, taken as written).
func (p *usersParser) scalar(v *yaml.Node, what string) (string, bool) {
	if v.Kind != yaml.ScalarNode || v.Tag == "!!null" || v.Value == "" {
		p.errorf(v, "%s: want a non-empty string", what)
		return "", false
	}
	return v.Value, true
}

// patterns reads a list of topic or group patterns.
func (p *usersParser) patterns(v *yaml.Node, who, key, kind string) []string {
	if v == nil {
		return nil
	}
	if v.Kind != yaml.SequenceNode {
		p.errorf(v, "%s: %s is a list of %s names: [a, b, prefix.*]", who, key, kind)
		return nil
	}
	var out []string
	for _, e := range v.Content {
		e = resolve(e)
		if e.Kind != yaml.ScalarNode || e.Tag == "!!null" || e.Value == "" {
			p.errorf(e, "%s: %s: want a %s name", who, key, kind)
			continue
		}
		s := e.Value
		if err := checkPattern(s); err != nil {
			p.errorf(e, "%s: %s: %q: %v", who, key, s, err)
			continue
		}
		out = append(out, s)
	}
	return out
}

func checkPattern(s string) error {
	if strings.ContainsAny(s, " \t\r\n") {
		return errors.New("a name has no spaces")
	}
	if i := strings.IndexByte(s, '*'); i >= 0 && i != len(s)-1 {
		return errors.New("'*' may only end a name (a prefix), or stand alone (every name)")
	}
	return nil
}

// validateBrokerUsers checks users built in code (BrokerConfig.Users) the
// way ParseBrokerUsers checks a file's, without positions.
func validateBrokerUsers(users []BrokerUser) error {
	var errs []error
	seen := map[string]bool{}
	for i, u := range users {
		who := fmt.Sprintf("user %d %q", i+1, u.Name)
		switch {
		case !userNameRE.MatchString(u.Name):
			errs = append(errs, fmt.Errorf("%s: the name is not one the users file accepts", who))
		case seen[u.Name]:
			errs = append(errs, fmt.Errorf("%s: listed twice", who))
		}
		seen[u.Name] = true
		if u.Password == "" {
			errs = append(errs, fmt.Errorf("%s: no password", who))
		}
		switch u.Mechanism {
		case kconf.MechPlain, kconf.MechScramSHA256, kconf.MechScramSHA512:
		default:
			errs = append(errs, fmt.Errorf("%s: mechanism %q is not PLAIN, SCRAM-SHA-256 or SCRAM-SHA-512", who, u.Mechanism))
		}
		for _, s := range append(append(append([]string(nil), u.Read...), u.Write...), u.Groups...) {
			if s == "" {
				errs = append(errs, fmt.Errorf("%s: an empty pattern", who))
			} else if err := checkPattern(s); err != nil {
				errs = append(errs, fmt.Errorf("%s: pattern %q: %w", who, s, err))
			}
		}
	}
	return errors.Join(errs...)
}

// Operations each grant of the users file allows, on topics (read, write)
// or groups. Describe is implied by Read and Write in Kafka, and listed
// anyway so that the mapping reads in full.
var (
	readTopicOps  = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs}
	writeTopicOps = []kmsg.ACLOperation{kmsg.ACLOperationWrite, kmsg.ACLOperationDescribe, kmsg.ACLOperationDescribeConfigs, kmsg.ACLOperationCreate}
	groupOps      = []kmsg.ACLOperation{kmsg.ACLOperationRead, kmsg.ACLOperationDescribe}
)

// acls returns the ACL creations that grant u what the file says; none for
// a superuser (kfake lets it do anything). An idempotent producer's
// InitProducerID needs no ACL of its own: kfake, like Kafka since 2.8,
// allows it to a principal that may write some topic.
func (u BrokerUser) acls() []kmsg.CreateACLsRequestCreation {
	if u.Superuser {
		return nil
	}
	var out []kmsg.CreateACLsRequestCreation
	add := func(rt kmsg.ACLResourceType, pattern string, ops []kmsg.ACLOperation) {
		name, pt := pattern, kmsg.ACLResourcePatternTypeLiteral // "*" is Kafka's literal wildcard
		if p, ok := strings.CutSuffix(pattern, "*"); ok && p != "" {
			name, pt = p, kmsg.ACLResourcePatternTypePrefixed
		}
		for _, op := range ops {
			c := kmsg.NewCreateACLsRequestCreation()
			c.ResourceType = rt
			c.ResourceName = name
			c.ResourcePatternType = pt
			c.Principal = "User:" + u.Name
			c.Host = "*"
			c.Operation = op
			c.PermissionType = kmsg.ACLPermissionTypeAllow
			out = append(out, c)
		}
	}
	for _, t := range u.Read {
		add(kmsg.ACLResourceTypeTopic, t, readTopicOps)
	}
	for _, t := range u.Write {
		add(kmsg.ACLResourceTypeTopic, t, writeTopicOps)
	}
	for _, g := range u.Groups {
		add(kmsg.ACLResourceTypeGroup, g, groupOps)
	}
	return out
}
