package main

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/vigil-cep/vigil/internal/cli"
)

// runCompare measures servers of POST /v1/decisions against each other, in
// turn, on this machine: the decision API against the bare handler (issue
// 17's bar 5, docs/performance.md), or two builds or settings of vigil
// serve. Each round starts each server afresh, warms it up, loads it at a
// fixed rate, reads its CPU from /proc, optionally finds its highest
// sustained rate, and stops it. The rounds alternate the servers, because
// this kind of machine is shared and its speed drifts from hour to hour: a
// ratio between runs taken side by side is the figure to trust, not a run.
func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := program().NewFlags("compare", "compare [flags] SERVER...", stderr)
	rounds := fs.Int("rounds", 3, "runs of each server, alternated")
	rate := fs.Int("rate", 5000, "requests per second of the measured run")
	duration := fs.Duration("duration", 15*time.Second, "length of the measured run")
	warmup := fs.Duration("warmup", 5*time.Second, "load at --rate before the measured run, not counted")
	findMax := fs.Bool("find-max", false, "after the measured run, find each server's highest rate with p99 under --max-p99 and no errors (as loadtest --find-max; runs of --find-max-duration)")
	findMaxDur := fs.Duration("find-max-duration", 10*time.Second, "length of each --find-max run")
	maxP99 := fs.Duration("max-p99", 100*time.Millisecond, "with --find-max: the p99 a sustained rate must keep")
	stream := fs.String("stream", "transactions", "the deciding stream")
	token := fs.String("token", "", "bearer token (a decider key)")
	users := fs.Int("users", 100_000, "distinct user_id values")
	workers := fs.Int("workers", 256, "concurrent connections")
	ready := fs.Duration("ready-timeout", time.Minute, "how long a server may take to answer GET /readyz")
	fs.Usage = func() {
		fmt.Fprint(stderr, `Usage: vigil-bench compare [flags] SERVER...

Each SERVER is a command line (split on spaces) that serves POST /v1/decisions
on {addr}, a free loopback address compare puts in its place; {dir} becomes a
fresh directory, removed after the run. "bare" alone is this program's bare
handler. The first SERVER is the baseline of the ratios. For example, issue
17's bar 5 and a setting against the default:

  vigil-bench compare --find-max bare \
    'vigil serve --http {addr} --data-dir {dir} --kafka-listen 127.0.0.1:0 --log-level warn' \
    'vigil serve --http {addr} --data-dir {dir} --kafka-listen 127.0.0.1:0 --log-level warn --linger 1ms'

CPU per request is the server process's own (user and system, from
/proc/PID/stat; not its children's), over the measured run; Linux only.

Flags:
`)
		fs.PrintDefaults()
	}
	specs, err := cli.ParseArgs(fs, args, maxServers)
	if err != nil {
		return err
	}
	var bad []string
	if len(specs) < 1 {
		bad = append(bad, "give at least one SERVER")
	}
	if err := cli.Positive(fs, "rounds", "rate", "duration", "warmup", "find-max-duration", "max-p99", "users", "workers", "ready-timeout"); err != nil {
		bad = append(bad, err.Error())
	}
	if len(bad) > 0 {
		fmt.Fprintln(stderr, strings.Join(bad, "\n"))
		fs.Usage()
		return cli.ErrUsage
	}
	self, err := os.Executable()
	if err != nil {
		return err
	}
	servers := make([]server, len(specs))
	for i, spec := range specs {
		servers[i] = server{label: strconv.Itoa(i + 1), argv: strings.Fields(spec)}
		if spec == "bare" {
			servers[i].argv = []string{self, "bare", "--http", "{addr}"}
		}
		if len(servers[i].argv) == 0 {
			return fmt.Errorf("%w: SERVER %d is empty", cli.ErrUsage, i+1)
		}
		fmt.Fprintf(stdout, "server %d: %s\n", i+1, spec)
	}
	m := measure{rate: *rate, duration: *duration, warmup: *warmup, findMax: *findMax, findMaxDur: *findMaxDur,
		maxP99: *maxP99, ready: *ready, stream: *stream, token: *token, users: *users, workers: *workers, log: stdout}
	results := make([][]runResult, len(servers))
	for round := range *rounds {
		for i := range servers {
			r, err := m.run(ctx, &servers[i])
			if err != nil {
				return fmt.Errorf("round %d, server %d: %w", round+1, i+1, err)
			}
			results[i] = append(results[i], r)
			fmt.Fprintf(stdout, "round %d  server %s  %s\n", round+1, servers[i].label, r)
		}
	}
	fmt.Fprintln(stdout, "medians:")
	for i := range servers {
		fmt.Fprintf(stdout, "server %s  %s\n", servers[i].label, median(results[i]))
	}
	if len(servers) > 1 {
		fmt.Fprintln(stdout, "ratios to server 1 in the same round (their median, then each round's):")
	}
	for i := 1; i < len(servers); i++ {
		fmt.Fprintf(stdout, "server %s  cpu %s  p99 %s", servers[i].label,
			roundRatios(results[i], results[0], func(r runResult) float64 { return r.cpu }),
			roundRatios(results[i], results[0], func(r runResult) float64 { return r.p99 }))
		if *findMax {
			fmt.Fprintf(stdout, "  max rate %s", roundRatios(results[i], results[0], func(r runResult) float64 { return float64(r.maxRate) }))
		}
		fmt.Fprintln(stdout)
	}
	return nil
}

