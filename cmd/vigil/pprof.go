package main

import (
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"time"
)

// startPprof serves Go's profiling endpoints (net/http/pprof) on addr, for
// looking into a running service: CPU and heap profiles, and the execution
// trace that lays the collector's phases beside the requests'
// (docs/performance.md shows how). They expose the process's internals and
// can keep it busy, so they listen on a loopback address only, apart from
// the API. It returns the address bound (addr with port 0 included).
func startPprof(addr string) (bound string, stop func(), err error) {
	if !loopbackListen(addr) {
		return "", nil, fmt.Errorf("--pprof %s: the profiling endpoints listen on a loopback address (host:port) only", addr)
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return "", nil, fmt.Errorf("--pprof: %w", err)
	}
	mux := http.NewServeMux()
	mux.HandleFunc("/debug/pprof/", pprof.Index) // heap, goroutine, allocs, block, mutex
	mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
	mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
	mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
	mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go srv.Serve(ln)
	return ln.Addr().String(), func() { srv.Close() }, nil
}
