package api

import (
	"errors"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
	"github.com/vigil-cep/vigil/service"
)

func TestUnauthorized(t *testing.T) {
	f := newFixture(t)
	for _, tc := range []struct {
		name, auth, challenge string
	}{
		{"no header", "", `Bearer realm="vigil"`},
		{"basic scheme", "Basic YWxhZGRpbjpvcGVuc2VzYW1l", `Bearer realm="vigil"`},
		{"empty bearer", "Bearer ", `Bearer realm="vigil"`},
		{"unknown token", "Bearer not-a-known-token-at-all", `Bearer realm="vigil", error="invalid_token"`},
		{"prefix of a token", "Bearer " + tokAdmin[:len(tokAdmin)-1], `Bearer realm="vigil", error="invalid_token"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rec := f.do(req{path: "/v1/ruleset", token: "-", header: map[string]string{"Authorization": tc.auth}})
			mustProblem(t, rec, http.StatusUnauthorized, probUnauthorized)
			if got := rec.Header().Get("WWW-Authenticate"); got != tc.challenge {
				t.Errorf("WWW-Authenticate %q, want %q", got, tc.challenge)
			}
		})
	}
	// The scheme is case-insensitive.
	rec := f.do(req{path: "/v1/audit", token: "-", header: map[string]string{"Authorization": "bearer " + tokReader}})
	mustStatus(t, rec, http.StatusOK)
}

// TestRolesMatrix sends every route with every role's key and checks that
// exactly the roles the matrix grants get past authorization.
func TestRolesMatrix(t *testing.T) {
	f := newFixture(t, func(o *Options) {
		o.Metrics = http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4")
			_, _ = w.Write([]byte("vigil_up 1\n"))
		})
		o.MetricsAuth = true
	})
	fill := strings.NewReplacer("{id}", "big", "{n}", "1", "{key}", "u1")
	for _, rt := range f.h.routes {
		for _, role := range []Role{RoleAdmin, RoleAnalyst, RoleDecider, RoleReader} {
			rec := f.do(req{method: rt.method, path: fill.Replace(rt.pattern), token: tokenFor(role)})
			forbidden := rec.Code == http.StatusForbidden
			if rt.perm == permOpen {
				if forbidden || rec.Code == http.StatusUnauthorized {
					t.Errorf("%s %s as %s: %d, want it open", rt.method, rt.pattern, role, rec.Code)
				}
				continue
			}
			if want := !role.grants(rt.perm); forbidden != want {
				t.Errorf("%s %s as %s: %d (forbidden %v, want %v)", rt.method, rt.pattern, role, rec.Code, forbidden, want)
			}
			if forbidden {
				p := mustProblem(t, rec, http.StatusForbidden, probForbidden)
				if !strings.Contains(p.Detail, string(rt.perm)) {
					t.Errorf("403 detail %q does not name %s", p.Detail, rt.perm)
				}
			}
		}
	}
}

// TestRoleGrants pins the matrix of the package documentation.
func TestRoleGrants(t *testing.T) {
	want := map[Role]string{
		RoleAdmin:   "identity:read rules:read rules:write rules:test audit:read entities:read decisions:read decisions:write metrics:read",
		RoleAnalyst: "identity:read rules:read rules:write rules:test audit:read entities:read decisions:read metrics:read",
		RoleDecider: "identity:read decisions:read decisions:write",
		RoleReader:  "identity:read rules:read audit:read entities:read decisions:read metrics:read",
	}
	for role, w := range want {
		var got []string
		for _, p := range permissions {
			if role.grants(p) {
				got = append(got, string(p))
			}
		}
		if diff := cmp.Diff(w, strings.Join(got, " ")); diff != "" {
			t.Errorf("%s (-want +got):\n%s", role, diff)
		}
	}
	if Role("root").grants(permRulesRead) || Role("root").grants(permIdentity) || Role("root").Valid() {
		t.Error("an unknown role grants something")
	}
}

func TestKeyringLookup(t *testing.T) {
	kr := newKeyring(testKeys)
	for _, k := range testKeys {
		got, ok := kr.lookup(k.Token)
		if !ok || got.Name != k.Name || got.Role != k.Role || got.Token != "" {
			t.Errorf("lookup(%s) = %+v, %v", k.Name, got, ok)
		}
	}
	for _, tok := range []string{"", tokAdmin + "x", strings.ToUpper(tokAdmin), tokAdmin[1:]} {
		if k, ok := kr.lookup(tok); ok {
			t.Errorf("lookup(%q) matched %s", tok, k.Name)
		}
	}
}

func TestParseKeyList(t *testing.T) {
	keys, err := ParseKeyList(" gw:decider:tok-with:colon-0123456789 , ,alice:analyst:abcdefghijklmnop")
	if err != nil {
		t.Fatal(err)
	}
	want := []Key{{Name: "gw", Role: RoleDecider, Token: "tok-with:colon-0123456789"}, {Name: "alice", Role: RoleAnalyst, Token: "abcdefghijklmnop"}}
	if diff := cmp.Diff(want, keys); diff != "" {
		t.Errorf("(-want +got):\n%s", diff)
	}
	_, err = ParseKeyList("gw:decider:tok,secret-token-without-role")
	if err == nil || err.Error() != "api keys: entry 2 is not name:role:token" {
		t.Errorf("error %v", err)
	}
	if keys, err := ParseKeyList(""); err != nil || keys != nil {
		t.Errorf("empty: %v %v", keys, err)
	}
}

func TestLoadKeys(t *testing.T) {
	dir := t.TempDir()
	want := []Key{{Name: "gw", Role: RoleDecider, Token: "0123456789abcdef"}, {Name: "ops", Role: RoleReader, Token: "fedcba9876543210"}}
	files := map[string]string{
		"keys.yaml": "- {name: gw, role: decider, token: \"0123456789abcdef\"}\n- name: ops\n  role: reader\n  token: fedcba9876543210\n",
		"keys.json": `[{"name":"gw","role":"decider","token":"0123456789abcdef"},{"name":"ops","role":"reader","token":"fedcba9876543210"}]`,
	}
	for name, src := range files {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(src), 0o600); err != nil {
			t.Fatal(err)
		}
		keys, err := LoadKeys(path)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if diff := cmp.Diff(want, keys); diff != "" {
			t.Errorf("%s (-want +got):\n%s", name, diff)
		}
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("- {name: gw, rol: decider}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadKeys(bad); err == nil || !strings.Contains(err.Error(), "rol") {
		t.Errorf("unknown field: %v", err)
	}
	if _, err := LoadKeys(filepath.Join(dir, "missing.yaml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}

func TestOptionsValidate(t *testing.T) {
	secret := "this-is-a-secret-token"
	for _, tc := range []struct {
		name string
		opts Options
		want string // regexp over the error
	}{
		{"no keys", Options{}, `no API keys`},
		{"keys and NoAuth", Options{NoAuth: true, Keys: testKeys}, `NoAuth and Keys are both set`},
		{"short token", Options{Keys: []Key{{Name: "a", Role: RoleAdmin, Token: "short"}}}, `key "a": token has fewer than 16 bytes`},
		{"bad role", Options{Keys: []Key{{Name: "a", Role: "root", Token: secret}}}, `key "a": role "root" is not admin`},
		{"dup name", Options{Keys: []Key{{Name: "a", Role: RoleAdmin, Token: secret}, {Name: "a", Role: RoleReader, Token: secret + "2"}}}, `key "a": name appears twice`},
		{"dup token", Options{Keys: []Key{{Name: "a", Role: RoleAdmin, Token: secret}, {Name: "b", Role: RoleReader, Token: secret}}}, `keys "a" and "b" have the same token`},
		{"no name", Options{Keys: []Key{{Role: RoleAdmin, Token: secret}}}, `key 1: name is empty`},
		{"space in token", Options{Keys: []Key{{Name: "a", Role: RoleAdmin, Token: secret + " x"}}}, `whitespace or a comma`},
		{"negative limit", Options{NoAuth: true, MaxBodyBytes: -1}, `negative limit`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := tc.opts.Validate()
			if err == nil || !regexp.MustCompile(tc.want).MatchString(err.Error()) {
				t.Fatalf("error %v, want /%s/", err, tc.want)
			}
			if strings.Contains(err.Error(), secret) {
				t.Errorf("error quotes a token: %v", err)
			}
			if _, err := New(newMemBackend(), tc.opts); err == nil {
				t.Error("New accepted invalid options")
			}
		})
	}
	if err := (&Options{NoAuth: true}).Validate(); err != nil {
		t.Errorf("NoAuth: %v", err)
	}
	if _, err := New(nil, Options{NoAuth: true}); err == nil {
		t.Error("New accepted a nil Backend")
	}
}

func TestNoAuth(t *testing.T) {
	f := newFixture(t, func(o *Options) { o.Keys, o.NoAuth = nil, true })
	rec := f.do(req{method: "PUT", path: "/v1/ruleset", token: "-", body: baseDoc, ctype: "application/yaml", ifMatch: `"0"`})
	mustStatus(t, rec, http.StatusOK)
	if v := decodeBody[service.Version](t, rec); v.Author != "anonymous" {
		t.Errorf("author %q", v.Author)
	}
}
