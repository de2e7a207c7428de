package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/vigil-cep/vigil/internal/cli"
)

// runLoadtest is an open-loop load generator for POST /v1/decisions: each
// request is due at start + i/rate, and its latency counts from when it was
// due, so a slow server cannot hide its queueing by slowing the generator
// down (coordinated omission).
func runLoadtest(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := program().NewFlags("loadtest", "loadtest [--url URL] [--rate N] [--duration D] [--find-max]", stderr)
	url := fs.String("url", "http://127.0.0.1:8080", "the API's base URL")
	stream := fs.String("stream", "transactions", "the deciding stream")
	token := fs.String("token", "", "bearer token (a decider key)")
	rate := fs.Int("rate", 5000, "requests per second")
	duration := fs.Duration("duration", 20*time.Second, "how long to send")
	users := fs.Int("users", 100_000, "distinct user_id values")
	workers := fs.Int("workers", 256, "concurrent connections")
	findMax := fs.Bool("find-max", false, "find the highest rate sustained with p99 under --max-p99 and no errors, to within 5%: steps of ×1.5 from --rate until one is not, then halving the gap")
	maxP99 := fs.Duration("max-p99", 100*time.Millisecond, "with --find-max: the p99 a sustained rate must keep")
	asJSON := fs.Bool("json", false, "print results as JSON lines")
	timeline := fs.Duration("timeline", 0, "also report the latencies of each slot of this length, by when each request was due (0: off): where in the run the tail is")
	if err := cli.Parse(fs, args); err != nil {
		return err
	}
	var bad []string
	if *rate < 1 {
		bad = append(bad, "--rate must be positive")
	}
	if *duration <= 0 {
		bad = append(bad, "--duration must be positive")
	}
	if *users < 1 {
		bad = append(bad, "--users must be positive")
	}
	if *workers < 1 {
		bad = append(bad, "--workers must be positive")
	}
	if len(bad) > 0 {
		fmt.Fprintln(stderr, strings.Join(bad, "\n"))
		fs.Usage()
		return cli.ErrUsage
	}
	lt := newLoadtest(*url, *stream, *token, *users, *workers)
	lt.timeline = *timeline
	report := func(r loadResult) {
		if *asJSON {
			b, _ := json.Marshal(r)
			fmt.Fprintln(stdout, string(b))
			return
		}
		fmt.Fprintf(stdout, "rate %6d/s  sent %7d  ok %7d  errors %5d  achieved %8.0f/s  p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n",
			r.Rate, r.Sent, r.OK, r.Errors, r.Achieved, r.P50, r.P90, r.P99, r.Max)
		if r.Forwarded != nil {
			for _, s := range []struct {
				name string
				q    *latencySplit
			}{{"answered locally", r.Local}, {"forwarded to the owner", r.Forwarded}} {
				fmt.Fprintf(stdout, "  %-24s %7d  p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", s.name, s.q.OK, s.q.P50, s.q.P90, s.q.P99, s.q.Max)
			}
		}
		for _, s := range r.Timeline {
			fmt.Fprintf(stdout, "  from %7.1f s %7d  p50 %7.2f ms  p90 %7.2f ms  p99 %7.2f ms  max %7.2f ms\n", s.From, s.OK, s.P50, s.P90, s.P99, s.Max)
		}
	}
	if !*findMax {
		r, err := lt.run(ctx, *rate, *duration)
		if err != nil {
			return err
		}
		report(r)
		return nil
	}
	sustained := func(r int) (bool, error) {
		res, err := lt.run(ctx, r, *duration)
		if err != nil {
			return false, err
		}
		report(res)
		return res.sustains(*maxP99), nil
	}
	best, err := highestSustained(ctx, *rate, sustained)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "highest sustained rate: %d/s (p99 under %s, no errors)\n", best, *maxP99)
	return nil
}

// highestSustained returns the highest rate that sustained reports as kept, from
// start up. Steps of ×1.5 find one that is not kept; halving the gap between
// it and the highest one that was then finds the limit to within 5%, where
// the steps alone could understate it by a third (below start too, when
// start is not kept; 0 when no rate is).
func highestSustained(ctx context.Context, start int, sustained func(rate int) (bool, error)) (int, error) {
	best, failed := 0, 0
	for r := start; ; r = max(r*3/2, r+1) {
		if ctx.Err() != nil {
			return best, nil
		}
		ok, err := sustained(r)
		if err != nil {
			return 0, err
		}
		if !ok {
			failed = r
			break
		}
		best = r
	}
	for failed-best > failed/20 && (best+failed)/2 > best && ctx.Err() == nil {
		mid := (best + failed) / 2
		ok, err := sustained(mid)
		if err != nil {
			return 0, err
		}
		if ok {
			best = mid
		} else {
			failed = mid
		}
	}
	return best, nil
}

// newLoadtest returns a load generator for POST /v1/decisions?stream= of
// the API at base URL url, with ids of a prefix of its own.
func newLoadtest(url, stream, token string, users, workers int) *loadtest {
	var run [4]byte
	rand.Read(run[:])
	return &loadtest{prefix: hex.EncodeToString(run[:]), url: url + "/v1/decisions?stream=" + stream, token: token, users: users, workers: workers,
		client: &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: workers, MaxConnsPerHost: workers}, Timeout: 10 * time.Second}}
}

type loadtest struct {
	url, token string
	prefix     string // per run, so that ids never repeat across runs
	users      int
	workers    int
	timeline   time.Duration // the slots of loadResult.Timeline; 0: none
	client     *http.Client
	seq        atomic.Int64
}

