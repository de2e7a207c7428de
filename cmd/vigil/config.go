package main

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"go.yaml.in/yaml/v3"

	"github.com/vigil-cep/vigil/api"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// Configuration sources of `vigil serve`, highest precedence first:
//
//	command-line flag > VIGIL_<NAME> environment variable > config file > default
//
// The config file (--config FILE, or VIGIL_CONFIG) is a YAML or JSON map of
// flag name to value: `brokers: "kafka:9092"`. It works over any
// *flag.FlagSet, so a new flag is configurable by all three routes at once;
// deployments/CONFIG.md lists them (TestConfigDoc keeps it current).

// configFlag is the flag that names the config file.
const configFlag = "config"

// envPrefix starts the name of every flag's environment variable.
const envPrefix = "VIGIL_"

// envName returns the environment variable that sets the flag name:
// VIGIL_ and the name upper-cased with '-' turned into '_'
// (checkpoint-interval → VIGIL_CHECKPOINT_INTERVAL). When that name is
// already taken by a variable with its own meaning (VIGIL_API_KEYS holds the
// keys themselves, api.KeysEnv), the flag's variable gets a _FILE suffix:
// --api-keys FILE is VIGIL_API_KEYS_FILE.
func envName(name string) string {
	env := envPrefix + strings.ToUpper(strings.ReplaceAll(name, "-", "_"))
	if env == api.KeysEnv {
		env += "_FILE"
	}
	return env
}

// applyConfig gives the flags of fs that the command line did not set their
// value from the environment (environ, os.Environ() in production) or,
// failing that, from the config file named by the config flag or
// VIGIL_CONFIG. Call it right after fs.Parse.
//
// Kafka client properties (kafka/kconf) have no flags of their own: for a
// command with --kafka-properties, a config key "kafka.<property>" sets one
// (kafka.sasl.mechanism: SCRAM-SHA-512); applyConfig returns them, in file
// order, for kafkaClient.config, which also reads VIGIL_KAFKA_<PROPERTY>.
//
// A variable that is set counts even when empty (VIGIL_HTTP= turns the API
// off, as --http "" does). An unknown key in the config file is an error that
// names it, so that a renamed flag breaks a config loudly; a VIGIL_* variable
// that is no flag's is reported on fs.Output() but not an error, since the
// environment is shared with other programs. A value in the file for a flag
// that the command line or the environment sets is not parsed. Errors name
// the variable or file, the key and the flag; several are joined.
func applyConfig(fs *flag.FlagSet, environ []string) ([]kconf.Setting, error) {
	env := map[string]string{}
	for _, kv := range environ {
		if name, value, ok := strings.Cut(kv, "="); ok {
			env[name] = value // the last one wins, as in getenv
		}
	}
	onCommandLine := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { onCommandLine[f.Name] = true })

	var errs []error
	var file map[string]configValue
	var path string
	if fs.Lookup(configFlag) != nil {
		if v, ok := env[envName(configFlag)]; ok && !onCommandLine[configFlag] {
			if err := fs.Set(configFlag, v); err != nil {
				return nil, fmt.Errorf("%s: %w", envName(configFlag), err)
			}
		}
		if path = fs.Lookup(configFlag).Value.String(); path != "" {
			var err error
			file, err = readConfigFile(path, fs)
			if err != nil {
				return nil, err
			}
		}
	}

	known := map[string]bool{api.KeysEnv: true, peerSecretEnv: true}
	hasKafka := fs.Lookup(kafkaPropertiesFlag) != nil
	fs.VisitAll(func(f *flag.Flag) {
		name := envName(f.Name)
		known[name] = true
		if onCommandLine[f.Name] || f.Name == configFlag {
			return
		}
		if v, ok := env[name]; ok {
			if err := fs.Set(f.Name, v); err != nil {
				errs = append(errs, fmt.Errorf("%s: invalid value %q for flag --%s: %w", name, v, f.Name, err))
			}
			return
		}
		if v, ok := file[f.Name]; ok {
			if err := fs.Set(f.Name, v.value); err != nil {
				errs = append(errs, fmt.Errorf("config %s:%d: invalid value %q for flag --%s: %w", path, v.line, v.value, f.Name, err))
			}
		}
	})
	var stray []string
	for name := range env {
		if strings.HasPrefix(name, envPrefix) && !known[name] && !(hasKafka && strings.HasPrefix(name, kconf.EnvPrefix)) {
			stray = append(stray, name)
		}
	}
	if len(stray) > 0 {
		sort.Strings(stray)
		fmt.Fprintf(fs.Output(), "warning: ignoring %s: no flag of vigil %s reads it (see deployments/CONFIG.md)\n",
			strings.Join(stray, ", "), fs.Name())
	}
	var props []kconf.Setting
	for key, v := range file {
		if name, ok := strings.CutPrefix(key, kafkaConfigPrefix); ok {
			props = append(props, kconf.Setting{Name: name, Value: v.value, Source: fmt.Sprintf("config %s:%d", path, v.line)})
		}
	}
	sort.Slice(props, func(i, j int) bool {
		return file[kafkaConfigPrefix+props[i].Name].line < file[kafkaConfigPrefix+props[j].Name].line
	})
	return props, errors.Join(errs...)
}

