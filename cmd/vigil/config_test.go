package main

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
)

var updateConfigDoc = flag.Bool("update-config-doc", false, "rewrite deployments/CONFIG.md from `vigil serve --help`")

// configDocPath is the one place that documents the configuration of vigil serve.
const configDocPath = "../../deployments/CONFIG.md"

// testFlags is a flag set shaped like serve's: one flag of each kind.
type testFlags struct {
	fs       *flag.FlagSet
	out      *bytes.Buffer
	brokers  *string
	interval *time.Duration
	keep     *int
	verbose  *bool
	apiKeys  *string
}

func newTestFlags() *testFlags {
	f := &testFlags{fs: flag.NewFlagSet("serve", flag.ContinueOnError), out: new(bytes.Buffer)}
	f.fs.SetOutput(f.out)
	f.brokers = f.fs.String("brokers", "", "brokers")
	f.interval = f.fs.Duration("checkpoint-interval", 10*time.Second, "interval")
	f.keep = f.fs.Int("checkpoint-keep", 3, "keep")
	f.verbose = f.fs.Bool("verbose", false, "verbose")
	f.apiKeys = f.fs.String("api-keys", "", "keys file")
	f.fs.String(configFlag, "", "config file")
	return f
}

func writeConfig(t *testing.T, name, src string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestConfigEnvName(t *testing.T) {
	for name, want := range map[string]string{
		"brokers":             "VIGIL_BROKERS",
		"checkpoint-interval": "VIGIL_CHECKPOINT_INTERVAL",
		"config":              "VIGIL_CONFIG",
		"api-keys":            "VIGIL_API_KEYS_FILE", // VIGIL_API_KEYS holds the keys themselves
	} {
		if got := envName(name); got != want {
			t.Errorf("envName(%q) = %q, want %q", name, got, want)
		}
	}
}

// TestConfigPrecedence: command line > environment > config file > default,
// flag by flag.
func TestConfigPrecedence(t *testing.T) {
	yamlFile := writeConfig(t, "vigil.yaml", `
# every kind of value
brokers: "file:9092"
checkpoint-interval: 30s
checkpoint-keep: 7
verbose: true
api-keys: /etc/vigil/keys.yaml
`)
	jsonFile := writeConfig(t, "vigil.json", `{"brokers": "json:9092", "checkpoint-keep": 9, "verbose": false}`)
	type want struct {
		brokers  string
		interval time.Duration
		keep     int
		verbose  bool
		apiKeys  string
	}
	tests := []struct {
		name string
		args []string
		env  []string
		want want
	}{
		{"defaults", nil, nil, want{"", 10 * time.Second, 3, false, ""}},
		{"file", []string{"--config", yamlFile}, nil,
			want{"file:9092", 30 * time.Second, 7, true, "/etc/vigil/keys.yaml"}},
		{"json file", []string{"--config", jsonFile}, nil, want{"json:9092", 10 * time.Second, 9, false, ""}},
		{"file named by VIGIL_CONFIG", nil, []string{"VIGIL_CONFIG=" + yamlFile},
			want{"file:9092", 30 * time.Second, 7, true, "/etc/vigil/keys.yaml"}},
		{"--config beats VIGIL_CONFIG", []string{"--config", jsonFile}, []string{"VIGIL_CONFIG=" + yamlFile},
			want{"json:9092", 10 * time.Second, 9, false, ""}},
		{"environment beats file", []string{"--config", yamlFile},
			[]string{"VIGIL_BROKERS=env:9092", "VIGIL_CHECKPOINT_INTERVAL=5s", "VIGIL_API_KEYS_FILE=/env/keys.yaml"},
			want{"env:9092", 5 * time.Second, 7, true, "/env/keys.yaml"}},
		{"an empty variable counts", []string{"--config", yamlFile}, []string{"VIGIL_BROKERS="},
			want{"", 30 * time.Second, 7, true, "/etc/vigil/keys.yaml"}},
		{"flag beats environment and file",
			[]string{"--config", yamlFile, "--brokers", "flag:9092", "--checkpoint-keep", "1", "--verbose=false"},
			[]string{"VIGIL_BROKERS=env:9092", "VIGIL_CHECKPOINT_KEEP=2"},
			want{"flag:9092", 30 * time.Second, 1, false, "/etc/vigil/keys.yaml"}},
		{"environment without file", nil, []string{"VIGIL_CHECKPOINT_KEEP=5", "VIGIL_VERBOSE=true"},
			want{"", 10 * time.Second, 5, true, ""}},
		{"VIGIL_API_KEYS is not the keys file", nil, []string{"VIGIL_API_KEYS=gw:decider:0123456789abcdef"},
			want{"", 10 * time.Second, 3, false, ""}},
		{"the last duplicate variable wins", nil, []string{"VIGIL_BROKERS=a:1", "VIGIL_BROKERS=b:2"},
			want{"b:2", 10 * time.Second, 3, false, ""}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestFlags()
			if err := f.fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			if _, err := applyConfig(f.fs, tt.env); err != nil {
				t.Fatal(err)
			}
			got := want{*f.brokers, *f.interval, *f.keep, *f.verbose, *f.apiKeys}
			if got != tt.want {
				t.Errorf("got %+v, want %+v", got, tt.want)
			}
			if f.out.Len() > 0 {
				t.Errorf("unexpected output: %s", f.out)
			}
		})
	}
}

