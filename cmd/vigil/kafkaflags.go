package main

import (
	"flag"
	"strings"

	"github.com/vigil-cep/vigil/kafka/kconf"
)

// kafkaPropertiesFlag names the file of Kafka client properties.
const kafkaPropertiesFlag = "kafka-properties"

// kafkaClient holds the connection flags of every command that opens a
// Kafka client (serve, rules, gen): --brokers and --kafka-properties.
type kafkaClient struct {
	brokers    *string
	properties *string
}

// addKafkaClientFlags registers --brokers (defaulting to defBrokers) and
// --kafka-properties on fs.
func addKafkaClientFlags(fs *flag.FlagSet, defBrokers, brokersUsage string) *kafkaClient {
	return &kafkaClient{
		brokers: fs.String("brokers", defBrokers, brokersUsage),
		properties: fs.String(kafkaPropertiesFlag, "", "Kafka client properties (bootstrap.servers, security.protocol, sasl.*, ssl.*), "+
			"the file kcat -F reads; each also as "+kconf.EnvPrefix+"<PROPERTY> (dots as _) and, in --config, as kafka.<property>"),
	}
}

// config resolves the connection: the properties file, then the config
// file's kafka.* keys (fromConfig, from applyConfig), then the VIGIL_KAFKA_*
// variables of environ, then --brokers when it is not empty; each overrides
// the one before. It does not check the result (see kconf.Config.Validate):
// serve without brokers starts its own.
func (k *kafkaClient) config(environ []string, fromConfig []kconf.Setting) (kconf.Config, error) {
	var settings []kconf.Setting
	if *k.properties != "" {
		s, err := kconf.ReadProperties(*k.properties)
		if err != nil {
			return kconf.Config{}, err
		}
		settings = append(settings, s...)
	}
	settings = append(settings, fromConfig...)
	// The variables of flags named kafka-* (VIGIL_KAFKA_PROPERTIES,
	// VIGIL_KAFKA_LISTEN) are the flags', not properties.
	skip := map[string]bool{}
	for _, name := range []string{kafkaPropertiesFlag, "kafka-listen"} {
		skip[envName(name)] = true
	}
	settings = append(settings, kconf.FromEnv(environ, skip)...)
	var c kconf.Config
	if err := c.Set(settings...); err != nil {
		return c, err
	}
	if *k.brokers != "" {
		c.Brokers = strings.Split(*k.brokers, ",")
	}
	return c, nil
}