// loadResult is one run's figures; latencies in milliseconds.
type loadResult struct {
	Rate     int           `json:"rate"`
	Sent     int64         `json:"sent"`
	OK       int64         `json:"ok"`
	Errors   int64         `json:"errors"`
	Achieved float64       `json:"achieved_per_s"`
	P50      float64       `json:"p50_ms"`
	P90      float64       `json:"p90_ms"`
	P99      float64       `json:"p99_ms"`
	Max      float64       `json:"max_ms"`
	Statuses map[int]int64 `json:"statuses"`
	// Local and Forwarded split the 200s by whether the instance asked
	// answered itself or forwarded the request to the owner of its key
	// (the Vigil-Forwarded-To header); both nil when none was forwarded.
	Local     *latencySplit `json:"local,omitempty"`
	Forwarded *latencySplit `json:"forwarded,omitempty"`
	// Timeline splits the 200s by slot of --timeline, by when each request
	// was due: a tail from one moment of the run, or from all of it.
	Timeline []timelineSlot `json:"timeline,omitempty"`
}

// sustains reports whether the run kept its rate: every request answered
// 200, the p99 at most maxP99, and at least 95% of the rate achieved.
func (r loadResult) sustains(maxP99 time.Duration) bool {
	return r.Errors == 0 && r.P99 <= float64(maxP99.Microseconds())/1000 && r.Achieved >= 0.95*float64(r.Rate)
}

// timelineSlot is the quantiles of the 200s due in one slot of a run.
type timelineSlot struct {
	From float64 `json:"from_s"` // seconds after the run's start
	latencySplit
}

// latencySplit is the quantiles of a part of a run's 200s.
type latencySplit struct {
	OK  int64   `json:"ok"`
	P50 float64 `json:"p50_ms"`
	P90 float64 `json:"p90_ms"`
	P99 float64 `json:"p99_ms"`
	Max float64 `json:"max_ms"`
}

// quantiles sorts lats and returns the split of them.
func quantiles(lats []time.Duration) *latencySplit {
	slices.Sort(lats)
	q := func(p float64) float64 {
		if len(lats) == 0 {
			return 0
		}
		return float64(lats[min(len(lats)-1, int(p*float64(len(lats))))].Microseconds()) / 1000
	}
	return &latencySplit{OK: int64(len(lats)), P50: q(0.50), P90: q(0.90), P99: q(0.99), Max: q(1)}
}

func (lt *loadtest) run(ctx context.Context, rate int, d time.Duration) (loadResult, error) {
	n := int(int64(rate) * int64(d) / int64(time.Second))
	due := make(chan time.Time, lt.workers)
	var (
		mu        sync.Mutex
		lats      = make([]time.Duration, 0, n)
		local     []time.Duration
		forwarded []time.Duration
		slots     [][]time.Duration // by slot of lt.timeline
		start     = time.Now()
		statuses  = map[int]int64{}
		wg        sync.WaitGroup
	)
	for range lt.workers {
		wg.Go(func() {
			for at := range due {
				status, fwd := lt.one()
				lat := time.Since(at)
				mu.Lock()
				statuses[status]++
				if status == http.StatusOK {
					lats = append(lats, lat)
					if lt.timeline > 0 {
						i := int(at.Sub(start) / lt.timeline)
						for len(slots) <= i {
							slots = append(slots, nil)
						}
						slots[i] = append(slots[i], lat)
					}
					if fwd {
						forwarded = append(forwarded, lat)
					} else {
						local = append(local, lat)
					}
				}
				mu.Unlock()
			}
		})
	}
	interval := time.Second / time.Duration(rate)
	for i := range n {
		at := start.Add(time.Duration(i) * interval)
		if w := time.Until(at); w > 0 {
			time.Sleep(w) // pacing the open loop
		}
		if ctx.Err() != nil {
			break
		}
		due <- at
	}
	close(due)
	wg.Wait()
	elapsed := time.Since(start)
	all := quantiles(lats)
	res := loadResult{Rate: rate, Sent: int64(n), OK: statuses[http.StatusOK], Statuses: statuses,
		Achieved: float64(len(lats)) / elapsed.Seconds(), P50: all.P50, P90: all.P90, P99: all.P99, Max: all.Max}
	res.Errors = res.Sent - res.OK
	if len(forwarded) > 0 {
		res.Local, res.Forwarded = quantiles(local), quantiles(forwarded)
	}
	for i, s := range slots {
		res.Timeline = append(res.Timeline, timelineSlot{From: (time.Duration(i) * lt.timeline).Seconds(), latencySplit: *quantiles(s)})
	}
	return res, nil
}

// one sends a transaction with a fresh id and returns the status (0 on a
// transport error) and whether the instance forwarded it to the key's owner.
func (lt *loadtest) one() (int, bool) {
	i := lt.seq.Add(1)
	body := fmt.Appendf(nil, `{"tx_id":"lt-%s-%d","user_id":"u%06d","amount":%d,"currency":"EUR","ip":"10.0.%d.%d","ts":%d}`,
		lt.prefix, i, i%int64(lt.users), i%700, i%7, i%13, time.Now().UnixMilli())
	req, err := http.NewRequest("POST", lt.url, bytes.NewReader(body))
	if err != nil {
		return 0, false
	}
	req.Header.Set("Content-Type", "application/json")
	if lt.token != "" {
		req.Header.Set("Authorization", "Bearer "+lt.token)
	}
	resp, err := lt.client.Do(req)
	if err != nil {
		return 0, false
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp.StatusCode, resp.Header.Get("Vigil-Forwarded-To") != ""
}
