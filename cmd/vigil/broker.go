package main

import (
	"context"
	"fmt"
	"io"

	"github.com/vigil-cep/vigil/kafka"
)

func runBroker(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("broker", "broker [--listen HOST:PORT] [--data-dir DIR]", stderr)
	listen := fs.String("listen", "127.0.0.1:9092", "address to listen on (port 0 picks a free one)")
	dir := fs.String("data-dir", "vigil-data/broker", "where the log is kept; empty keeps it in memory")
	partitions := fs.Int("partitions", int(kafka.DefaultConfig.Partitions), "partitions of auto-created topics")
	syncWrites := fs.Bool("sync-writes", false, "fsync every produced batch")
	if err := parse(fs, args); err != nil {
		return err
	}
	b, err := kafka.StartBroker(kafka.BrokerConfig{Listen: *listen, DataDir: *dir, Partitions: int32(*partitions),
		SyncWrites: *syncWrites})
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "vigil broker listening on %s\n", b.Addr())
	<-ctx.Done()
	b.Close()
	return nil
}