// roundRatios formats the ratios of f of rs to f of base, round by round,
// after their median: "×0.43 (0.41 0.43 0.52)". A ratio of a figure not
// known is left out.
func roundRatios(rs, base []runResult, f func(runResult) float64) string {
	var all []float64
	var each []string
	for k := range rs {
		a, b := f(rs[k]), f(base[k])
		if a < 0 || b <= 0 {
			each = append(each, "?")
			continue
		}
		all = append(all, a/b)
		each = append(each, strconv.FormatFloat(a/b, 'f', 2, 64))
	}
	if len(all) == 0 {
		return "×? (" + strings.Join(each, " ") + ")"
	}
	return "×" + strconv.FormatFloat(medianRun(all, identity), 'f', 2, 64) + " (" + strings.Join(each, " ") + ")"
}

func identity(x float64) float64 { return x }

// maxServers bounds compare's SERVER arguments.
const maxServers = 8

// server is one command compare starts.
type server struct {
	label string
	argv  []string // with {addr} and {dir} in place of what each run gets
}

// measure is what compare does with each server, each round.
type measure struct {
	rate               int
	duration, warmup   time.Duration
	findMax            bool
	findMaxDur, maxP99 time.Duration
	ready              time.Duration
	stream, token      string
	users, workers     int
	log                io.Writer // --find-max's runs, as they come
}

// runResult is a server's figures in one round.
type runResult struct {
	cpu      float64 // µs of the server's CPU per request answered; -1: unknown
	p50, p99 float64 // ms, at the fixed rate
	errors   int64
	maxRate  int // --find-max: the highest sustained rate; 0 when not asked
}

func (r runResult) String() string {
	cpu := "cpu/req ?"
	if r.cpu >= 0 {
		cpu = fmt.Sprintf("cpu/req %4.0f µs", r.cpu)
	}
	s := fmt.Sprintf("%s  p50 %6.2f ms  p99 %7.2f ms  errors %d", cpu, r.p50, r.p99, r.errors)
	if r.maxRate > 0 {
		s += fmt.Sprintf("  max rate %d/s", r.maxRate)
	}
	return s
}

// median is the median of each figure of rs, taken apart.
func median(rs []runResult) runResult {
	mid := func(f func(runResult) float64) float64 {
		v := make([]float64, len(rs))
		for i, r := range rs {
			v[i] = f(r)
		}
		return medianRun(v, identity)
	}
	return runResult{cpu: mid(func(r runResult) float64 { return r.cpu }), p50: mid(func(r runResult) float64 { return r.p50 }),
		p99: mid(func(r runResult) float64 { return r.p99 }), errors: int64(mid(func(r runResult) float64 { return float64(r.errors) })),
		maxRate: int(mid(func(r runResult) float64 { return float64(r.maxRate) }))}
}

