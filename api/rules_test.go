package api

import (
	"encoding/json"
	"net/http"
	"os"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/vigil-cep/vigil/service"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-cep/vigil/internal/rulesdoc"
	"github.com/vigil-cep/vigil/rules"
)

func TestDocumentKinds(t *testing.T) {
	var got []string
	for _, k := range rulesdoc.Kinds() {
		got = append(got, k.Plural+"/"+k.Singular)
		if k.IDField != (k.Plural == "streams") {
			t.Errorf("%s: idField %v", k.Plural, k.IDField)
		}
	}
	want := []string{"streams/stream", "windows/window", "rules/rule", "patterns/pattern", "joins/join", "enrichments/enrichment"}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("kinds (-want +got):\n%s", diff)
	}
	// "name" identifies items in bodies: no spec may have such a field.
	dt := reflect.TypeFor[rules.Document]()
	for i := range dt.NumField() {
		f := dt.Field(i)
		if f.Type.Kind() != reflect.Map || !f.IsExported() {
			continue
		}
		spec := f.Type.Elem().Elem()
		for j := range spec.NumField() {
			if tag, _, _ := strings.Cut(spec.Field(j).Tag.Get("yaml"), ","); tag == "name" {
				t.Errorf("%s has a field named name", spec)
			}
		}
	}
}