// TestConfigErrors pins the errors: unknown keys (a renamed flag breaks a
// config loudly) and bad values, each naming the variable or file, the key
// and the flag.
func TestConfigErrors(t *testing.T) {
	tests := []struct {
		name   string
		config string // the config file; "" for none
		env    []string
		want   string // %[1]s is the config file's path
	}{
		{
			name:   "unknown keys",
			config: "brokers: kafka:9092\nbroker: kafka:9092\ncheckpoint_interval: 5s\n",
			want: "config %[1]s:2: unknown key \"broker\": vigil serve has no flag --broker\n" +
				"config %[1]s:3: unknown key \"checkpoint_interval\": vigil serve has no flag --checkpoint_interval",
		},
		{
			name:   "unknown key in JSON",
			config: `{"brokers": "kafka:9092", "partitons": 8}`,
			want:   "config %[1]s:1: unknown key \"partitons\": vigil serve has no flag --partitons",
		},
		{
			name:   "bad values in the file",
			config: "checkpoint-interval: 5\ncheckpoint-keep: three\nverbose: yes\n",
			want: "config %[1]s:1: invalid value \"5\" for flag --checkpoint-interval: parse error\n" +
				"config %[1]s:2: invalid value \"three\" for flag --checkpoint-keep: parse error\n" +
				"config %[1]s:3: invalid value \"yes\" for flag --verbose: parse error",
		},
		{
			name: "bad values in the environment",
			env:  []string{"VIGIL_CHECKPOINT_INTERVAL=5", "VIGIL_CHECKPOINT_KEEP=99999999999999999999"},
			want: "VIGIL_CHECKPOINT_INTERVAL: invalid value \"5\" for flag --checkpoint-interval: parse error\n" +
				"VIGIL_CHECKPOINT_KEEP: invalid value \"99999999999999999999\" for flag --checkpoint-keep: value out of range",
		},
		{
			name:   "lists, maps and missing values",
			config: "brokers: [a:9092, b:9092]\ncheckpoint-keep:\napi-keys: {file: x}\n",
			want: "config %[1]s:1: key \"brokers\": want a single value, not a list or map (write lists comma-separated, as on the command line)\n" +
				"config %[1]s:2: key \"checkpoint-keep\" has no value (write \"\" for an empty string)\n" +
				"config %[1]s:3: key \"api-keys\": want a single value, not a list or map (write lists comma-separated, as on the command line)",
		},
		{
			name:   "duplicate key",
			config: "brokers: a:9092\nbrokers: b:9092\n",
			want:   "config %[1]s:2: key \"brokers\" given twice (first on line 1)",
		},
		{
			name:   "a config naming a config",
			config: "config: other.yaml\n",
			want:   "config %[1]s:1: key \"config\": a config file cannot name another one",
		},
		{
			name:   "not a map",
			config: "- brokers\n",
			want:   "config %[1]s:1: want a map of flag name to value",
		},
		{
			name:   "not YAML",
			config: "brokers: \"unterminated\n",
			want:   "config %[1]s: yaml: line 2: found unexpected end of stream",
		},
		{
			name: "missing file",
			env:  []string{"VIGIL_CONFIG=/nonexistent/vigil.yaml"},
			want: "config: open /nonexistent/vigil.yaml: no such file or directory",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			f := newTestFlags()
			var args []string
			path := ""
			if tt.config != "" {
				path = writeConfig(t, "vigil.yaml", tt.config)
				args = []string{"--config", path}
			}
			if err := f.fs.Parse(args); err != nil {
				t.Fatal(err)
			}
			_, err := applyConfig(f.fs, tt.env)
			if err == nil {
				t.Fatalf("no error, want %q", strings.ReplaceAll(tt.want, "%[1]s", path))
			}
			if diff := cmp.Diff(strings.ReplaceAll(tt.want, "%[1]s", path), err.Error()); diff != "" {
				t.Errorf("error (-want +got):\n%s", diff)
			}
		})
	}
}

