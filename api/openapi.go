package api

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDocument describes every route and payload (OpenAPI 3.0.3),
// written by hand. TestOpenAPISync holds it to the router (same routes,
// same permissions), TestOpenAPIGoTypes to the Go types, and every API
// test's exchanges are validated against it (see the package
// documentation).
//
//go:embed openapi.json
var openAPIDocument []byte

func (h *Handler) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
