package api

import (
	_ "embed"
	"net/http"
	"strconv"
)

// openAPIDocument describes every route (OpenAPI 3.0). TestOpenAPISync
// holds it to the router: same routes, same permissions.
//
//go:embed openapi.json
var openAPIDocument []byte

func (h *Handler) openAPI(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", strconv.Itoa(len(openAPIDocument)))
	w.WriteHeader(http.StatusOK)
	_, _ = w.Write(openAPIDocument)
}
