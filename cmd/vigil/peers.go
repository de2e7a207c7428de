package main

import (
	"bytes"
	"fmt"
	"net"
	"os"

	"github.com/vigil-cep/vigil/api"
)

// peerSecretEnv holds the group's peer secret itself (as api.KeysEnv holds
// the keys); --peer-secret-file names a file holding it.
const peerSecretEnv = "VIGIL_PEER_SECRET"

// peerSecret reads the secret the instances of a group sign forwarded
// requests with (docs/design.md "Request routing"): from the file, or from
// VIGIL_PEER_SECRET, or none.
func peerSecret(file string) ([]byte, error) {
	var secret []byte
	switch {
	case file != "":
		b, err := os.ReadFile(file)
		if err != nil {
			return nil, fmt.Errorf("--peer-secret-file: %w", err)
		}
		secret = bytes.TrimSpace(b)
	case os.Getenv(peerSecretEnv) != "":
		secret = []byte(os.Getenv(peerSecretEnv))
	default:
		return nil, nil
	}
	if len(secret) < api.MinPeerSecretBytes {
		return nil, fmt.Errorf("the peer secret has %d bytes, fewer than %d (e.g. openssl rand -hex 32)", len(secret), api.MinPeerSecretBytes)
	}
	return secret, nil
}

// advertiseAddr is the address peers reach this instance's API at: flag
// when given, else the address the API listens on unless it is a wildcard
// (0.0.0.0, ::), which names no host a peer could dial: then "".
func advertiseAddr(flag string, listening net.Addr) (string, error) {
	if flag != "" {
		if _, _, err := net.SplitHostPort(flag); err != nil {
			return "", fmt.Errorf("--advertise-http %q: want host:port: %w", flag, err)
		}
		return flag, nil
	}
	host, _, err := net.SplitHostPort(listening.String())
	if err != nil {
		return "", err
	}
	if wildcardHost(host) {
		return "", nil
	}
	return listening.String(), nil
}
