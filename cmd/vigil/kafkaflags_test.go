package main

import (
	"flag"
	"fmt"
	"io"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// Kafka client properties come from four places, each overriding the one
// before: the properties file, the config file's kafka.* keys, the
// VIGIL_KAFKA_* variables, and --brokers.
func TestKafkaClientSources(t *testing.T) {
	props := writeConfig(t, "client.properties", `bootstrap.servers=file:9093
security.protocol=SASL_SSL
sasl.mechanism=SCRAM-SHA-256
sasl.username=from-file
sasl.password=file-secret
ssl.ca.location=/file/ca.pem
`)
	cfgFile := writeConfig(t, "vigil.yaml", "kafka.sasl.mechanism: SCRAM-SHA-512\nkafka.sasl.username: from-config\ngroup: g\n")
	tests := []struct {
		name string
		args []string
		env  []string
		want kconf.Config
	}{
		{"the file alone", []string{"--kafka-properties", props}, nil,
			kconf.Config{Brokers: []string{"file:9093"}, Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-256", Username: "from-file",
				Password: "file-secret", CAFile: "/file/ca.pem"}},
		{"config beats file", []string{"--kafka-properties", props, "--config", cfgFile}, nil,
			kconf.Config{Brokers: []string{"file:9093"}, Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-512", Username: "from-config",
				Password: "file-secret", CAFile: "/file/ca.pem"}},
		{"environment beats config", []string{"--kafka-properties", props, "--config", cfgFile},
			[]string{"VIGIL_KAFKA_SASL_USERNAME=from-env", "VIGIL_KAFKA_SASL_PASSWORD=env-secret"},
			kconf.Config{Brokers: []string{"file:9093"}, Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-512", Username: "from-env",
				Password: "env-secret", CAFile: "/file/ca.pem"}},
		{"--brokers beats bootstrap.servers", []string{"--kafka-properties", props, "--brokers", "flag:9093"}, nil,
			kconf.Config{Brokers: []string{"flag:9093"}, Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-256", Username: "from-file",
				Password: "file-secret", CAFile: "/file/ca.pem"}},
		{"the file named by the environment", nil, []string{"VIGIL_KAFKA_PROPERTIES=" + props, "VIGIL_KAFKA_SSL_CA_LOCATION=/env/ca.pem"},
			kconf.Config{Brokers: []string{"file:9093"}, Protocol: "SASL_SSL", Mechanism: "SCRAM-SHA-256", Username: "from-file",
				Password: "file-secret", CAFile: "/env/ca.pem"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fs := flag.NewFlagSet("serve", flag.ContinueOnError)
			fs.SetOutput(io.Discard)
			k := addKafkaClientFlags(fs, "", "brokers")
			fs.String("group", "", "group")
			fs.String(configFlag, "", "config")
			if err := fs.Parse(tt.args); err != nil {
				t.Fatal(err)
			}
			fromConfig, err := applyConfig(fs, tt.env)
			if err != nil {
				t.Fatal(err)
			}
			got, err := k.config(tt.env, fromConfig)
			if err != nil {
				t.Fatal(err)
			}
			if d := cmp.Diff(tt.want, got); d != "" {
				t.Errorf("(-want +got):\n%s", d)
			}
		})
	}
}

func TestKafkaClientUnknownProperty(t *testing.T) {
	cfgFile := writeConfig(t, "vigil.yaml", "kafka.sasl.pasword: x\n")
	fs := flag.NewFlagSet("serve", flag.ContinueOnError)
	k := addKafkaClientFlags(fs, "", "brokers")
	fs.String(configFlag, "", "config")
	if err := fs.Parse([]string{"--config", cfgFile}); err != nil {
		t.Fatal(err)
	}
	fromConfig, err := applyConfig(fs, []string{"VIGIL_KAFKA_SSL_CA=/ca.pem"})
	if err != nil {
		t.Fatal(err)
	}
	_, err = k.config([]string{"VIGIL_KAFKA_SSL_CA=/ca.pem"}, fromConfig)
	msg := fmt.Sprint(err)
	for _, want := range []string{
		"config " + cfgFile + `:1: unknown Kafka client property "sasl.pasword"; Vigil reads: bootstrap.servers,`,
		`VIGIL_KAFKA_SSL_CA: unknown Kafka client property "ssl.ca"; Vigil reads: bootstrap.servers,`,
	} {
		if !strings.Contains(msg, want) {
			t.Errorf("error %q does not say %q", msg, want)
		}
	}
}
