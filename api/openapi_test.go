package api

import (
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/go-chi/chi/v5"
)

type openAPIOperation struct {
	OperationID string                 `json:"operationId"`
	Security    *[]map[string][]string `json:"security"`
	Permission  string                 `json:"x-vigil-permission"`
	Responses   map[string]any         `json:"responses"`
}

// TestOpenAPISync holds openapi.json to the router: every route is
// documented, every documented operation is routed, and each lists the
// permission the router enforces and the security requirement (none for
// the open routes).
func TestOpenAPISync(t *testing.T) {
	var doc struct {
		OpenAPI string                                 `json:"openapi"`
		Paths   map[string]map[string]openAPIOperation `json:"paths"`
	}
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatalf("openapi.json: %v", err)
	}
	if doc.OpenAPI != "3.0.3" {
		t.Errorf("openapi %q", doc.OpenAPI)
	}
	f := newFixture(t, func(o *Options) { o.Metrics = http.NotFoundHandler() })

	routed := map[string]bool{}
	err := chi.Walk(f.h.mux, func(method, route string, _ http.Handler, _ ...func(http.Handler) http.Handler) error {
		routed[method+" "+route] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	perms := map[string]permission{}
	for _, rt := range f.h.routes {
		perms[rt.method+" "+rt.pattern] = rt.perm
	}
	if len(routed) != len(perms) {
		t.Errorf("chi has %d routes, the table %d", len(routed), len(perms))
	}

	documented := map[string]bool{}
	ids := map[string]bool{}
	for path, ops := range doc.Paths {
		for method, op := range ops {
			key := strings.ToUpper(method) + " " + path
			documented[key] = true
			if !routed[key] {
				t.Errorf("documented but not routed: %s", key)
			}
			if op.OperationID == "" || ids[op.OperationID] {
				t.Errorf("%s: operationId %q missing or repeated", key, op.OperationID)
			}
			ids[op.OperationID] = true
			perm, ok := perms[key]
			if !ok {
				continue
			}
			if op.Permission != string(perm) {
				t.Errorf("%s: x-vigil-permission %q, router enforces %q", key, op.Permission, perm)
			}
			switch {
			case op.Security == nil:
				t.Errorf("%s: no security requirement listed", key)
			case perm == permOpen && len(*op.Security) != 0:
				t.Errorf("%s is open but documents security %v", key, *op.Security)
			case perm != permOpen:
				if len(*op.Security) != 1 || (*op.Security)[0]["bearerAuth"] == nil {
					t.Errorf("%s: security %v, want bearerAuth", key, *op.Security)
				}
				for _, code := range []string{"401", "403"} {
					if op.Responses[code] == nil {
						t.Errorf("%s does not document %s", key, code)
					}
				}
			}
		}
	}
	for key := range routed {
		if !documented[key] {
			t.Errorf("routed but not documented: %s", key)
		}
	}
}

// TestOpenAPIRefs checks that every $ref of openapi.json resolves.
func TestOpenAPIRefs(t *testing.T) {
	var doc map[string]any
	if err := json.Unmarshal(openAPIDocument, &doc); err != nil {
		t.Fatal(err)
	}
	var refs []string
	var walk func(v any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if r, ok := v["$ref"].(string); ok {
				refs = append(refs, r)
			}
			for _, e := range v {
				walk(e)
			}
		case []any:
			for _, e := range v {
				walk(e)
			}
		}
	}
	walk(doc)
	slices.Sort(refs)
	for _, r := range slices.Compact(refs) {
		var cur any = doc
		for _, part := range strings.Split(strings.TrimPrefix(r, "#/"), "/") {
			m, _ := cur.(map[string]any)
			cur = m[part]
		}
		if cur == nil {
			t.Errorf("unresolved $ref %s", r)
		}
	}
	if len(refs) < 50 {
		t.Errorf("only %d refs: is the document complete?", len(refs))
	}
}
