package vigil_test

import (
	"context"
	"fmt"
	"log"
	"os"
	"time"

	"github.com/vigil-cep/vigil"
	"github.com/vigil-cep/vigil/kafka"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

// A ruleset: transactions keyed by user, decided as they arrive; a third
// transaction within an hour is reviewed.
const ruleset = `
streams:
  tx: {topic: tx, key: user_id, time: ts, id: tx_id, decide: true}
rules:
  velocity:
    stream: tx
    action: review
    when: 'len(history("tx", "1h")) >= 3'
    reason: '"3 transactions within the hour"'
`

// Example embeds Vigil in a Go program: it runs the ruleset over Kafka (here
// an in-process broker; give your cluster's brokers and security in
// Config.Kafka), decides transactions at once, and reads what Vigil holds
// about the user.
func Example() {
	broker, err := kafka.StartBroker(kafka.BrokerConfig{Listen: "127.0.0.1:0", Partitions: 2})
	if err != nil {
		log.Fatal(err)
	}
	defer broker.Close()
	dir, err := os.MkdirTemp("", "vigil-example")
	if err != nil {
		log.Fatal(err)
	}
	defer os.RemoveAll(dir)

	ctx, stop := context.WithCancel(context.Background())
	svc, err := vigil.Open(ctx, vigil.Config{
		Kafka:      kconf.Config{Brokers: []string{broker.Addr()}},
		DataDir:    dir, // checkpoints
		Partitions: 2,
	}, []byte(ruleset))
	if err != nil {
		log.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- svc.Run(ctx) }()
	for svc.Ready(ctx) != nil { // until the consumer group has assigned the partitions
		time.Sleep(50 * time.Millisecond)
	}

	for _, event := range []string{
		`{"tx_id":"t1","user_id":"alice","amount":10,"ts":1767225600000}`,
		`{"tx_id":"t2","user_id":"alice","amount":20,"ts":1767225660000}`,
		`{"tx_id":"t3","user_id":"alice","amount":30,"ts":1767225720000}`,
		`{"tx_id":"t1","user_id":"alice","amount":10,"ts":1767225600000}`, // a client's retry
	} {
		// ErrSaturated asks a caller to retry later; ErrIDConflict is an
		// id used again with another body (errors.Is).
		d, replay, err := svc.Decide(ctx, "tx", []byte(event))
		if err != nil {
			log.Fatal(err)
		}
		fmt.Printf("%s (replay %v)\n", d.Record, replay)
	}
	alice, err := svc.Entity(ctx, "alice", vigil.EntityQuery{})
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println("alice:", len(alice.History["tx"]), "transactions,", len(alice.Decisions), "decisions")

	stop() // Run drains the tasks and takes their final checkpoints
	if err := <-done; err != nil {
		log.Fatal(err)
	}
	// Output:
	// {"kind":"decision","id":"t1","stream":"tx","key":"alice","time":1767225600000,"action":"allow","score":0,"rules":[],"shadow":[],"errors":[]} (replay false)
	// {"kind":"decision","id":"t2","stream":"tx","key":"alice","time":1767225660000,"action":"allow","score":0,"rules":[],"shadow":[],"errors":[]} (replay false)
	// {"kind":"decision","id":"t3","stream":"tx","key":"alice","time":1767225720000,"action":"review","score":0,"rules":[{"rule":"velocity","action":"review","score":0,"reason":"3 transactions within the hour"}],"shadow":[],"errors":[]} (replay false)
	// {"kind":"decision","id":"t1","stream":"tx","key":"alice","time":1767225600000,"action":"allow","score":0,"rules":[],"shadow":[],"errors":[]} (replay true)
	// alice: 3 transactions, 3 decisions
}
