package api

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/service"

	"github.com/getkin/kin-openapi/openapi3"
	"github.com/go-chi/chi/v5"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/rules"
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
				// Bearer, and the peer signature on the routes a peer
				// forwards to the owner of the key (forward.go).
				want := 1
				if forwardable[key] {
					want = 2
				}
				if len(*op.Security) != want || (*op.Security)[0]["bearerAuth"] == nil ||
					want == 2 && (*op.Security)[1]["peerSignature"] == nil {
					t.Errorf("%s: security %v, want bearerAuth (and peerSignature when forwarded: %v)", key, *op.Security, forwardable[key])
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

// TestOpenAPIGoTypes holds openapi.json, which is written by hand, to the
// Go types the API encodes and decodes: each schema has exactly the
// properties of its type's JSON fields (YAML fields for the ruleset's
// items, which rules.Load reads), requires every field Go always writes,
// and is closed (additionalProperties: false), as are the schemas of the
// structs inside it, through slices, maps and $refs. The records the
// engine writes byte by byte have no Go type: TestOpenAPIEngineRecords
// holds their schemas to the engine's output.
func TestOpenAPIGoTypes(t *testing.T) {
	s := mustOpenAPI(t)
	component := func(name string) *openapi3.Schema {
		ref := s.doc.Components.Schemas[name]
		if ref == nil || ref.Value == nil {
			t.Fatalf("no schema %s", name)
		}
		return ref.Value
	}
	type check struct {
		name   string
		schema *openapi3.Schema
		typ    reflect.Type
		tag    string   // "json", or "yaml" for what rules.Load reads
		extra  []string // properties the type does not have (an item's name)
	}
	checks := []check{
		{"Problem", component("Problem"), reflect.TypeFor[problem](), "json", nil},
		{"Valid", component("Valid"), reflect.TypeFor[validation](), "json", nil},
		{"Version", component("Version"), reflect.TypeFor[service.Version](), "json", nil},
		{"VersionWithDocument", component("VersionWithDocument"), reflect.TypeFor[versionView](), "json", nil},
		{"VersionPage", component("VersionPage"), reflect.TypeFor[versionPage](), "json", nil},
		{"AuditPage", component("AuditPage"), reflect.TypeFor[auditPage](), "json", nil},
		{"ItemHistory", component("ItemHistory"), reflect.TypeFor[itemHistory](), "json", nil},
		{"RollbackRequest", component("RollbackRequest"), reflect.TypeFor[rollbackRequest](), "json", nil},
		{"BacktestReport", component("BacktestReport"), reflect.TypeFor[service.BacktestReport](), "json", nil},
		{"Identity", component("Identity"), reflect.TypeFor[identity](), "json", nil},
		{"RecentDecisions", component("RecentDecisions"), reflect.TypeFor[recentDecisions](), "json", nil},
		{"Decision", component("Decision"), reflect.TypeFor[service.Decision](), "json", nil},
		{"Entity", component("Entity"), reflect.TypeFor[service.Entity](), "json", nil},
		{"Document", component("Document"), reflect.TypeFor[rules.Document](), "yaml", nil},
	}
	items := map[string]reflect.Type{
		"streams": reflect.TypeFor[rules.StreamSpec](), "windows": reflect.TypeFor[rules.WindowSpec](),
		"rules": reflect.TypeFor[rules.RuleSpec](), "patterns": reflect.TypeFor[rules.PatternSpec](),
		"joins": reflect.TypeFor[rules.JoinSpec](), "enrichments": reflect.TypeFor[rules.EnrichmentSpec](),
	}
	for _, k := range rulesdoc.Kinds() {
		typ, ok := items[k.Plural]
		if !ok {
			t.Errorf("kind %s: no spec type listed here", k.Plural)
			continue
		}
		list := s.doc.Paths.Value("/v1/" + k.Plural).Get.Responses.Status(http.StatusOK).Value.Content.Get("application/json").Schema.Value
		checks = append(checks, check{"GET /v1/" + k.Plural, list, reflect.TypeFor[itemList](), "json", nil})
		extra := []string{"name"}
		if !k.IDField {
			extra = append(extra, "id") // another spelling of name, in requests
		}
		item := s.doc.Paths.Value("/v1/" + k.Plural + "/{id}").Get.Responses.Status(http.StatusOK).Value.Content.Get("application/json").Schema.Value
		checks = append(checks, check{"GET /v1/" + k.Plural + "/{id}", item, typ, "yaml", extra})
		// The same item in a candidate (validate, backtest).
		checks = append(checks, check{"CandidateItem." + k.Singular, component("CandidateItem").Properties[k.Singular].Value, typ, "yaml", extra})
	}
	for _, c := range checks {
		for _, err := range matchSchema(c.name, c.schema, c.typ, c.tag, c.extra) {
			t.Error(err)
		}
	}
}

// customForms are the types whose written form is not their Go fields
// (rules decodes them node by node: times: 3 or [2, 4]; between: [lo,
// hi]; after_match: a name or a mapping; a fallback value; a time).
var customForms = []reflect.Type{
	reflect.TypeFor[rules.TimesSpec](), reflect.TypeFor[rules.SkipSpec](), reflect.TypeFor[rules.Interval](),
	reflect.TypeFor[rules.Value](), reflect.TypeFor[time.Time](),
}

// matchSchema compares a schema with a Go type (see TestOpenAPIGoTypes) and
// returns every difference, each naming where it is.
func matchSchema(at string, sc *openapi3.Schema, typ reflect.Type, tag string, extra []string) []error {
	for typ.Kind() == reflect.Pointer {
		typ = typ.Elem()
	}
	// A $ref with a description beside it is written allOf: [$ref].
	for len(sc.AllOf) == 1 && len(sc.Properties) == 0 {
		sc = sc.AllOf[0].Value
	}
	if slices.Contains(customForms, typ) {
		return nil
	}
	var errs []error
	switch typ.Kind() {
	case reflect.Slice, reflect.Array:
		if typ.Elem().Kind() == reflect.Uint8 { // json.RawMessage, []byte: any value
			return nil
		}
		if sc.Items == nil {
			return []error{fmt.Errorf("%s: a list in Go (%s), no items in the schema", at, typ)}
		}
		return matchSchema(at+"[]", sc.Items.Value, typ.Elem(), tag, nil)
	case reflect.Map:
		if sc.AdditionalProperties.Schema == nil {
			return []error{fmt.Errorf("%s: a map in Go (%s), no additionalProperties schema", at, typ)}
		}
		return matchSchema(at+"{}", sc.AdditionalProperties.Schema.Value, typ.Elem(), tag, nil)
	case reflect.Struct:
	default:
		return nil
	}
	fields := structFields(typ, tag)
	var want []string
	for _, f := range fields {
		want = append(want, f.name)
	}
	want = append(want, extra...)
	slices.Sort(want)
	got := slices.Sorted(maps.Keys(sc.Properties))
	if !slices.Equal(got, want) {
		errs = append(errs, fmt.Errorf("%s: properties %v, the Go type %s has %v", at, got, typ, want))
	}
	if sc.AdditionalProperties.Has == nil || *sc.AdditionalProperties.Has {
		errs = append(errs, fmt.Errorf("%s: not closed (additionalProperties: false), as %s is", at, typ))
	}
	for _, f := range fields {
		if tag == "json" && !f.omitempty && !slices.Contains(sc.Required, f.name) {
			errs = append(errs, fmt.Errorf("%s: %s is always written (%s), the schema does not require it", at, f.name, typ))
		}
		if p := sc.Properties[f.name]; p != nil && p.Value != nil {
			errs = append(errs, matchSchema(at+"."+f.name, p.Value, f.typ, tag, nil)...)
		}
	}
	return errs
}

type goField struct {
	name      string
	omitempty bool
	typ       reflect.Type
}

// structFields lists the fields encoding/json (or the rules decoder, by
// their yaml tags) reads and writes of a struct type: embedded structs
// flattened, a shallower field hiding a deeper one of the same name.
func structFields(typ reflect.Type, tag string) []goField {
	var out []goField
	depth := map[string]int{}
	var walk func(t reflect.Type, d int)
	walk = func(t reflect.Type, d int) {
		for i := range t.NumField() {
			sf := t.Field(i)
			tv := sf.Tag.Get(tag)
			if tv == "-" {
				continue
			}
			name, opts, _ := strings.Cut(tv, ",")
			if sf.Anonymous && name == "" {
				et := sf.Type
				if et.Kind() == reflect.Pointer {
					et = et.Elem()
				}
				if et.Kind() == reflect.Struct {
					walk(et, d+1)
					continue
				}
			}
			if !sf.IsExported() {
				continue
			}
			if name == "" {
				name = sf.Name
			}
			if old, ok := depth[name]; ok {
				if old <= d {
					continue
				}
				out = slices.DeleteFunc(out, func(f goField) bool { return f.name == name })
			}
			depth[name] = d
			out = append(out, goField{name: name, omitempty: strings.Contains(opts, "omitempty"), typ: sf.Type})
		}
	}
	walk(typ, 0)
	return out
}

// TestRedoclyLint lints openapi.json with Redocly CLI's recommended rules
// (redocly.yaml at the repository root says which two it turns off, and
// why): no error, no warning. It runs only with VIGIL_REDOCLY=1, since it
// needs npx and, the first time, fetches @redocly/cli from npm; the version
// is pinned so that a new release's rules change nothing unannounced.
func TestRedoclyLint(t *testing.T) {
	if os.Getenv("VIGIL_REDOCLY") != "1" {
		t.Skip("set VIGIL_REDOCLY=1 to lint openapi.json with Redocly CLI (npx)")
	}
	npx, err := exec.LookPath("npx")
	if err != nil {
		t.Fatalf("VIGIL_REDOCLY=1, but npx is not installed (Node.js): %v", err)
	}
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, npx, "--yes", "@redocly/cli@2.77.0", "lint", "--format=json", "api/openapi.json")
	cmd.Dir = ".." // the repository root, where redocly.yaml is
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	var res struct {
		Totals   struct{ Errors, Warnings int } `json:"totals"`
		Problems []struct {
			RuleID   string `json:"ruleId"`
			Severity string `json:"severity"`
			Message  string `json:"message"`
			Location []struct {
				Pointer string `json:"pointer"`
			} `json:"location"`
		} `json:"problems"`
	}
	if jerr := json.Unmarshal(out, &res); jerr != nil {
		t.Fatalf("redocly lint: %v (%v)\n%s\n%s", err, jerr, out, stderr.Bytes())
	}
	for _, p := range res.Problems {
		where := ""
		if len(p.Location) > 0 {
			where = p.Location[0].Pointer
		}
		t.Errorf("%s %s at %s: %s", p.Severity, p.RuleID, where, p.Message)
	}
	if err != nil || res.Totals.Errors+res.Totals.Warnings > 0 {
		t.Errorf("redocly lint: %v; %d errors, %d warnings", err, res.Totals.Errors, res.Totals.Warnings)
	}
}
