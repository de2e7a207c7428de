package api

import "net/http"

// identity is GET /v1/me: the caller's key, never its token.
type identity struct {
	Name        string   `json:"name"`
	Role        Role     `json:"role"`
	Permissions []string `json:"permissions"` // what the role grants, in the order of the roles matrix
}

// me answers who the caller is and what its key may do, so that a client
// (the console) can check a key at sign-in and offer only what its role
// allows. It is a convenience: every route still enforces its permission.
func (h *Handler) me(w http.ResponseWriter, r *http.Request) {
	k := caller(r.Context())
	out := identity{Name: k.Name, Role: k.Role, Permissions: []string{}}
	for _, p := range permissions {
		if k.Role.grants(p) {
			out.Permissions = append(out.Permissions, string(p))
		}
	}
	writeJSON(w, http.StatusOK, out)
}