func TestRulesetDocument(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{path: "/v1/ruleset", token: tokReader})
	mustProblem(t, rec, http.StatusNotFound, probNotFound)
	if rec.Header().Get("ETag") != `"0"` {
		t.Errorf("ETag %q before the first version", rec.Header().Get("ETag"))
	}

	put := req{method: "PUT", path: "/v1/ruleset?comment=first", token: tokAnalyst, body: baseDoc, ctype: "application/yaml"}
	mustProblem(t, f.do(put), http.StatusPreconditionRequired, probPreconditionReq)
	put.ifMatch = `"3"`
	p := mustProblem(t, f.do(put), http.StatusPreconditionFailed, probPrecondition)
	if p.CurrentVersion == nil || *p.CurrentVersion != 0 {
		t.Errorf("current_version %v", p.CurrentVersion)
	}
	put.ifMatch = `"0"`
	rec = f.do(put)
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("ETag") != `"1"` {
		t.Errorf("ETag %q", rec.Header().Get("ETag"))
	}
	v := decodeBody[map[string]any](t, rec)
	if v["version"] != float64(1) || v["author"] != "alice" || v["comment"] != "first" || v["digest"] == "" {
		t.Errorf("published %v", v)
	}

	rec = f.do(req{path: "/v1/ruleset", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("ETag") != `"1"` {
		t.Errorf("ETag %q", rec.Header().Get("ETag"))
	}
	got := decodeBody[struct {
		Version  int64
		Author   string
		Document map[string]map[string]map[string]any
	}](t, rec)
	if got.Version != 1 || got.Author != "alice" || got.Document["rules"]["big"]["when"] != "amount > 100" || got.Document["streams"]["transactions"]["decide"] != true {
		t.Errorf("GET /v1/ruleset: %s", rec.Body)
	}
	rec = f.do(req{path: "/v1/ruleset", header: map[string]string{"Accept": "application/yaml, application/json;q=0.5"}})
	mustStatus(t, rec, http.StatusOK)
	if rec.Body.String() != baseDoc || rec.Header().Get("Content-Type") != "application/yaml" {
		t.Errorf("YAML GET: %q %q", rec.Header().Get("Content-Type"), rec.Body)
	}

	// A JSON document, a weak ETag.
	jsonDoc := `{"streams":{"tx":{"key":"user_id","time":"ts","id":"tx_id","decide":true}},"rules":{"r":{"stream":"tx","action":"block","score":1,"when":"amount > 5"}}}`
	rec = f.do(req{method: "PUT", path: "/v1/ruleset", body: jsonDoc, ifMatch: `W/"1"`})
	mustStatus(t, rec, http.StatusOK)

	// Stale, then a conflict inside Publish, then "*".
	p = mustProblem(t, f.do(req{method: "PUT", path: "/v1/ruleset", body: baseDoc, ctype: "application/yaml", ifMatch: `"1"`}), http.StatusPreconditionFailed, probPrecondition)
	if p.CurrentVersion == nil || *p.CurrentVersion != 2 {
		t.Errorf("current_version %v", p.CurrentVersion)
	}
	mustProblem(t, f.do(req{method: "PUT", path: "/v1/ruleset", body: baseDoc, ctype: "application/yaml", ifMatch: `"abc"`}), http.StatusPreconditionFailed, probPrecondition)
	f.b.mu.Lock()
	f.b.mu.conflictOnce = true
	f.b.mu.Unlock()
	// A version published between the If-Match check and the publish: the
	// 412 names the current version, as the check's own does.
	rec = f.do(req{method: "PUT", path: "/v1/ruleset", body: baseDoc, ctype: "application/yaml", ifMatch: `"2"`})
	if p := mustProblem(t, rec, http.StatusPreconditionFailed, probPrecondition); p.CurrentVersion == nil || *p.CurrentVersion != 2 || rec.Header().Get("ETag") != `"2"` {
		t.Errorf("concurrent change: current_version %v, ETag %q; want 2", p.CurrentVersion, rec.Header().Get("ETag"))
	}
	rec = f.do(req{method: "PUT", path: "/v1/ruleset", body: baseDoc, ctype: "application/yaml", ifMatch: `"9", "2"`})
	mustStatus(t, rec, http.StatusOK)
	rec = f.do(req{method: "PUT", path: "/v1/ruleset", body: baseDoc, ctype: "application/yaml", ifMatch: `*`})
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("ETag") != `"4"` {
		t.Errorf("ETag %q", rec.Header().Get("ETag"))
	}

	mustProblem(t, f.do(req{method: "PUT", path: "/v1/ruleset", body: baseDoc, ctype: "text/plain", ifMatch: `"4"`}), http.StatusUnsupportedMediaType, probMediaType)
	mustProblem(t, f.do(req{method: "PUT", path: "/v1/ruleset?comment=" + strings.Repeat("x", 1001), body: baseDoc, ctype: "application/yaml", ifMatch: `"4"`}), http.StatusBadRequest, probBadRequest)
	if f.current() != 4 {
		t.Errorf("version %d after refused writes", f.current())
	}
}

// threeMistakes are the errors of rules/testdata/three_mistakes.yaml, as
// the API reports them.
var threeMistakes = []documentError{
	{Path: "rules.big.stream", Line: 10, Column: 13, Message: `unknown stream "transactoins" (streams: transactions)`},
	{Path: "rules.slow.action", Line: 16, Column: 13, Message: `action must be allow, review or block, not "stop"`},
}

func TestInvalidDocument422(t *testing.T) {
	src, err := os.ReadFile("../rules/testdata/three_mistakes.yaml")
	if err != nil {
		t.Fatal(err)
	}
	_, loadErr := rules.Load(src)
	want, _ := asErrorList(loadErr)
	if len(want) != 3 {
		t.Fatalf("rules.Load: %v", loadErr)
	}
	f := newFixture(t)
	for _, r := range []req{
		{method: "PUT", path: "/v1/ruleset", body: string(src), ctype: "application/yaml", ifMatch: `"0"`},
		{method: "POST", path: "/v1/rules:validate", body: string(src), ctype: "application/x-yaml"},
	} {
		p := mustProblem(t, f.do(r), http.StatusUnprocessableEntity, probInvalidRuleset)
		if diff := cmp.Diff(documentErrors(want), p.Errors); diff != "" {
			t.Errorf("%s %s errors (-want +got):\n%s", r.method, r.path, diff)
		}
		for _, e := range p.Errors {
			if e.Line == 0 || e.Column == 0 || e.Message == "" || e.Path == "" || !strings.Contains(e.Snippet, "^") {
				t.Errorf("error without a position: %+v", e)
			}
		}
		if p.Detail != "the document has 3 errors" {
			t.Errorf("detail %q", p.Detail)
		}
	}
	// Pin two of the user-visible messages exactly.
	p := mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:validate", body: string(src), ctype: "application/yaml"}), http.StatusUnprocessableEntity, probInvalidRuleset)
	for _, w := range threeMistakes {
		i := slices.IndexFunc(p.Errors, func(e documentError) bool { return e.Path == w.Path })
		if i < 0 {
			t.Errorf("no error at %s: %+v", w.Path, p.Errors)
			continue
		}
		e := p.Errors[i]
		e.Snippet = ""
		if diff := cmp.Diff(w, e); diff != "" {
			t.Errorf("%s (-want +got):\n%s", w.Path, diff)
		}
	}
	if f.current() != 0 {
		t.Error("an invalid document was published")
	}
}

func TestValidate(t *testing.T) {
	f := newFixture(t)
	rec := f.do(req{method: "POST", path: "/v1/rules:validate", token: tokAnalyst, body: baseDoc, ctype: "application/yaml"})
	mustStatus(t, rec, http.StatusOK)
	if rec.Body.String() != "{\"valid\":true}\n" {
		t.Errorf("body %q", rec.Body)
	}
	rec = f.do(req{method: "POST", path: "/v1/rules:validate", body: `{"streams":{"t":{"key":"k"}}}`})
	mustStatus(t, rec, http.StatusOK)
	// JSON syntax errors are document errors with a position.
	p := mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:validate", body: "{\"streams\": {\n  \"t\": {\"key\": \"k\"\n}"}), http.StatusUnprocessableEntity, probInvalidRuleset)
	if len(p.Errors) != 1 || p.Errors[0].Line == 0 {
		t.Errorf("errors %+v", p.Errors)
	}
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:validate", body: baseDoc, ctype: "text/plain"}), http.StatusUnsupportedMediaType, probMediaType)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:validate", body: baseDoc, ctype: "application/yaml", token: tokReader}), http.StatusForbidden, probForbidden)
	if f.current() != 0 {
		t.Error("validate published")
	}
}

