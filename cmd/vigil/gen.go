package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"

	"github.com/vigil-cep/vigil/internal/workload"
)

func runGen(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlags("gen", "gen [--users N] [--events N] [--seed S] [--partitions P] [--out FILE] [--truth FILE]", stderr)
	var c workload.Config
	fs.IntVar(&c.Users, "users", workload.DefaultUsers, "distinct users")
	fs.IntVar(&c.Events, "events", workload.DefaultEvents, "records to write")
	fs.Uint64Var(&c.Seed, "seed", 1, "random seed: the same flags give the same bytes")
	fs.Int64Var(&c.Start, "start", workload.DefaultStart, "event time of the first event, epoch ms")
	fs.Float64Var(&c.Rate, "rate", workload.DefaultRate, "events per second of event time")
	fs.Float64Var(&c.OutOfOrder, "out-of-order", workload.DefaultOutOfOrder, "fraction of events written late")
	fs.Float64Var(&c.Duplicates, "duplicates", workload.DefaultDuplicates, "fraction of transactions sent twice")
	fs.Float64Var(&c.Fraud, "fraud", workload.DefaultFraud, "fraction of users with a planted fraud case")
	fs.IntVar(&c.Partitions, "partitions", 1, "spread users over this many input partitions (replay runs a task per partition)")
	outPath := fs.String("out", "-", "output file; - writes standard output")
	truthPath := fs.String("truth", "", "also write the planted fraud cases (NDJSON) to this file")
	kafkaStream := fs.String("kafka", "", "write only this stream's records, as KEY<TAB>VALUE lines for `kcat -P -K '\\t' -t TOPIC`")
	if err := parse(fs, args); err != nil {
		return err
	}
	// workload.Config reads a zero fraction as "the default" and a negative one
	// as "none": a user who types --fraud 0 means none.
	fs.Visit(func(f *flag.Flag) {
		for name, v := range map[string]*float64{"out-of-order": &c.OutOfOrder, "duplicates": &c.Duplicates, "fraud": &c.Fraud} {
			if f.Name == name && *v == 0 {
				*v = -1
			}
		}
	})
	if err := c.Validate(); err != nil {
		return err
	}
	out := stdout
	if *outPath != "-" {
		f, err := os.Create(*outPath)
		if err != nil {
			return err
		}
		defer f.Close()
		out = f
	}
	var planted []workload.Planted
	var err error
	if *kafkaStream != "" {
		planted, err = generateForKafka(out, c, *kafkaStream)
	} else {
		planted, err = workload.Generate(out, c)
	}
	if err != nil {
		return err
	}
	if f, ok := out.(*os.File); ok && *outPath != "-" {
		if err := f.Close(); err != nil {
			return err
		}
	}
	if *truthPath == "" {
		return nil
	}
	f, err := os.Create(*truthPath)
	if err != nil {
		return err
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	enc := json.NewEncoder(w)
	for _, p := range planted {
		if err := enc.Encode(p); err != nil {
			return err
		}
	}
	if err := w.Flush(); err != nil {
		return fmt.Errorf("write %s: %w", *truthPath, err)
	}
	return f.Close()
}

// generateForKafka writes the workload's records of one stream as
// "key<TAB>value" lines, the key being the record's user_id: kcat -K '\t'
// hashes it, so that a user's records land on the same partition number of
// every topic (co-partitioning, DESIGN §2).
func generateForKafka(out io.Writer, c workload.Config, streamName string) ([]workload.Planted, error) {
	pr, pw := io.Pipe()
	var planted []workload.Planted
	done := make(chan error, 1)
	go func() {
		p, err := workload.Generate(pw, c)
		planted = p
		pw.CloseWithError(err)
		done <- err
	}()
	w := bufio.NewWriter(out)
	sc := bufio.NewScanner(pr)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		var line struct {
			Stream string          `json:"stream"`
			Value  json.RawMessage `json:"value"`
		}
		if err := json.Unmarshal(sc.Bytes(), &line); err != nil || line.Stream != streamName {
			continue
		}
		var key struct {
			UserID string `json:"user_id"`
		}
		_ = json.Unmarshal(line.Value, &key)
		w.WriteString(key.UserID)
		w.WriteByte('\t')
		w.Write(line.Value)
		w.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		pr.CloseWithError(err)
		<-done
		return nil, err
	}
	if err := <-done; err != nil {
		return nil, err
	}
	return planted, w.Flush()
}
