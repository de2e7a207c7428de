package api

import (
	"net/http"
	"testing"
)

// What the external tests (package api_test, which may import the root
// package vigil and the engine: package api may not) use of the document
// check.

// ValidateJSON checks a JSON value against a component schema of
// openapi.json.
func ValidateJSON(t testing.TB, schema string, data []byte) error {
	return mustOpenAPI(t).validateJSON(schema, data)
}

// OpenAPIChecked wraps h so that every exchange it serves is checked
// against openapi.json (openAPIChecked).
func OpenAPIChecked(t testing.TB, h http.Handler) http.Handler {
	return openAPIChecked(t, h.(*Handler))
}

// RecentIDs decodes GET /v1/decisions and returns the ids, in order.
var RecentIDs = recentIDs
