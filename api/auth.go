package api

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"

	yaml "go.yaml.in/yaml/v3"
)

// Role is what an API key may do. See the roles matrix in the package
// documentation.
type Role string

// Roles.
const (
	// RoleAdmin may do everything.
	RoleAdmin Role = "admin"
	// RoleAnalyst authors rules (read, write, validate, backtest), reads the
	// audit log, entities and decisions.
	RoleAnalyst Role = "analyst"
	// RoleDecider asks for decisions and reads them back: the payment gateway.
	RoleDecider Role = "decider"
	// RoleReader may use every GET endpoint.
	RoleReader Role = "reader"
)

// Valid reports whether r is one of the four roles.
func (r Role) Valid() bool {
	switch r {
	case RoleAdmin, RoleAnalyst, RoleDecider, RoleReader:
		return true
	}
	return false
}

// permission is what a route needs; a role grants a set of them.
type permission string

const (
	permOpen          permission = "open"          // no token needed
	permIdentity      permission = "identity:read" // every key: who am I (GET /v1/me)
	permRulesRead     permission = "rules:read"
	permRulesWrite    permission = "rules:write"
	permRulesTest     permission = "rules:test" // validate, backtest
	permAuditRead     permission = "audit:read"
	permDecide        permission = "decisions:write"
	permDecisionsRead permission = "decisions:read"
	permEntitiesRead  permission = "entities:read"
	permMetricsRead   permission = "metrics:read"
)

// permissions lists every permission but permOpen, in the order of the
// roles matrix (GET /v1/me lists a key's).
var permissions = []permission{permIdentity, permRulesRead, permRulesWrite, permRulesTest, permAuditRead,
	permEntitiesRead, permDecisionsRead, permDecide, permMetricsRead}

// grants is the roles matrix. Admin is handled apart: it has every
// permission, including ones added later.
func (r Role) grants(p permission) bool {
	if p == permIdentity {
		return r.Valid()
	}
	switch r {
	case RoleAdmin:
		return true
	case RoleAnalyst:
		switch p {
		case permRulesRead, permRulesWrite, permRulesTest, permAuditRead, permEntitiesRead, permDecisionsRead, permMetricsRead:
			return true
		}
	case RoleDecider:
		return p == permDecide || p == permDecisionsRead
	case RoleReader:
		switch p {
		case permRulesRead, permAuditRead, permEntitiesRead, permDecisionsRead, permMetricsRead:
			return true
		}
	}
	return false
}

// MinTokenBytes is the shortest token a Key may have: shorter ones are easy
// to guess.
const MinTokenBytes = 16

// Key is one API key: a bearer token and the role it grants. Name
// identifies the key in access logs and as the author of ruleset changes;
// the token is never logged.
type Key struct {
	Name  string `json:"name" yaml:"name"`
	Token string `json:"token" yaml:"token"`
	Role  Role   `json:"role" yaml:"role"`
}

// KeysEnv is the environment variable cmd/vigil reads API keys from, in the
// form ParseKeyList reads: "name:role:token,name:role:token".
const KeysEnv = "VIGIL_API_KEYS"

// ParseKeyList reads keys written as "name:role:token" separated by commas
// (the VIGIL_API_KEYS form). Tokens may contain ':' but not ','. Blank
// entries are skipped. The keys are not validated: Options.Validate does it.
func ParseKeyList(s string) ([]Key, error) {
	var keys []Key
	for i, item := range strings.Split(s, ",") {
		item = strings.TrimSpace(item)
		if item == "" {
			continue
		}
		name, rest, ok1 := strings.Cut(item, ":")
		role, token, ok2 := strings.Cut(rest, ":")
		if !ok1 || !ok2 {
			// Do not echo the entry: it holds a token.
			return nil, fmt.Errorf("api keys: entry %d is not name:role:token", i+1)
		}
		keys = append(keys, Key{Name: name, Role: Role(role), Token: token})
	}
	return keys, nil
}

// LoadKeys reads a keys file: a YAML or JSON list of {name, role, token}
// objects (".json" files are read as JSON, anything else as YAML, which
// also reads JSON).
//
//   - {name: gateway, role: decider, token: "…"}
//   - {name: alice, role: analyst, token: "…"}
//
// The keys are not validated: Options.Validate does it.
func LoadKeys(path string) ([]Key, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("load api keys: %w", err)
	}
	var keys []Key
	if strings.EqualFold(filepath.Ext(path), ".json") {
		dec := json.NewDecoder(strings.NewReader(string(src)))
		dec.DisallowUnknownFields()
		err = dec.Decode(&keys)
	} else {
		dec := yaml.NewDecoder(strings.NewReader(string(src)))
		dec.KnownFields(true)
		err = dec.Decode(&keys)
	}
	if err != nil {
		return nil, fmt.Errorf("load api keys from %s: %w", path, err)
	}
	return keys, nil
}