// run starts s, loads it and stops it.
func (m *measure) run(ctx context.Context, s *server) (runResult, error) {
	dir, err := os.MkdirTemp("", "vigil-bench-compare-")
	if err != nil {
		return runResult{}, err
	}
	defer os.RemoveAll(dir)
	addr, err := freeAddr()
	if err != nil {
		return runResult{}, err
	}
	argv := make([]string, len(s.argv))
	for i, a := range s.argv {
		argv[i] = strings.NewReplacer("{addr}", addr, "{dir}", filepath.Join(dir, "data")).Replace(a)
	}
	var out bytes.Buffer // the server's output, shown when it fails
	cmd := exec.Command(argv[0], argv[1:]...)
	cmd.Stdout, cmd.Stderr = &out, &out
	if err := cmd.Start(); err != nil {
		return runResult{}, err
	}
	exited := make(chan struct{}) // closed once the server has exited; then cmd.ProcessState holds how
	go func() {
		cmd.Wait()
		close(exited)
	}()
	stopped := false
	defer func() {
		if !stopped {
			cmd.Process.Kill()
			<-exited
		}
	}()
	failed := func(err error) (runResult, error) {
		return runResult{}, fmt.Errorf("%s: %w\n%s", strings.Join(argv, " "), err, lastLines(out.String(), 20))
	}
	url := "http://" + addr
	if err := waitReady(ctx, url, m.ready, exited, cmd); err != nil {
		return failed(err)
	}
	lt := newLoadtest(url, m.stream, m.token, m.users, m.workers)
	defer lt.client.CloseIdleConnections()
	if _, err := lt.run(ctx, m.rate, m.warmup); err != nil {
		return failed(err)
	}
	cpu0, cpuErr := processCPU(cmd.Process.Pid)
	res, err := lt.run(ctx, m.rate, m.duration)
	if err != nil {
		return failed(err)
	}
	cpu1, err := processCPU(cmd.Process.Pid)
	r := runResult{cpu: -1, p50: res.P50, p99: res.P99, errors: res.Errors}
	if cpuErr == nil && err == nil && res.OK > 0 && cpu1 > cpu0 { // no tick counted: too short a run to tell
		r.cpu = float64((cpu1 - cpu0).Microseconds()) / float64(res.OK)
	}
	if m.findMax {
		r.maxRate, err = highestSustained(ctx, m.rate, func(rate int) (bool, error) {
			res, err := lt.run(ctx, rate, m.findMaxDur)
			if err != nil {
				return false, err
			}
			fmt.Fprintf(m.log, "  find-max  rate %6d/s  errors %5d  p99 %7.2f ms\n", rate, res.Errors, res.P99)
			return res.sustains(m.maxP99), nil
		})
		if err != nil {
			return failed(err)
		}
	}
	if ctx.Err() != nil {
		return runResult{}, ctx.Err()
	}
	stopped = true
	cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-exited:
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		<-exited
		return failed(errors.New("still running a minute after SIGTERM"))
	}
	return r, nil
}

// waitReady polls GET /readyz until the server answers it with anything but
// 503 (a server without the route answers 404), the server exits, or wait
// passes.
func waitReady(ctx context.Context, url string, wait time.Duration, exited <-chan struct{}, cmd *exec.Cmd) error {
	deadline := time.Now().Add(wait)
	for {
		resp, err := http.Get(url + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode != http.StatusServiceUnavailable {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("not ready after %s (last: %v)", wait, cmp.Or(err, errors.New("503")))
		}
		select {
		case <-exited:
			return fmt.Errorf("exited before it was ready (%v)", cmd.ProcessState)
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// freeAddr returns a loopback address no one listens on now.
func freeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

// processCPU returns the user and system time process pid has used, from
// /proc/PID/stat (in clock ticks of 10 ms: Linux's USER_HZ is 100).
func processCPU(pid int) (time.Duration, error) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, err
	}
	return statCPU(b)
}

// statCPU reads utime and stime from the text of a /proc/PID/stat.
func statCPU(b []byte) (time.Duration, error) {
	// The fields after the command name, which is in parentheses and may
	// hold spaces: state is the 3rd field, utime the 14th, stime the 15th.
	i := bytes.LastIndexByte(b, ')')
	if i < 0 {
		return 0, errors.New("unexpected /proc stat format")
	}
	f := strings.Fields(string(b[i+1:]))
	if len(f) < 13 {
		return 0, errors.New("unexpected /proc stat format")
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return 0, err
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, nil
}

// lastLines returns the last n lines of s.
func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
