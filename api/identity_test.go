package api

import (
	"net/http"
	"testing"

	"github.com/google/go-cmp/cmp"
)

// TestWhoAmI: GET /v1/me names the caller's key and lists what its role
// grants, for every role; without a known key it is 401.
func TestWhoAmI(t *testing.T) {
	f := newFixture(t)
	for _, k := range testKeys {
		got := decodeBody[identity](t, f.do(req{path: "/v1/me", token: k.Token}))
		want := identity{Name: k.Name, Role: k.Role}
		for _, p := range permissions {
			if k.Role.grants(p) {
				want.Permissions = append(want.Permissions, string(p))
			}
		}
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s (-want +got):\n%s", k.Name, diff)
		}
	}
	reader := decodeBody[identity](t, f.do(req{path: "/v1/me", token: tokReader}))
	if diff := cmp.Diff([]string{"identity:read", "rules:read", "audit:read", "entities:read", "decisions:read", "metrics:read"}, reader.Permissions); diff != "" {
		t.Errorf("reader (-want +got):\n%s", diff)
	}
	mustProblem(t, f.do(req{path: "/v1/me", token: "-"}), http.StatusUnauthorized, probUnauthorized)
	mustProblem(t, f.do(req{path: "/v1/me", token: "not-a-key-not-a-key"}), http.StatusUnauthorized, probUnauthorized)

	open := newFixture(t, func(o *Options) { o.Keys, o.NoAuth = nil, true })
	if got := decodeBody[identity](t, open.do(req{path: "/v1/me", token: "-"})); got.Name != "anonymous" || got.Role != RoleAdmin {
		t.Errorf("without keys: %+v", got)
	}
}
