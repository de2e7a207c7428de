package api

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
)

// awkwardNames are keys, ids and item names that a path parameter must
// carry exactly: a '%' that looks like an escape once decoded, an encoded
// '/', an escaped escape, spaces, non-ASCII, and characters that stay
// unescaped in a path.
var awkwardNames = []string{"pct%41", "a/b", "a%2Fb", "with space", "üser 名前", "plus+sign:@", "%", "50%"}

// TestPathParamsDecodedOnce sends every path parameter through a real HTTP
// client and server, escaped once as url.PathEscape does, and checks that
// every route receives it decoded exactly once.
func TestPathParamsDecodedOnce(t *testing.T) {
	f := newFixture(t)
	f.publish(baseDoc)
	srv := httptest.NewServer(f.srv)
	defer srv.Close()
	do := func(method, path, body string, hdr ...string) (int, string, http.Header) {
		t.Helper()
		hr, err := http.NewRequest(method, srv.URL+path, strings.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		hr.Header.Set("Authorization", "Bearer "+tokAdmin)
		if body != "" {
			hr.Header.Set("Content-Type", "application/json")
		}
		for i := 0; i+1 < len(hdr); i += 2 {
			hr.Header.Set(hdr[i], hdr[i+1])
		}
		resp, err := srv.Client().Do(hr)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		return resp.StatusCode, string(b), resp.Header
	}

	for _, name := range awkwardNames {
		esc := url.PathEscape(name)
		t.Run(esc, func(t *testing.T) {
			// Entities.
			do("GET", "/v1/entities/"+esc, "")
			f.b.mu.Lock()
			got := f.b.mu.entityKey
			f.b.mu.Unlock()
			if got != name {
				t.Errorf("GET /v1/entities/%s looked up %q, want %q", esc, got, name)
			}

			// Decisions by id.
			ev, _ := json.Marshal(map[string]any{"tx_id": name, "amount": 5})
			if code, body, _ := do("POST", "/v1/decisions?stream=transactions", string(ev)); code != 200 {
				t.Fatalf("decide: %d %s", code, body)
			}
			if code, body, _ := do("GET", "/v1/decisions/"+esc, ""); code != 200 || !strings.Contains(body, fmt.Sprintf(`"id":%q`, name)) {
				t.Errorf("GET /v1/decisions/%s: %d %s", esc, code, body)
			}

			// Items by name. Rule names are letters, digits, '_' and '-'
			// (rules.Load), so these are refused or not found: the problem
			// quotes the name each handler received.
			q := fmt.Sprintf("%q", name)
			for _, c := range []struct {
				method, path, body string
				want               int
			}{
				{"GET", "/v1/rules/" + esc, "", 404},
				{"GET", "/v1/rules/" + esc + "/versions", "", 404},
				{"DELETE", "/v1/rules/" + esc, "", 404},
				{"POST", "/v1/rules/" + esc + "/rollback", `{"version":1}`, 404},
				{"PUT", "/v1/rules/" + esc, `{"stream":"transactions","action":"block","when":"amount > 2"}`, 422},
			} {
				code, body, _ := do(c.method, c.path, c.body, "If-Match", "*")
				p := decodeProblem(t, body)
				detail := p.Detail
				for _, e := range p.Errors {
					detail += " " + e.Message
				}
				if code != c.want || !strings.Contains(detail, q) {
					t.Errorf("%s %s: %d %s; want %d naming %s", c.method, c.path, code, body, c.want, q)
				}
			}
			if code, _, hdr := do("POST", "/v1/entities/"+esc, "{}"); code != 405 || hdr.Get("Allow") != "GET" {
				t.Errorf("POST /v1/entities/%s: %d, Allow %q; want 405, GET", esc, code, hdr.Get("Allow"))
			}
		})
	}
	// A version number is a path parameter too: "%31" is "1".
	if code, body, _ := do("GET", "/v1/ruleset/versions/%31", ""); code != 200 || !strings.Contains(body, `"version":1`) {
		t.Errorf("GET /v1/ruleset/versions/%%31: %d %s", code, body)
	}
}

func decodeProblem(t *testing.T, body string) problem {
	t.Helper()
	var p problem
	if err := json.Unmarshal([]byte(body), &p); err != nil {
		t.Fatalf("problem %s: %v", body, err)
	}
	return p
}
