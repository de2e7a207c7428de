package asyncio

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"
)

func TestHTTPLookup(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		switch r.URL.Query().Get("id") {
		case "big":
			fmt.Fprintf(w, `{"pad": %q}`, strings.Repeat("x", 200))
		case "array":
			fmt.Fprint(w, `[1]`)
		case "err":
			http.Error(w, "boom", http.StatusInternalServerError)
		default:
			// Echo what the lookup sent: method, escaped path and query, body.
			fmt.Fprintf(w, `{"method": %q, "uri": %q, "body": %q}`, r.Method, r.RequestURI, body)
		}
	}))
	t.Cleanup(srv.Close)
	cases := []struct {
		method, key string
		want        map[string]any
		err         string
		permanent   bool
	}{
		{method: "GET", key: "a b/c&d", want: map[string]any{"method": "GET", "uri": "/u/a%20b%2Fc%26d?id=a%20b%2Fc%26d", "body": ""}},
		{method: "POST", key: "u1", want: map[string]any{"method": "POST", "uri": "/u/u1?id=u1", "body": `{"key":"u1"}`}},
		{method: "GET", key: "big", err: `http lookup "big": response body over 128 bytes`, permanent: true},
		{method: "GET", key: "array", err: `http lookup "array": response is not a JSON object`, permanent: true},
		{method: "GET", key: "err", err: `http lookup "err": status 500 Internal Server Error`},
	}
	for _, tc := range cases {
		h := NewHTTP(srv.Client(), tc.method, srv.URL+"/u/{key}?id={key}", 128)
		got, err := h.Get(context.Background(), tc.key)
		if tc.err != "" {
			if err == nil || err.Error() != tc.err || errors.As(err, new(*PermanentError)) != tc.permanent {
				t.Errorf("%s %q: error %v, want %q (permanent %v)", tc.method, tc.key, err, tc.err, tc.permanent)
			}
			continue
		}
		if err != nil {
			t.Fatalf("%s %q: %v", tc.method, tc.key, err)
		}
		if diff := cmp.Diff(tc.want, got); diff != "" {
			t.Errorf("%s %q (-want +got):\n%s", tc.method, tc.key, diff)
		}
	}
}
