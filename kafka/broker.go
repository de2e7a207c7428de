package kafka

import (
	"fmt"
	"net"
	"os"

	"github.com/twmb/franz-go/pkg/kfake"
)

// Broker is the embedded Kafka-protocol broker (franz-go's kfake): one node,
// persisted under a directory, so that `vigil serve` works on a machine with
// no Kafka and `vigil broker` can stand in for one in tests and demos. Any
// Kafka client (kcat, franz-go, librdkafka) talks to it.
type Broker struct {
	c    *kfake.Cluster
	addr string
}

// BrokerConfig says where the broker listens and keeps its data.
type BrokerConfig struct {
	Listen     string // host:port; port 0 picks a free one
	DataDir    string // "" keeps everything in memory
	Partitions int32  // partitions of topics created without a count
	SyncWrites bool   // fsync every produced batch (slower, survives power loss)
}

// StartBroker starts a broker; Close stops it.
func StartBroker(cfg BrokerConfig) (*Broker, error) {
	ln, err := net.Listen("tcp", cfg.Listen)
	if err != nil {
		return nil, fmt.Errorf("broker: listen on %s: %w", cfg.Listen, err)
	}
	opts := []kfake.Opt{
		kfake.NumBrokers(1),
		kfake.ClusterID("vigil-embedded"),
		// Producers such as kcat may write to a topic before Vigil created it.
		kfake.AllowAutoTopicCreation(),
		// kfake binds 127.0.0.1:<port> itself; hand it the listener we opened
		// so that the address (and a port of 0) is ours to choose.
		kfake.ListenFn(func(string, string) (net.Listener, error) { return ln, nil }),
	}
	if cfg.Partitions > 0 {
		opts = append(opts, kfake.DefaultNumPartitions(int(cfg.Partitions)))
	}
	if cfg.DataDir != "" {
		if err := os.MkdirAll(cfg.DataDir, 0o755); err != nil {
			ln.Close()
			return nil, fmt.Errorf("broker: %w", err)
		}
		opts = append(opts, kfake.DataDir(cfg.DataDir))
	}
	if cfg.SyncWrites {
		opts = append(opts, kfake.SyncWrites())
	}
	c, err := kfake.NewCluster(opts...)
	if err != nil {
		ln.Close()
		return nil, fmt.Errorf("broker: %w", err)
	}
	return &Broker{c: c, addr: ln.Addr().String()}, nil
}

// Addr returns the address clients connect to.
func (b *Broker) Addr() string { return b.addr }

// Cluster exposes the kfake cluster to tests that inject faults (slow
// produce responses, for instance).
func (b *Broker) Cluster() *kfake.Cluster { return b.c }

// Close stops the broker and flushes its data directory.
func (b *Broker) Close() { b.c.Close() }
