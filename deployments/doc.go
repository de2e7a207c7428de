// Package deployments holds no code: it is the Go module of Vigil's
// deployment artifacts (the container image, the compose stack, the
// Kubernetes manifests) and of the tests that prove them valid where no
// Docker engine or cluster runs. Its heavy test-only dependencies (the
// Kubernetes API types, the compose loader, the Dockerfile and PromQL
// parsers) stay out of the main module, which it reaches through a replace
// directive.
//
//	cd deployments && go test ./...
//
// The tests build vigil with ../scripts/build, the same command the
// Dockerfile runs, and check every artifact against it: the flags and
// VIGIL_* variables they use against `vigil serve --help` and a run of the
// binary, the dashboard's metrics against /metrics of a running instance.
package deployments
