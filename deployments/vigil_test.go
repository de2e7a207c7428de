package deployments

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/vigil-cep/vigil/api"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// repoRoot is the main module, where the tests of this module run from
// deployments/.
const repoRoot = ".."

var binDir string

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "vigil-deployments")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = dir
	code := m.Run()
	os.RemoveAll(dir)
	os.Exit(code)
}

var (
	buildOnce sync.Once
	buildErr  error
)

// vigilBinary builds vigil with ../scripts/build, the build command of the
// README and the Dockerfile, once per test run.
func vigilBinary(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(binDir, "vigil")
	buildOnce.Do(func() {
		out, err := exec.Command(filepath.Join(repoRoot, "scripts", "build"), bin).CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("scripts/build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return bin
}

// vigilCmd is vigil with args and an environment holding only PATH, HOME
// and env: the caller's VIGIL_* variables must not leak into a check.
func vigilCmd(t *testing.T, env []string, args ...string) *exec.Cmd {
	cmd := exec.Command(vigilBinary(t), args...)
	cmd.Env = append([]string{"PATH=" + os.Getenv("PATH"), "HOME=" + os.Getenv("HOME")}, env...)
	return cmd
}

var flagLine = regexp.MustCompile(`^  -([a-z0-9][a-z0-9-]*)`)

// commandFlags returns the flag names `vigil COMMAND --help` lists: what the
// binary actually accepts, so that a renamed flag breaks the artifacts that
// use the old name.
func commandFlags(t *testing.T, command string) map[string]bool {
	t.Helper()
	var stderr bytes.Buffer
	cmd := vigilCmd(t, nil, command, "--help")
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("vigil %s --help: %v\n%s", command, err, stderr.String())
	}
	flags := map[string]bool{}
	for _, line := range strings.Split(stderr.String(), "\n") {
		if m := flagLine.FindStringSubmatch(line); m != nil {
			flags[m[1]] = true
		}
	}
	if len(flags) < 3 {
		t.Fatalf("found %d flags in vigil %s --help: has its format changed?\n%s", len(flags), command, stderr.String())
	}
	return flags
}

func serveFlags(t *testing.T) map[string]bool {
	flags := commandFlags(t, "serve")
	for _, f := range []string{"brokers", "http", "config", "instance-id", "checkpoints"} {
		if !flags[f] {
			t.Fatalf("vigil serve --help lacks --%s, which these tests rely on", f)
		}
	}
	return flags
}

// envName is the variable of a flag, as cmd/vigil/config.go defines it and
// deployments/CONFIG.md documents it: VIGIL_ and the name upper-cased with
// '-' → '_'; --api-keys (a file) is VIGIL_API_KEYS_FILE since VIGIL_API_KEYS
// holds the keys themselves. checkServeAccepts double-checks it on the binary.
func envName(flag string) string {
	env := "VIGIL_" + strings.ToUpper(strings.ReplaceAll(flag, "-", "_"))
	if env == api.KeysEnv {
		env += "_FILE"
	}
	return env
}

// serveEnv returns every VIGIL_* variable vigil serve reads.
func serveEnv(flags map[string]bool) map[string]bool {
	env := map[string]bool{api.KeysEnv: true, "VIGIL_PEER_SECRET": true} // the keys, the peer secret themselves
	for f := range flags {
		env[envName(f)] = true
	}
	for _, p := range kconf.Known() { // Kafka client properties (kafka/kconf)
		env[kconf.EnvName(p)] = true
	}
	return env
}

// flagNames returns the names of the --flags in args ("--a=b" gives "a").
// Single-dash flags count too: Go's flag package takes both.
func flagNames(args []string) []string {
	var names []string
	for _, a := range args {
		if a == "--" {
			break
		}
		if strings.HasPrefix(a, "-") && len(a) > 1 {
			name, _, _ := strings.Cut(strings.TrimLeft(a, "-"), "=")
			names = append(names, name)
		}
	}
	return names
}

// checkFlagsAndEnv requires every flag of args and every VIGIL_* variable of
// env to be one vigil serve reads.
func checkFlagsAndEnv(t *testing.T, where string, args []string, env map[string]string) {
	t.Helper()
	flags := serveFlags(t)
	for _, f := range flagNames(args) {
		if !flags[f] {
			t.Errorf("%s: vigil serve has no flag --%s", where, f)
		}
	}
	known := serveEnv(flags)
	for name := range env {
		if strings.HasPrefix(name, "VIGIL_") && !known[name] {
			t.Errorf("%s: vigil serve reads no variable %s", where, name)
		}
	}
}

// sentinel is a log level no vigil accepts: checkServeAccepts appends it to
// stop vigil serve right after it has read its flags, environment and config
// file, before it starts anything.
const sentinel = "deployments-test-sentinel"

// checkServeAccepts runs vigil serve with args and env as a deployment gives
// them and requires that it read them all without complaint: no unknown flag,
// no value a flag cannot parse, no unknown key in the config file, no
// VIGIL_* variable that no flag reads. It then stops on the sentinel log
// level.
func checkServeAccepts(t *testing.T, where string, args []string, env map[string]string) {
	t.Helper()
	var envList []string
	for k, v := range env {
		envList = append(envList, k+"="+v)
	}
	slices.Sort(envList)
	var stderr bytes.Buffer
	cmd := vigilCmd(t, envList, append(append([]string{"serve"}, args...), "--log-level", sentinel)...)
	cmd.Stderr = &stderr
	err := cmd.Run()
	code := cmd.ProcessState.ExitCode()
	if err == nil || code != 1 || !strings.Contains(stderr.String(), sentinel) || strings.Contains(stderr.String(), "warning") {
		t.Errorf("%s: vigil serve %s\nwith %s\ndid not accept its flags and environment: exit %d\n%s",
			where, strings.Join(args, " "), strings.Join(envList, " "), code, stderr.String())
	}
}

// instance is a running vigil serve.
type instance struct {
	broker string // the embedded broker's address
	api    string // http://host:port
	stderr *lockedBuffer
}

// startVigil starts vigil serve on the embedded broker, on free loopback
// ports, and waits for its "vigil serving ..." line. It is killed at cleanup.
func startVigil(t *testing.T, args ...string) *instance {
	t.Helper()
	args = append([]string{"serve", "--kafka-listen", "127.0.0.1:0", "--http", "127.0.0.1:0",
		"--data-dir", filepath.Join(t.TempDir(), "data")}, args...)
	cmd := vigilCmd(t, nil, args...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	in := &instance{stderr: new(lockedBuffer)}
	cmd.Stderr = in.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		cmd.Process.Kill()
		cmd.Wait()
	})
	// vigil serving ruleset V on ADDR (decisions: T, api: http://HOST:PORT)
	serving := regexp.MustCompile(`^vigil serving ruleset \S+ on (\S+) \(decisions: \S+, api: (http://\S+)\)$`)
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	defer func() {
		go func() { // until the process ends
			for range lines {
			}
		}()
	}()
	timeout := time.After(60 * time.Second)
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("vigil serve exited before serving; stderr:\n%s", in.stderr)
			}
			if m := serving.FindStringSubmatch(line); m != nil {
				in.broker, in.api = m[1], m[2]
				return in
			}
		case <-timeout:
			t.Fatalf("vigil serve: not serving within 60s; stderr:\n%s", in.stderr)
		}
	}
}

