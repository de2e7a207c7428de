package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"os"
	"time"

	"github.com/vigil-cep/vigil/internal/workload"
	"github.com/vigil-cep/vigil/kafka/kconf"
)

func runGen(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gen", "", stderr)
	fs.Usage = func() {
		fmt.Fprintf(stderr, "Usage: vigil gen [--users N] [--events N] [--seed S] [--partitions P] [--out FILE] [--truth FILE] [--kafka STREAM]\n"+
			"       vigil gen --brokers HOST:PORT,... [--kafka-properties FILE] [--send-rate R] [--users N] [--events N] [--seed S] [--truth FILE]\n\n"+
			"Write a synthetic workload with planted fraud (IP hopping, card testing, account takeover).\n\n"+
			"Without --brokers it is written as NDJSON, vigil replay's input. With --brokers or --kafka-properties (whose\n"+
			"bootstrap.servers names the brokers) it is produced live, the three streams interleaved in the\n"+
			"file's order, to the topics transactions, logins and devices (which must exist: vigil serve creates them),\n"+
			"keyed by user_id and placed as Kafka's default partitioner places keys (murmur2), each record stamped with\n"+
			"the time it is sent. The workload is the file's, flag for flag: --rate is its event-time rate in both cases, and\n"+
			"--send-rate how fast it is sent. Every acknowledgement is awaited; a record not acknowledged makes the exit status 1.\n\n"+
			"Flags:\n")
		fs.PrintDefaults()
	}
	var c workload.Config
	fs.IntVar(&c.Users, "users", workload.DefaultUsers, "distinct users")
	fs.IntVar(&c.Events, "events", workload.DefaultEvents, "records to write")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed: the same flags give the same bytes")
	fs.Int64Var(&c.Start, "start", workload.DefaultStart, "event time of the first event, epoch ms")
	fs.Float64Var(&c.Rate, "rate", workload.DefaultRate, "events per second of event time")
	fs.Float64Var(&c.OutOfOrder, "out-of-order", workload.DefaultOutOfOrder, "fraction of events written late")
	fs.Float64Var(&c.Duplicates, "duplicates", workload.DefaultDuplicates, "fraction of transactions sent twice")
	fs.Float64Var(&c.Fraud, "fraud", workload.DefaultFraud, "fraction of users with a planted fraud case")
	fs.IntVar(&c.Partitions, "partitions", 1, "spread users over this many input partitions (replay runs a task per partition); "+
		"not with --brokers, where the topics' partition counts and the keys place them")
	outPath := fs.String("out", "-", "output file; - writes standard output")
	truthPath := fs.String("truth", "", "also write the planted fraud cases (NDJSON) to this file")
	kafkaStream := fs.String("kafka", "", "write only `STREAM`'s records, as KEY<TAB>VALUE lines for kcat -P -K '\\t' -t TOPIC "+
		"(one topic at a time: --brokers produces all three interleaved)")
	kclient := addKafkaClientFlags(fs, "", "produce the workload to this Kafka cluster (host:port,...) instead of writing it")
	sendRate := fs.Float64("send-rate", workload.DefaultSendRate, "with --brokers: records sent per second, on average. The workload's clock (its ts fields) runs "+
		"send-rate/rate times as fast as real time, on a fixed schedule that a slow broker does not slow down (the summary says if sending "+
		"fell behind it), so a quiet stretch of event time is quiet on the wire too. "+
		"0 sends as fast as the brokers take them, in the file's order but without the time between events: a rule that decides on arrival "+
		"may then see a payment before the logins that came before it, as the service's fetches happen to batch them (ato_spend of examples/fraud.yaml "+
		"may fire less than in replay)")
	progress := fs.Duration("progress", 5*time.Second, "with --brokers, when standard error is not a terminal: a progress line this often (0: none); "+
		"a terminal gets one line kept up to date")
	if err := parse(fs, args); err != nil {
		return err
	}
	// workload.Config reads a zero count or rate as "the default" too.
	if err := positive(fs, "users", "events", "rate", "partitions"); err != nil {
		return err
	}
	set := make(map[string]bool)
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	// workload.Config reads a zero fraction as "the default" and a negative one
	// as "none": a user who types --fraud 0 means none.
	for name, v := range map[string]*float64{"out-of-order": &c.OutOfOrder, "duplicates": &c.Duplicates, "fraud": &c.Fraud} {
		if set[name] && *v == 0 {
			*v = -1
		}
	}
	// Kafka only when the command line asks for it: a VIGIL_KAFKA_* variable
	// left in the environment must not turn `vigil gen | vigil replay` into a
	// producer that writes nothing to its pipe.
	live := set["brokers"] || set[kafkaPropertiesFlag]
	usage := func(msg string) error {
		fmt.Fprintln(stderr, msg)
		fs.Usage()
		return errUsage
	}
	var kc kconf.Config
	var err error
	if live {
		if kc, err = kclient.config(os.Environ(), nil); err != nil {
			return err
		}
		for _, name := range []string{"out", "kafka", "partitions"} {
			if set[name] {
				return usage(fmt.Sprintf("--%s writes a file; with --brokers the workload goes to Kafka", name))
			}
		}
		if math.IsNaN(*sendRate) || math.IsInf(*sendRate, 0) || *sendRate < 0 {
			return usage(fmt.Sprintf("--send-rate must be a finite number of records per second, 0 or more, not %v", *sendRate))
		}
	} else {
		for _, name := range []string{"send-rate", "progress"} {
			if set[name] {
				return usage(fmt.Sprintf("--%s is for --brokers (without, the workload is written to a file)", name))
			}
		}
	}
	if err := c.Validate(); err != nil {
		return err
	}
	var planted []workload.Planted
	if live {
		planted, err = workload.Produce(ctx, c, kc, workload.SendRate(*sendRate),
			workload.Report(stderr, isTerminal(stderr)), workload.Progress(*progress))
	} else {
		planted, err = genFile(stdout, *outPath, c, *kafkaStream)
	}
	if err != nil || *truthPath == "" {
		return err
	}
	return workload.WriteTruthFile(*truthPath, planted)
}

// genFile writes the workload of c to the file path (standard output for
// "-"): NDJSON, or the kcat lines of stream when it is set.
func genFile(stdout io.Writer, path string, c workload.Config, stream string) ([]workload.Planted, error) {
	gen := func(w io.Writer) ([]workload.Planted, error) {
		if stream != "" {
			return workload.GenerateKcat(w, c, stream)
		}
		return workload.Generate(w, c)
	}
	if path == "-" {
		return gen(stdout)
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	planted, err := gen(f)
	if err != nil {
		return nil, err
	}
	return planted, f.Close()
}