func TestConfigEmptyFile(t *testing.T) {
	for _, src := range []string{"", "# nothing set yet\n", "{}"} {
		f := newTestFlags()
		if err := f.fs.Parse([]string{"--config", writeConfig(t, "vigil.yaml", src)}); err != nil {
			t.Fatal(err)
		}
		if _, err := applyConfig(f.fs, nil); err != nil || *f.keep != 3 {
			t.Errorf("%q: err %v, keep %d", src, err, *f.keep)
		}
	}
}

func TestConfigStrayVariables(t *testing.T) {
	f := newTestFlags()
	if err := f.fs.Parse(nil); err != nil {
		t.Fatal(err)
	}
	env := []string{"VIGIL_BROKER=x", "VIGIL_API_KEYS=a:b:c", "VIGIL_CONFIG_DIR=d", "OTHER_BROKERS=y"}
	if _, err := applyConfig(f.fs, env); err != nil {
		t.Fatal(err)
	}
	want := "warning: ignoring VIGIL_BROKER, VIGIL_CONFIG_DIR: no flag of vigil serve reads it (see deployments/CONFIG.md)\n"
	if got := f.out.String(); got != want {
		t.Errorf("output %q, want %q", got, want)
	}
}

// TestConfigServe checks the wiring in vigil serve itself: each source
// reaches the real flags, and a mistake stops it before anything starts.
func TestConfigServe(t *testing.T) {
	bad := writeConfig(t, "bad.yaml", "brokers: kafka:9092\nsession-timout: 30s\n")
	levels := writeConfig(t, "levels.yaml", "log-level: from-file\n")
	// The log level is checked first thing after the flags, so a bad one
	// shows which source won without starting anything.
	tests := []struct {
		name string
		args []string
		env  map[string]string
		want string // stderr contains it
	}{
		{"unknown key", []string{"--config", bad}, nil,
			"vigil serve: config " + bad + ":2: unknown key \"session-timout\": vigil serve has no flag --session-timout\n"},
		{"file", []string{"--config", levels}, nil, `"from-file"`},
		{"environment over file", []string{"--config", levels}, map[string]string{"VIGIL_LOG_LEVEL": "from-env"}, `"from-env"`},
		{"flag over environment", []string{"--config", levels, "--log-level", "from-flag"},
			map[string]string{"VIGIL_LOG_LEVEL": "from-env"}, `"from-flag"`},
		{"bad environment value", nil, map[string]string{"VIGIL_PARTITIONS": "four"},
			"vigil serve: VIGIL_PARTITIONS: invalid value \"four\" for flag --partitions: parse error\n"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			for k, v := range tt.env {
				t.Setenv(k, v)
			}
			code, _, stderr := runCLI(t, append([]string{"serve"}, tt.args...)...)
			if code != 1 || !strings.Contains(stderr, tt.want) {
				t.Errorf("exit %d, stderr:\n%s\nwant exit 1, stderr with:\n%s", code, stderr, tt.want)
			}
		})
	}
}

