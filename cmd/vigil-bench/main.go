// Command vigil-bench measures Vigil; it is not part of the product binary.
//
// vigil-bench bench runs, in one process, on one embedded broker and one
// workload, the Kafka pass-through ceiling (a bare franz-go client with the
// service's settings), vigil replay, the Vigil service over Kafka
// (at-least-once and exactly-once), and event-to-decision latency at a fixed
// input rate, per delivery and commit interval. vigil-bench loadtest
// drives POST /v1/decisions of a running vigil serve at a fixed rate (open
// loop) and reports latencies; vigil-bench bare serves the floor it is
// compared with, a bare handler that decodes the same JSON; vigil-bench
// compare starts such servers in turn and compares them, round after round.
// The figures they produce, the commands that produced them and what was
// tried are in docs/performance.md.
package main

import (
	"os"

	"github.com/vigil-cep/vigil/internal/cli"
)

// program is vigil-bench with its subcommands (a function, not a variable:
// the subcommands read it for their --help).
func program() cli.Program {
	return cli.Program{
		Name:  "vigil-bench",
		Title: "vigil-bench: measure Vigil's throughput and latency (figures: docs/performance.md).",
		Commands: map[string]cli.Command{
			"bench":    {Summary: "measure throughput and latency: Kafka pass-through ceiling, replay, Vigil over Kafka", Run: runBench},
			"loadtest": {Summary: "send decision requests to a running vigil serve at a fixed rate and report latencies", Run: runLoadtest},
			"bare":     {Summary: "serve a bare POST /v1/decisions (decode the event, answer a decision; no engine, no Kafka): the floor loadtest measures the API against", Run: runBare},
			"compare":  {Summary: "start servers of POST /v1/decisions in turn (vigil serve, bare) and compare their CPU per request, latency and highest rate", Run: runCompare},
		},
	}
}

func main() { os.Exit(program().Main()) }
