package api

import (
	"net/http"
	"net/url"
	"testing"
)

// FuzzQuery: query reads a parameter as r.URL.Query().Get does, escapes,
// repeated keys, semicolons and malformed pairs included.
func FuzzQuery(f *testing.F) {
	for _, q := range []string{
		"", "stream=tx", "stream=a&stream=b", "a=1&stream=t%78", "str%65am=x", "stream", "stream=",
		"stream=a;b&stream=c", "stream=%zz&stream=ok", "%zz=1&stream=2", "stream=a+b", "s+t=1", "&&stream=x&",
		"stream=%E2%82%AC",
	} {
		f.Add(q, "stream")
	}
	f.Add("s%20t=1", "s t")
	f.Fuzz(func(t *testing.T, raw, name string) {
		if name == "" {
			return
		}
		r := &http.Request{URL: &url.URL{RawQuery: raw}}
		if got, want := query(r, name), r.URL.Query().Get(name); got != want {
			t.Errorf("query(%q, %q) = %q, url.Values.Get gives %q", raw, name, got, want)
		}
	})
}