// validateKeys checks names, roles and tokens; errors never quote a token.
func validateKeys(keys []Key) error {
	var errs []error
	names := map[string]bool{}
	tokens := map[[sha256.Size]byte]string{}
	for i, k := range keys {
		switch {
		case k.Name == "":
			errs = append(errs, fmt.Errorf("key %d: name is empty", i+1))
		case names[k.Name]:
			errs = append(errs, fmt.Errorf("key %q: name appears twice", k.Name))
		}
		names[k.Name] = true
		if !k.Role.Valid() {
			errs = append(errs, fmt.Errorf("key %q: role %q is not admin, analyst, decider or reader", k.Name, k.Role))
		}
		if len(k.Token) < MinTokenBytes {
			errs = append(errs, fmt.Errorf("key %q: token has fewer than %d bytes", k.Name, MinTokenBytes))
		}
		if strings.ContainsAny(k.Token, " \t\r\n,") {
			errs = append(errs, fmt.Errorf("key %q: token contains whitespace or a comma", k.Name))
		}
		h := sha256.Sum256([]byte(k.Token))
		if other, dup := tokens[h]; dup {
			errs = append(errs, fmt.Errorf("keys %q and %q have the same token", other, k.Name))
		}
		tokens[h] = k.Name
	}
	return errors.Join(errs...)
}

// keyring checks bearer tokens. It is immutable after newKeyring and safe
// for concurrent use.
type keyring struct {
	hashes [][sha256.Size]byte
	keys   []Key // Token cleared: the ring keeps only hashes
}

func newKeyring(keys []Key) *keyring {
	kr := &keyring{}
	for _, k := range keys {
		kr.hashes = append(kr.hashes, sha256.Sum256([]byte(k.Token)))
		kr.keys = append(kr.keys, Key{Name: k.Name, Role: k.Role})
	}
	return kr
}

// lookup returns the key whose token is token. It hashes the token first so
// that the comparison time does not depend on its length, and compares it
// with every key without stopping at a match so that the time does not tell
// which key matched either.
func (kr *keyring) lookup(token string) (Key, bool) {
	h := sha256.Sum256([]byte(token))
	found := -1
	for i := range kr.hashes {
		eq := subtle.ConstantTimeCompare(h[:], kr.hashes[i][:])
		found = subtle.ConstantTimeSelect(eq, i, found)
	}
	if found < 0 {
		return Key{}, false
	}
	return kr.keys[found], true
}

// bearerToken returns the token of an "Authorization: Bearer …" header.
func bearerToken(r *http.Request) (string, bool) {
	h := r.Header.Get("Authorization")
	scheme, token, ok := strings.Cut(h, " ")
	if !ok || !strings.EqualFold(scheme, "Bearer") {
		return "", false
	}
	token = strings.TrimSpace(token)
	return token, token != ""
}

// anonymous is who every request is when authentication is off.
var anonymous = Key{Name: "anonymous", Role: RoleAdmin}

// authorize returns middleware that lets a request through when its key's
// role grants p: 401 without a known token, 403 with a role that lacks p.
func (h *Handler) authorize(p permission) func(http.Handler) http.Handler {
	return func(next http.Handler) http.Handler {
		if p == permOpen {
			return next
		}
		return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			key := anonymous
			switch {
			case forwarded(r) && !h.noAuth:
				// A peer checked the caller's key and vouches for it.
				k, err := h.peerKey(r)
				if err != nil {
					h.problem(w, r, http.StatusUnauthorized, probUnauthorized, "forwarded request refused: "+err.Error())
					return
				}
				key = k
			case !h.noAuth:
				token, ok := bearerToken(r)
				if !ok {
					w.Header().Set("WWW-Authenticate", `Bearer realm="vigil"`)
					h.problem(w, r, http.StatusUnauthorized, probUnauthorized, "an API key is required: Authorization: Bearer <token>")
					return
				}
				if key, ok = h.keys.lookup(token); !ok {
					w.Header().Set("WWW-Authenticate", `Bearer realm="vigil", error="invalid_token"`)
					h.problem(w, r, http.StatusUnauthorized, probUnauthorized, "the API key is not known")
					return
				}
			}
			if info := requestInfoFrom(r.Context()); info != nil {
				info.caller = key // where caller finds it: no context to copy the request for
			}
			if !key.Role.grants(p) {
				h.problem(w, r, http.StatusForbidden, probForbidden, fmt.Sprintf("role %s may not do this (needs %s)", key.Role, p))
				return
			}
			next.ServeHTTP(w, r)
		})
	}
}

// caller returns the key of an authorized request.
func caller(ctx context.Context) Key {
	if info := requestInfoFrom(ctx); info != nil {
		return info.caller
	}
	return Key{}
}
