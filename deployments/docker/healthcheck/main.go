// Command healthcheck is the HEALTHCHECK of Vigil's container image. The
// runtime image is distroless (no shell, no curl), so this small static
// binary asks Vigil's /healthz and reports through its exit status: 0 for a
// 2xx answer within the timeout, 1 otherwise (what Docker expects).
//
//	healthcheck [--timeout 2s] [URL]
//
// Without URL it asks http://127.0.0.1:8080/healthz (the image's default
// --http 0.0.0.0:8080), or the port of VIGIL_HTTP when that is set, so that
// moving the API to another port through the environment moves the check
// with it. A port moved with --http needs the URL argument.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"time"
)

func main() {
	os.Exit(run(os.Args[1:], os.Getenv("VIGIL_HTTP"), os.Stderr))
}

func run(args []string, vigilHTTP string, stderr io.Writer) int {
	fs := flag.NewFlagSet("healthcheck", flag.ContinueOnError)
	fs.SetOutput(stderr)
	timeout := fs.Duration("timeout", 2*time.Second, "give up after this long")
	if err := fs.Parse(args); err != nil || fs.NArg() > 1 {
		fmt.Fprintln(stderr, "usage: healthcheck [--timeout D] [URL]")
		return 2
	}
	url := fs.Arg(0)
	if url == "" {
		url = defaultURL(vigilHTTP)
	}
	if err := check(url, *timeout); err != nil {
		fmt.Fprintf(stderr, "healthcheck: %v\n", err)
		return 1
	}
	return 0
}

// defaultURL is /healthz on the loopback address at the port of addr
// (VIGIL_HTTP, host:port), or 8080.
func defaultURL(addr string) string {
	port := "8080"
	if _, p, err := net.SplitHostPort(addr); err == nil && p != "" {
		port = p
	}
	return "http://" + net.JoinHostPort("127.0.0.1", port) + "/healthz"
}

func check(url string, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	io.Copy(io.Discard, io.LimitReader(resp.Body, 1<<16))
	if resp.StatusCode/100 != 2 {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	return nil
}