// get fetches path from the instance's API.
func (in *instance) get(ctx context.Context, path string) (int, string, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, in.api+path, nil)
	if err != nil {
		return 0, "", err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, "", err
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b), err
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func readFile(t *testing.T, path string) []byte {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// validateRuleset runs `vigil validate` on a ruleset document.
func validateRuleset(t *testing.T, where, src string) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "rules.yaml")
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	if out, err := vigilCmd(t, nil, "validate", path).CombinedOutput(); err != nil {
		t.Errorf("%s: vigil validate: %v\n%s", where, err, out)
	}
}

// checkAPIKeys checks a VIGIL_API_KEYS value as vigil reads it.
func checkAPIKeys(t *testing.T, where, list string) {
	t.Helper()
	keys, err := api.ParseKeyList(list)
	if err != nil || len(keys) == 0 {
		t.Errorf("%s: VIGIL_API_KEYS: %d keys, %v", where, len(keys), err)
	}
	for _, k := range keys {
		if !k.Role.Valid() || len(k.Token) < api.MinTokenBytes || k.Name == "" {
			t.Errorf("%s: API key %q: role %q, token of %d bytes (want a valid role and at least %d bytes)",
				where, k.Name, k.Role, len(k.Token), api.MinTokenBytes)
		}
	}
}

// TestConfigDocListsEveryFlag: CONFIG.md, the one reference of the
// configuration, has a row for every flag vigil serve accepts, with its
// variable. (cmd/vigil's TestConfigDoc compares it whole and regenerates it.)
func TestConfigDocListsEveryFlag(t *testing.T) {
	doc := string(readFile(t, "CONFIG.md"))
	for f := range serveFlags(t) {
		if !strings.Contains(doc, "| `--"+f+"`") || !strings.Contains(doc, "`"+envName(f)+"`") {
			t.Errorf("CONFIG.md has no row for --%s (%s); regenerate it: go test ./cmd/vigil -run TestConfigDoc -update-config-doc", f, envName(f))
		}
	}
}