// TestConfigDoc keeps deployments/CONFIG.md, the one place that documents
// the configuration of vigil serve, equal to what `vigil serve --help` says.
// After changing a flag, regenerate it:
//
//	go test ./cmd/vigil -run TestConfigDoc -update-config-doc
func TestConfigDoc(t *testing.T) {
	code, _, help := runCLI(t, "serve", "--help")
	if code != 0 {
		t.Fatalf("serve --help: exit %d\n%s", code, help)
	}
	flags, err := parseFlagHelp(help)
	if err != nil {
		t.Fatal(err)
	}
	if len(flags) < 20 {
		t.Fatalf("found %d flags in serve --help, want them all:\n%s", len(flags), help)
	}
	doc := renderConfigDoc(flags)
	if *updateConfigDoc {
		if err := os.WriteFile(configDocPath, []byte(doc), 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	have, err := os.ReadFile(configDocPath)
	if err != nil {
		t.Fatalf("%v\nregenerate it: go test ./cmd/vigil -run TestConfigDoc -update-config-doc", err)
	}
	if diff := cmp.Diff(string(have), doc); diff != "" {
		t.Errorf("deployments/CONFIG.md is out of date (-file +flags):\n%s\n"+
			"regenerate it: go test ./cmd/vigil -run TestConfigDoc -update-config-doc", diff)
	}
}

// helpFlag is one flag as flag.PrintDefaults prints it.
type helpFlag struct {
	name, kind, usage, def string
	hasDefault             bool // PrintDefaults omits zero defaults
}

var defaultSuffix = regexp.MustCompile(` \(default (.*)\)$`)

// parseFlagHelp reads the flags out of flag.PrintDefaults output:
// "  -name kind" then the usage on lines indented with "    \t", the last
// ending in " (default X)" when X is not the zero value.
func parseFlagHelp(help string) ([]helpFlag, error) {
	var flags []helpFlag
	for _, line := range strings.Split(help, "\n") {
		switch {
		case strings.HasPrefix(line, "  -"):
			f := strings.Fields(strings.TrimPrefix(line, "  -"))
			hf := helpFlag{name: f[0]}
			if len(f) > 1 {
				hf.kind = f[1]
			}
			flags = append(flags, hf)
		case strings.HasPrefix(line, "    \t") && len(flags) > 0:
			f := &flags[len(flags)-1]
			if f.usage != "" {
				f.usage += " "
			}
			f.usage += strings.TrimPrefix(line, "    \t")
		}
	}
	for i := range flags {
		f := &flags[i]
		if m := defaultSuffix.FindStringSubmatch(f.usage); m != nil {
			f.usage = strings.TrimSuffix(f.usage, m[0])
			f.def, f.hasDefault = m[1], true
			if f.kind == "string" {
				s, err := strconv.Unquote(m[1])
				if err != nil {
					return nil, fmt.Errorf("flag -%s: default %s: %w", f.name, m[1], err)
				}
				f.def = s
			}
		}
	}
	return flags, nil
}

// renderConfigDoc writes deployments/CONFIG.md.
func renderConfigDoc(flags []helpFlag) string {
	var b strings.Builder
	b.WriteString(`# Configuring vigil serve

<!-- Generated from ` + "`vigil serve --help`" + ` by cmd/vigil/config_test.go; do not edit.
     Regenerate: go test ./cmd/vigil -run TestConfigDoc -update-config-doc -->

Every flag of ` + "`vigil serve`" + ` can also be set from the environment or a config
file. For each flag the first source that sets it wins:

1. the command line: ` + "`vigil serve --checkpoint-interval 5s`" + `;
2. an environment variable: ` + "`VIGIL_`" + ` and the flag name upper-cased with ` + "`-`" + `
   turned into ` + "`_`" + `: ` + "`VIGIL_CHECKPOINT_INTERVAL=5s`" + `. A variable that is set counts
   even when empty (` + "`VIGIL_HTTP=`" + ` turns the API off, as ` + "`--http \"\"`" + ` does);
3. the config file named by ` + "`--config FILE`" + ` (or ` + "`VIGIL_CONFIG`" + `): a YAML or JSON map of
   flag name to value;
4. otherwise the default below.

` + "```yaml" + `
# vigil.yaml
brokers: "kafka-0:9092,kafka-1:9092"   # lists are comma-separated, as on the command line
http: "0.0.0.0:8080"
checkpoints: kafka
checkpoint-interval: 5s
partitions: 12
log-format: json
` + "```" + `

A key that is not a flag of ` + "`vigil serve`" + ` is an error that names it, and so is a
value the flag cannot parse: a renamed flag breaks a config loudly instead of
being ignored. A ` + "`VIGIL_*`" + ` variable that no flag reads is reported as a warning.

API keys: ` + "`VIGIL_API_KEYS=name:role:token,...`" + ` holds the keys themselves, so the
keys *file* flag ` + "`--api-keys`" + ` is ` + "`VIGIL_API_KEYS_FILE`" + ` in the environment. Keys from
both are used.

| flag | environment | default | meaning |
|---|---|---|---|
`)
	for _, f := range flags {
		def := f.def
		if !f.hasDefault {
			def = map[string]string{"string": "", "int": "0", "duration": "0s", "": "false", "float": "0"}[f.kind]
		}
		key := "`--" + f.name + "`"
		if f.kind != "" {
			key += " " + f.kind
		}
		fmt.Fprintf(&b, "| %s | `%s` | %s | %s |\n", key, envName(f.name), mdCode(def), mdCell(f.usage))
	}
	return b.String()
}

func mdCell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

func mdCode(s string) string {
	if s == "" {
		return `""`
	}
	return "`" + mdCell(s) + "`"
}
