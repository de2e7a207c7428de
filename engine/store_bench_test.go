package engine_test

import (
	"context"
	"testing"

	"github.com/twmb/franz-go/pkg/kgo"

	"github.com/vigil-cep/vigil/engine"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/state"
)

// BenchmarkRestoreFromStore is BenchmarkRestoreChain from each checkpoint
// store, as a service's tasks start (kafka.Service.assign): four tasks read
// their chain (a base and 20 deltas, 76 MB) from the store, then restore it,
// in parallel (engine.RestoreRounds). The Kafka store runs on the embedded
// broker, in this process and reached in it (kafka.Broker.Dial), as vigil
// serve's does.
func BenchmarkRestoreFromStore(b *testing.B) {
	const tasks = 4
	rs, chain := engine.RestoreChainFixture(b)
	ctx := context.Background()
	for _, store := range []string{"dir", "kafka"} {
		b.Run(store, func(b *testing.B) {
			var backend state.Backend
			switch store {
			case "dir":
				d, err := state.OpenDir(b.TempDir())
				if err != nil {
					b.Fatal(err)
				}
				backend = d
			case "kafka":
				br, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0"})
				if err != nil {
					b.Fatal(err)
				}
				defer br.Close()
				cs, err := kafka.NewCheckpointStore(ctx, []string{br.Addr()}, "checkpoints", tasks,
					kafka.CheckpointStoreConfig{ClientOpts: []kgo.Opt{kgo.Dialer(br.Dial)}})
				if err != nil {
					b.Fatal(err)
				}
				defer cs.Close()
				backend = cs
			}
			for task := range int32(tasks) {
				for i, data := range chain {
					s := &state.Snapshot{Task: task, Seq: uint64(i + 1), Parent: uint64(i), Sections: map[string][]byte{"engine": data}}
					if err := backend.Save(ctx, s); err != nil {
						b.Fatal(err)
					}
				}
			}
			engine.RestoreRounds(b, func(task int32) ([][]byte, error) {
				return readChain(ctx, backend, task)
			}, func(_ int32, chain [][]byte) error {
				t, err := engine.NewTask(rs, func(engine.Output) {})
				if err == nil {
					err = t.RestoreChain(chain)
				}
				return err
			})
		})
	}
}

// readChain reads task's chain from backend: its snapshots' engine sections.
func readChain(ctx context.Context, backend state.Backend, task int32) ([][]byte, error) {
	snaps, err := backend.Chain(ctx, task)
	if err != nil {
		return nil, err
	}
	data := make([][]byte, len(snaps))
	for i, s := range snaps {
		data[i] = s.Sections["engine"]
	}
	return data, nil
}
