package asyncio

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
)

// HTTP is a Lookup that asks an HTTP service per key. The response must be a
// 2xx JSON object of at most maxBody bytes. Transport errors, 5xx and 429 are
// retried by the Operator; other statuses, bodies that are too large or not a
// JSON object are permanent errors. Safe for concurrent use.
type HTTP struct {
	client  *http.Client
	method  string
	tmpl    string
	maxBody int64
}

// NewHTTP returns an HTTP lookup. urlTemplate's "{key}" is replaced by the key,
// URL-escaped so that it is safe in a path segment and in a query value. For
// POST the body is the JSON object {"key": key}. Requests carry the operator's
// deadline through their context, so client needs no Timeout of its own; nil
// means http.DefaultClient.
func NewHTTP(client *http.Client, method, urlTemplate string, maxBody int64) *HTTP {
	if client == nil {
		client = http.DefaultClient
	}
	return &HTTP{client: client, method: method, tmpl: urlTemplate, maxBody: maxBody}
}

// Get sends one request for key and decodes the response.
func (h *HTTP) Get(ctx context.Context, key string) (map[string]any, error) {
	u := strings.ReplaceAll(h.tmpl, "{key}", strings.ReplaceAll(url.QueryEscape(key), "+", "%20"))
	var body io.Reader
	if h.method == http.MethodPost {
		b, err := json.Marshal(map[string]string{"key": key})
		if err != nil {
			return nil, Permanent(fmt.Errorf("http lookup %q: %w", key, err))
		}
		body = bytes.NewReader(b)
	}
	req, err := http.NewRequestWithContext(ctx, h.method, u, body)
	if err != nil {
		return nil, Permanent(fmt.Errorf("http lookup %q: %w", key, err))
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	resp, err := h.client.Do(req)
	if err != nil {
		return nil, fmt.Errorf("http lookup %q: %w", key, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(io.LimitReader(resp.Body, h.maxBody+1))
	if err != nil {
		return nil, fmt.Errorf("http lookup %q: read body: %w", key, err)
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		err := fmt.Errorf("http lookup %q: status %s", key, resp.Status)
		if resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests {
			return nil, err
		}
		return nil, Permanent(err)
	}
	if int64(len(b)) > h.maxBody {
		return nil, Permanent(fmt.Errorf("http lookup %q: response body over %d bytes", key, h.maxBody))
	}
	var m map[string]any
	if err := json.Unmarshal(b, &m); err != nil || m == nil {
		return nil, Permanent(fmt.Errorf("http lookup %q: response is not a JSON object", key))
	}
	return m, nil
}