func TestItemsCRUD(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)

	rec := f.do(req{path: "/v1/rules", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	list := decodeBody[struct {
		Version int64
		Items   []map[string]any
	}](t, rec)
	if list.Version != 1 || len(list.Items) != 1 || list.Items[0]["name"] != "big" || list.Items[0]["score"] != float64(10) {
		t.Errorf("list %s", rec.Body)
	}

	manyIPs := `{"name": "many_ips", "stream": "transactions", "action": "block", "score": 80, "mode": "active",
	  "when": "len(uniq(map(history(\"transactions\", \"5m\"), .ip))) >= 3", "reason": "\"3+ IPs in 5 minutes\""}`
	post := req{method: "POST", path: "/v1/rules?comment=ip+hopping", token: tokAnalyst, body: manyIPs}
	mustProblem(t, f.do(post), http.StatusPreconditionRequired, probPreconditionReq)
	post.ifMatch = `"1"`
	rec = f.do(post)
	mustStatus(t, rec, http.StatusCreated)
	if rec.Header().Get("Location") != "/v1/rules/many_ips" || rec.Header().Get("ETag") != `"2"` {
		t.Errorf("headers %v", rec.Header())
	}
	created := decodeBody[map[string]any](t, rec)
	if created["name"] != "many_ips" || created["when"] != `len(uniq(map(history("transactions", "5m"), .ip))) >= 3` {
		t.Errorf("created %v", created)
	}
	if v, _ := f.b.Version(t.Context(), 2); v.Author != "alice" || v.Comment != "ip hopping" {
		t.Errorf("change %+v", v.Change)
	}
	post.ifMatch = `"2"`
	mustProblem(t, f.do(post), http.StatusConflict, probConflict)
	post.ifMatch = `"1"`
	mustProblem(t, f.do(post), http.StatusPreconditionFailed, probPrecondition)

	rec = f.do(req{path: "/v1/rules/many_ips", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("ETag") != `"2"` || !cmp.Equal(decodeBody[map[string]any](t, rec), created) {
		t.Errorf("GET: %s", rec.Body)
	}

	// Replace with a shadow version; PUT the same again: no new version.
	shadow := strings.Replace(manyIPs, `"active"`, `"shadow"`, 1)
	rec = f.do(req{method: "PUT", path: "/v1/rules/many_ips", body: shadow, ifMatch: `"2"`})
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("ETag") != `"3"` || decodeBody[map[string]any](t, rec)["mode"] != "shadow" {
		t.Errorf("PUT: %v %s", rec.Header(), rec.Body)
	}
	rec = f.do(req{method: "PUT", path: "/v1/rules/many_ips", body: shadow, ifMatch: `"3"`})
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("ETag") != `"3"` || f.current() != 3 {
		t.Errorf("a no-op PUT published version %d", f.current())
	}

	// PUT creates, from YAML, with draft mode; the URL names it.
	small := "stream: transactions\naction: review\nscore: 1\nmode: draft\nwhen: amount < 1\n"
	rec = f.do(req{method: "PUT", path: "/v1/rules/small", body: small, ctype: "application/yaml", ifMatch: `"3"`})
	mustStatus(t, rec, http.StatusCreated)
	if rec.Header().Get("Location") != "/v1/rules/small" || rec.Header().Get("ETag") != `"4"` {
		t.Errorf("headers %v", rec.Header())
	}
	mustProblem(t, f.do(req{method: "PUT", path: "/v1/rules/small", body: `{"name":"other","stream":"transactions"}`, ifMatch: `"4"`}), http.StatusBadRequest, probBadRequest)
	mustProblem(t, f.do(req{method: "PUT", path: "/v1/rules/small", body: `{"name":"small","id":"other"}`, ifMatch: `"4"`}), http.StatusBadRequest, probBadRequest)

	// Item edits publish canonical JSON; GET of the item is unchanged.
	v4, _ := f.b.Version(t.Context(), 4)
	if !json.Valid(v4.Document) || !strings.Contains(string(v4.Document), `"when": "amount < 1"`) {
		t.Errorf("published document:\n%s", v4.Document)
	}

	rec = f.do(req{method: "DELETE", path: "/v1/rules/small", ifMatch: `"4"`})
	mustStatus(t, rec, http.StatusNoContent)
	if rec.Header().Get("ETag") != `"5"` {
		t.Errorf("ETag %q", rec.Header().Get("ETag"))
	}
	mustProblem(t, f.do(req{method: "DELETE", path: "/v1/rules/small", ifMatch: `"5"`}), http.StatusNotFound, probNotFound)
	mustProblem(t, f.do(req{method: "DELETE", path: "/v1/rules/big", ifMatch: `"4"`}), http.StatusPreconditionFailed, probPrecondition)
	mustProblem(t, f.do(req{method: "DELETE", path: "/v1/rules/big"}), http.StatusPreconditionRequired, probPreconditionReq)
	mustProblem(t, f.do(req{path: "/v1/rules/small"}), http.StatusNotFound, probNotFound)
	mustProblem(t, f.do(req{path: "/v1/rules/small", token: tokDecider}), http.StatusForbidden, probForbidden)

	// Deleting a stream that rules read is an invalid document.
	p := mustProblem(t, f.do(req{method: "DELETE", path: "/v1/streams/transactions", ifMatch: `"5"`}), http.StatusUnprocessableEntity, probInvalidRuleset)
	if len(p.Errors) == 0 {
		t.Error("no errors")
	}
	if f.current() != 5 {
		t.Errorf("version %d", f.current())
	}
}

func TestItemErrors(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	post := func(body, ctype string) *req {
		return &req{method: "POST", path: "/v1/rules", body: body, ctype: ctype, ifMatch: `"1"`}
	}
	for _, tc := range []struct {
		name   string
		r      *req
		status int
		typ    problemType
		detail string
	}{
		{"malformed JSON", post(`{"name": "x", "stream": }`, ""), 400, probMalformedJSON, "line 1, column 25: invalid character '}' looking for beginning of value"},
		{"trailing data", post(`{"name": "x"} {}`, ""), 400, probMalformedJSON, "data after the JSON value"},
		{"array body", post(`[1, 2]`, ""), 400, probBadRequest, "the body must be an object (the item's fields and its name)"},
		{"no name", post(`{"stream": "transactions"}`, ""), 400, probBadRequest, `the rule needs a name: "name" in the body`},
		{"name not a string", post(`{"name": 3}`, ""), 400, probBadRequest, `"name" must be a non-empty string`},
		{"text/plain", post(`{"name": "x"}`, "text/plain"), 415, probMediaType, `Content-Type "text/plain" is not accepted here; send application/json or application/yaml`},
		{"bad media type", post(`{"name": "x"}`, "application/"), 415, probMediaType, `Content-Type "application/" is not accepted here; send application/json or application/yaml`},
		{"malformed YAML", post("name: [x\n", "application/yaml"), 400, probBadRequest, "malformed YAML: yaml: line 1: did not find expected ',' or ']'"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustProblem(t, f.do(*tc.r), tc.status, tc.typ)
			if p.Detail != tc.detail {
				t.Errorf("detail %q, want %q", p.Detail, tc.detail)
			}
		})
	}

	// Invalid items: 422 with the path into the item and a position in the
	// published JSON.
	for _, tc := range []struct {
		name, body, path, msg string
	}{
		{"bad expression", `{"name":"bad","stream":"transactions","action":"block","when":"amount >"}`, "rules.bad.when", "unexpected token EOF"},
		{"bad mode", `{"name":"bad","stream":"transactions","action":"block","mode":"paused","when":"true"}`, "rules.bad.mode", `mode must be active, shadow, disabled or draft, not "paused"`},
		{"unknown stream", `{"name":"bad","stream":"nope","action":"block","when":"true"}`, "rules.bad.stream", `unknown stream "nope"`},
		{"unknown field", `{"name":"bad","stream":"transactions","action":"block","when":"true","whne":"x"}`, "rules.bad.whne", `unknown field "whne"`},
		{"bad name", `{"name":"b a d","stream":"transactions","action":"block","when":"true"}`, "rules.b a d", `use letters, digits`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := mustProblem(t, f.do(req{method: "POST", path: "/v1/rules", body: tc.body, ifMatch: `"1"`}), 422, probInvalidRuleset)
			i := slices.IndexFunc(p.Errors, func(e documentError) bool { return e.Path == tc.path })
			if i < 0 {
				t.Fatalf("no error at %s: %+v", tc.path, p.Errors)
			}
			if e := p.Errors[i]; !strings.Contains(e.Message, tc.msg) || e.Line == 0 || e.Column == 0 {
				t.Errorf("error %+v, want message with %q and a position", e, tc.msg)
			}
		})
	}
	if f.current() != 1 {
		t.Errorf("version %d after refused writes", f.current())
	}
}

// TestEveryKind creates an item of each kind through its routes and reads
// it back as written: the forms rules' types do not encode back (times
// [n, m], after_match objects, between, fallback) survive the edit.
func TestEveryKind(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	items := []struct{ kind, body string }{
		{"streams", `{"name":"orders","topic":"orders","key":"user_id","time":"ts","id":"order_id","watermark":{"max_out_of_order":"5s"}}`},
		{"streams", `{"name":"payments","key":"user_id","time":"ts"}`},
		{"windows", `{"name":"per_minute","stream":"transactions","tumbling":"1m","aggregate":{"count":"count()","total":"sum(amount)"}}`},
		{"patterns", `{"name":"ato","stream":"logins","within":"5m","after_match":{"skip_to_last":"failed"},"steps":[{"name":"failed","where":"status == \"FAILED\"","times":[2,4]},{"name":"ok","contiguity":"strict","where":"status == \"SUCCESS\""}]}`},
		{"joins", `{"name":"paid","left":"orders","right":"payments","between":["0s","5m"],"where":"left.order_id == right.order_id"}`},
		{"enrichments", `{"name":"profile","stream":"transactions","redis":{"hash":"\"profile:\" + user_id"},"timeout":"50ms","capacity":100,"fallback":{"risk":"UNKNOWN","n":1.5}}`},
	}
	for _, it := range items {
		rec := f.do(req{method: "POST", path: "/v1/" + it.kind, body: it.body, ifMatch: etag(f.current())})
		mustStatus(t, rec, http.StatusCreated)
		var want, got any
		_ = json.Unmarshal([]byte(it.body), &want)
		name := want.(map[string]any)["name"].(string)
		rec = f.do(req{path: "/v1/" + it.kind + "/" + name})
		mustStatus(t, rec, http.StatusOK)
		_ = json.Unmarshal(rec.Body.Bytes(), &got)
		if diff := cmp.Diff(want, got); diff != "" {
			t.Errorf("%s %s (-posted +read):\n%s", it.kind, name, diff)
		}
	}
	// A stream's "id" is its event id expression, not the item's name.
	rec := f.do(req{path: "/v1/streams/orders"})
	if decodeBody[map[string]any](t, rec)["id"] != "order_id" {
		t.Errorf("stream id: %s", rec.Body)
	}
	// Elsewhere "id" may name the item.
	rec = f.do(req{method: "POST", path: "/v1/rules", body: `{"id":"by_id","stream":"transactions","action":"allow","when":"true"}`, ifMatch: etag(f.current())})
	mustStatus(t, rec, http.StatusCreated)
	if rec.Header().Get("Location") != "/v1/rules/by_id" {
		t.Errorf("Location %q", rec.Header().Get("Location"))
	}
	// The last document loads.
	cur, _ := f.b.Ruleset(t.Context())
	if _, err := rules.Load(cur.Document); err != nil {
		t.Errorf("published document: %v", err)
	}
}

func TestItemVersionsAndRollback(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)                                                                                                                                                           // v1: big (score 10)
	mustStatus(t, f.do(req{method: "PUT", path: "/v1/rules/big", body: `{"stream":"transactions","action":"review","score":20,"when":"amount > 100"}`, ifMatch: `"1"`}), 200)    // v2
	mustStatus(t, f.do(req{method: "POST", path: "/v1/windows", body: `{"name":"w","stream":"transactions","tumbling":"1m","aggregate":{"n":"count()"}}`, ifMatch: `"2"`}), 201) // v3: big unchanged
	mustStatus(t, f.do(req{method: "DELETE", path: "/v1/rules/big", ifMatch: `"3"`, token: tokAnalyst}), 204)                                                                    // v4

	rec := f.do(req{path: "/v1/rules/big/versions", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	h := decodeBody[itemHistory](t, rec)
	var got []string
	for _, v := range h.Versions {
		s := etag(v.Version) + " " + v.Author
		if v.Deleted {
			s += " deleted"
		} else {
			var item map[string]any
			_ = json.Unmarshal(v.Item, &item)
			s += " score=" + jsonString(item["score"]) + " name=" + jsonString(item["name"])
		}
		got = append(got, s)
	}
	want := []string{`"4" alice deleted`, `"2" root score=20 name="big"`, `"1" root score=10 name="big"`}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("versions (-want +got):\n%s", diff)
	}
	mustProblem(t, f.do(req{path: "/v1/rules/never/versions"}), http.StatusNotFound, probNotFound)

	rb := req{method: "POST", path: "/v1/rules/big/rollback", body: `{"version": 1}`}
	mustProblem(t, f.do(rb), http.StatusPreconditionRequired, probPreconditionReq)
	rb.ifMatch = `"4"`
	rec = f.do(rb)
	mustStatus(t, rec, http.StatusOK)
	if rec.Header().Get("ETag") != `"5"` || decodeBody[map[string]any](t, rec)["score"] != float64(10) {
		t.Errorf("rollback: %v %s", rec.Header(), rec.Body)
	}
	if v, _ := f.b.Version(t.Context(), 5); v.Comment != "rollback of rule big to version 1" {
		t.Errorf("comment %q", v.Comment)
	}
	// Rolling back to the same content publishes nothing.
	rb.ifMatch = `"5"`
	rec = f.do(rb)
	mustStatus(t, rec, http.StatusOK)
	if f.current() != 5 {
		t.Errorf("no-op rollback published %d", f.current())
	}
	// The window did not exist in version 2: rolling it back deletes it.
	rec = f.do(req{method: "POST", path: "/v1/windows/w/rollback?comment=undo", body: `{"version": 2}`, ifMatch: `"5"`})
	mustStatus(t, rec, http.StatusNoContent)
	if rec.Header().Get("ETag") != `"6"` {
		t.Errorf("ETag %q", rec.Header().Get("ETag"))
	}
	mustProblem(t, f.do(req{path: "/v1/windows/w"}), http.StatusNotFound, probNotFound)

	for _, tc := range []struct {
		body   string
		status int
		typ    problemType
	}{
		{`{"version": 99}`, 404, probNotFound},
		{`{"version": 0}`, 400, probBadRequest},
		{`{}`, 400, probBadRequest},
		{`{"version": "1"}`, 400, probMalformedJSON},
		{`{"version": 1, "x": 2}`, 400, probMalformedJSON},
		{`{"version": 1`, 400, probMalformedJSON},
	} {
		mustProblem(t, f.do(req{method: "POST", path: "/v1/rules/big/rollback", body: tc.body, ifMatch: `"6"`}), tc.status, tc.typ)
	}
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules/never/rollback", body: `{"version": 1}`, ifMatch: `"6"`}), 404, probNotFound)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules/big/rollback", body: `version: 1`, ctype: "application/yaml", ifMatch: `"6"`}), 415, probMediaType)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules/big/rollback", body: `{"version": 1}`, ifMatch: `"5"`}), 412, probPrecondition)
}