// kafkaConfigPrefix starts the config keys that set Kafka client properties.
const kafkaConfigPrefix = "kafka."

// configValue is one value of the config file, as the text of its scalar.
type configValue struct {
	value string
	line  int
}

// readConfigFile reads a YAML or JSON map of flag name to scalar value and
// checks every key against the flags of fs. Lists and maps are refused (a
// list of brokers is written "a:9092,b:9092", as on the command line), and so
// is a missing value: write "" for an empty string.
func readConfigFile(path string, fs *flag.FlagSet) (map[string]configValue, error) {
	src, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("config: %w", err)
	}
	var doc yaml.Node
	if err := yaml.NewDecoder(bytes.NewReader(src)).Decode(&doc); err != nil {
		if errors.Is(err, io.EOF) || len(bytes.TrimSpace(src)) == 0 {
			return nil, nil // an empty file sets nothing
		}
		return nil, fmt.Errorf("config %s: %w", path, err)
	}
	root := &doc
	if root.Kind == yaml.DocumentNode && len(root.Content) == 1 {
		root = root.Content[0]
	}
	if root.Kind == yaml.ScalarNode && root.Tag == "!!null" {
		return nil, nil // only comments
	}
	if root.Kind != yaml.MappingNode {
		return nil, fmt.Errorf("config %s:%d: want a map of flag name to value", path, root.Line)
	}
	values := map[string]configValue{}
	var errs []error
	for i := 0; i+1 < len(root.Content); i += 2 {
		k, v := root.Content[i], root.Content[i+1]
		key := k.Value
		switch {
		case k.Kind != yaml.ScalarNode:
			errs = append(errs, fmt.Errorf("config %s:%d: a key must be a flag name", path, k.Line))
			continue
		case key == configFlag:
			errs = append(errs, fmt.Errorf("config %s:%d: key %q: a config file cannot name another one", path, k.Line, key))
			continue
		case strings.HasPrefix(key, kafkaConfigPrefix) && fs.Lookup(kafkaPropertiesFlag) != nil:
			// a Kafka client property: kafkaClient.config checks its name
		case fs.Lookup(key) == nil:
			errs = append(errs, fmt.Errorf("config %s:%d: unknown key %q: vigil %s has no flag --%s", path, k.Line, key, fs.Name(), key))
			continue
		}
		if prev, dup := values[key]; dup {
			errs = append(errs, fmt.Errorf("config %s:%d: key %q given twice (first on line %d)", path, k.Line, key, prev.line))
			continue
		}
		switch {
		case v.Kind == yaml.AliasNode && v.Alias != nil && v.Alias.Kind == yaml.ScalarNode:
			v = v.Alias
		case v.Kind != yaml.ScalarNode:
			errs = append(errs, fmt.Errorf("config %s:%d: key %q: want a single value, not a list or map (write lists comma-separated, as on the command line)", path, v.Line, key))
			continue
		}
		if v.Tag == "!!null" {
			errs = append(errs, fmt.Errorf("config %s:%d: key %q has no value (write \"\" for an empty string)", path, v.Line, key))
			continue
		}
		values[key] = configValue{value: v.Value, line: v.Line}
	}
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return values, nil
}