func jsonString(v any) string {
	b, _ := json.Marshal(v)
	return string(b)
}

func TestRulesetVersions(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	for i := range 4 {
		body := `{"stream":"transactions","action":"review","when":"amount > ` + string(rune('1'+i)) + `"}`
		mustStatus(t, f.do(req{method: "PUT", path: "/v1/rules/big", body: body, ifMatch: etag(f.current())}), 200)
	}
	rec := f.do(req{path: "/v1/ruleset/versions?limit=2", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	page := decodeBody[versionPage](t, rec)
	if len(page.Versions) != 2 || page.Versions[0].Number != 5 || page.Versions[1].Number != 4 || page.NextBefore != 4 {
		t.Fatalf("page 1: %s", rec.Body)
	}
	if strings.Contains(rec.Body.String(), "document") {
		t.Error("the list carries documents")
	}
	rec = f.do(req{path: "/v1/ruleset/versions?limit=2&before=4"})
	page = decodeBody[versionPage](t, rec)
	if len(page.Versions) != 2 || page.Versions[0].Number != 3 || page.NextBefore != 2 {
		t.Fatalf("page 2: %s", rec.Body)
	}
	rec = f.do(req{path: "/v1/ruleset/versions?before=2"})
	page = decodeBody[versionPage](t, rec)
	if len(page.Versions) != 1 || page.Versions[0].Number != 1 || page.NextBefore != 0 || strings.Contains(rec.Body.String(), "next_before") {
		t.Fatalf("last page: %s", rec.Body)
	}
	for _, q := range []string{"limit=0", "limit=101", "limit=x", "before=-1"} {
		mustProblem(t, f.do(req{path: "/v1/ruleset/versions?" + q}), http.StatusBadRequest, probBadRequest)
	}

	rec = f.do(req{path: "/v1/ruleset/versions/1"})
	mustStatus(t, rec, http.StatusOK)
	v := decodeBody[map[string]any](t, rec)
	if v["version"] != float64(1) || v["document"] == nil {
		t.Errorf("version 1: %s", rec.Body)
	}
	rec = f.do(req{path: "/v1/ruleset/versions/1", header: map[string]string{"Accept": "text/yaml"}})
	if rec.Body.String() != baseDoc {
		t.Errorf("YAML of version 1: %q", rec.Body)
	}
	mustProblem(t, f.do(req{path: "/v1/ruleset/versions/9"}), http.StatusNotFound, probNotFound)
	mustProblem(t, f.do(req{path: "/v1/ruleset/versions/x"}), http.StatusBadRequest, probBadRequest)
	mustProblem(t, f.do(req{path: "/v1/ruleset/versions/0"}), http.StatusBadRequest, probBadRequest)
}

func TestAudit(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc) // v1
	mustStatus(t, f.do(req{method: "PUT", path: "/v1/rules/big?comment=quieter", token: tokAnalyst,
		body: `{"stream":"transactions","action":"review","score":10,"mode":"shadow","when":"amount > 100"}`, ifMatch: `"1"`}), 200) // v2
	mustStatus(t, f.do(req{method: "POST", path: "/v1/rules", body: `{"name":"r2","stream":"transactions","action":"block","when":"amount > 5000"}`, ifMatch: `"2"`}), 201) // v3
	mustStatus(t, f.do(req{method: "DELETE", path: "/v1/rules/big", ifMatch: `"3"`}), 204)                                                                                  // v4

	rec := f.do(req{path: "/v1/audit?limit=3", token: tokReader})
	mustStatus(t, rec, http.StatusOK)
	var page struct {
		Entries []struct {
			Version  int64
			Author   string
			Comment  string
			Previous int64
			Changes  []rulesdoc.Change
		}
		NextBefore int64 `json:"next_before"`
	}
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 3 || page.NextBefore != 2 {
		t.Fatalf("page: %s", rec.Body)
	}
	type change struct{ Version, Kind, Name, Op, Fields string }
	var got []change
	for _, e := range page.Entries {
		if e.Previous != e.Version-1 {
			t.Errorf("version %d previous %d", e.Version, e.Previous)
		}
		for _, c := range e.Changes {
			var fields []string
			for name, fc := range c.Fields {
				fields = append(fields, name+":"+string(fc.From)+"->"+string(fc.To))
			}
			slices.Sort(fields)
			got = append(got, change{etag(e.Version) + " " + e.Author + " " + e.Comment, c.Kind, c.Name, c.Op, strings.Join(fields, ",")})
		}
	}
	want := []change{
		{`"4" root `, "rules", "big", "removed", ""},
		{`"3" root `, "rules", "r2", "added", ""},
		{`"2" alice quieter`, "rules", "big", "changed", `mode:->"shadow"`},
	}
	if diff := cmp.Diff(want, got); diff != "" {
		t.Errorf("audit (-want +got):\n%s", diff)
	}
	if !strings.Contains(rec.Body.String(), `"item":{"action":"block","stream":"transactions","when":"amount > 5000"}`) {
		t.Errorf("added item content missing: %s", rec.Body)
	}

	rec = f.do(req{path: "/v1/audit?before=2"})
	mustStatus(t, rec, http.StatusOK)
	if err := json.Unmarshal(rec.Body.Bytes(), &page); err != nil {
		t.Fatal(err)
	}
	if len(page.Entries) != 1 || page.Entries[0].Version != 1 || page.Entries[0].Previous != 0 || len(page.Entries[0].Changes) != 3 {
		t.Errorf("first version: %s", rec.Body)
	}
	mustProblem(t, f.do(req{path: "/v1/audit", token: tokDecider}), http.StatusForbidden, probForbidden)
	mustProblem(t, f.do(req{path: "/v1/audit?limit=-1"}), http.StatusBadRequest, probBadRequest)

	f.b.mu.Lock()
	f.b.mu.failVersions = os.ErrDeadlineExceeded
	f.b.mu.Unlock()
	mustProblem(t, f.do(req{path: "/v1/audit"}), http.StatusInternalServerError, probInternal)
}

func TestBacktest(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	last := func() (string, string, int) {
		f.b.mu.Lock()
		defer f.b.mu.Unlock()
		return string(f.b.mu.backtest.candidate), string(f.b.mu.backtest.events), f.b.mu.backtest.limit
	}

	// A YAML string candidate with NDJSON events.
	body, _ := json.Marshal(map[string]any{"ruleset": baseDoc, "events": "{\"stream\":\"transactions\",\"value\":{}}\n{\"watermark\":6}\n", "limit": 5})
	rec := f.do(req{method: "POST", path: "/v1/rules:backtest", token: tokAnalyst, body: string(body)})
	mustStatus(t, rec, http.StatusOK)
	if r := decodeBody[service.BacktestReport](t, rec); r.Events != 2 {
		t.Errorf("report %s", rec.Body)
	}
	if cand, ev, limit := last(); cand != baseDoc || !strings.HasPrefix(ev, `{"stream"`) || limit != 5 {
		t.Errorf("backend got %q %q %d", cand, ev, limit)
	}

	// An object candidate, events as an array, default limit.
	rec = f.do(req{method: "POST", path: "/v1/rules:backtest", body: `{"ruleset": {"streams": {"t": {"key": "k"}}}, "events": [{"stream": "t", "value": {"k": 1}}, {"watermark": 9}]}`})
	mustStatus(t, rec, http.StatusOK)
	if cand, ev, limit := last(); cand != `{"streams": {"t": {"key": "k"}}}` || ev != "{\"stream\":\"t\",\"value\":{\"k\":1}}\n{\"watermark\":9}\n" || limit != 20 {
		t.Errorf("backend got %q %q %d", cand, ev, limit)
	}

	// One candidate rule merged into the current document; no events.
	rec = f.do(req{method: "POST", path: "/v1/rules:backtest", body: `{"rule": {"name": "tiny", "stream": "transactions", "action": "block", "when": "amount < 1"}}`})
	mustStatus(t, rec, http.StatusOK)
	cand, ev, _ := last()
	doc, err := rulesdoc.Parse([]byte(cand))
	if err != nil || ev != "" {
		t.Fatalf("candidate %q events %q: %v", cand, ev, err)
	}
	if _, ok := doc.Item("rules", "big"); !ok {
		t.Error("the current rules are not in the candidate")
	}
	if r, ok := doc.Item("rules", "tiny"); !ok || r["when"] != "amount < 1" || r["name"] != nil {
		t.Errorf("candidate rule %v", r)
	}
	if f.current() != 1 {
		t.Error("a backtest published")
	}

	calls := func() int {
		f.b.mu.Lock()
		defer f.b.mu.Unlock()
		return f.b.mu.backtest.calls
	}
	before := calls()
	p := mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:backtest", body: `{"rule": {"name": "bad", "stream": "transactions", "action": "block", "when": "amount <"}}`}), 422, probInvalidRuleset)
	if len(p.Errors) != 1 || p.Errors[0].Path != "rules.bad.when" {
		t.Errorf("errors %+v", p.Errors)
	}
	for _, tc := range []struct {
		body   string
		detail string
	}{
		{`{}`, `name a candidate: {"ruleset": …} or {"rule": {"name": …, …}}`},
		{`{"ruleset": "streams: {}", "rule": {"name": "x"}}`, "name one candidate: a ruleset or one item, not both"},
		{`{"rule": {"name": "x"}, "window": {"name": "y"}}`, "name one candidate item, or a whole ruleset"},
		{`{"rules": {}}`, `unknown field "rules" (known: ruleset, events, limit, before, stream, window, rule, pattern, join, enrichment)`},
		{`{"ruleset": 3}`, "ruleset must be a document object or a YAML string"},
		{`{"ruleset": "x", "limit": 1001}`, "limit must be an integer in [0, 1000]"},
		{`{"ruleset": "x", "events": 3}`, "events must be an NDJSON string or an array of replay records"},
		{`{"rule": {"stream": "transactions"}}`, `the rule needs a name: "name" in the body`},
		{`[]`, "the body must be an object"},
	} {
		p := mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:backtest", body: tc.body}), 400, probBadRequest)
		if p.Detail != tc.detail {
			t.Errorf("%s: detail %q, want %q", tc.body, p.Detail, tc.detail)
		}
	}
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:backtest", body: `{"ruleset": `}), 400, probMalformedJSON)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:backtest", body: `ruleset: x`, ctype: "application/yaml"}), 415, probMediaType)
	mustProblem(t, f.do(req{method: "POST", path: "/v1/rules:backtest", body: `{"rule": {}}`, token: tokReader}), 403, probForbidden)
	if calls() != before {
		t.Error("refused backtests reached the backend")
	}

	// Backtests have their own, larger body limit.
	g := newFixture(t, func(o *Options) { o.MaxBodyBytes, o.MaxBacktestBytes = 10, 200 })
	mustStatus(t, g.do(req{method: "POST", path: "/v1/rules:backtest", body: `{"ruleset": {"streams": {"t": {"key": "k"}}}}`}), 200)
	mustProblem(t, g.do(req{method: "POST", path: "/v1/rules:backtest", body: `{"ruleset": "` + strings.Repeat("#", 300) + `"}`}), 413, probTooLarge)
}
