package deployments

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	promql "github.com/prometheus/prometheus/promql/parser"

	"github.com/vigil-cep/vigil/telemetry"
)

const dashboardPath = "compose/grafana/dashboards/vigil.json"

type dashboardDatasource struct {
	Type string `json:"type"`
	UID  string `json:"uid"`
}

type dashboard struct {
	UID    string `json:"uid"`
	Title  string `json:"title"`
	Panels []struct {
		ID         int                 `json:"id"`
		Title      string              `json:"title"`
		Type       string              `json:"type"`
		Datasource dashboardDatasource `json:"datasource"`
		Targets    []struct {
			RefID        string              `json:"refId"`
			Expr         string              `json:"expr"`
			LegendFormat string              `json:"legendFormat"`
			Datasource   dashboardDatasource `json:"datasource"`
		} `json:"targets"`
	} `json:"panels"`
}

func loadDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal(readFile(t, dashboardPath), &d); err != nil {
		t.Fatalf("%s: %v", dashboardPath, err)
	}
	if d.UID == "" || len(d.Panels) == 0 {
		t.Fatalf("%s: no uid or no panels", dashboardPath)
	}
	return d
}

// grafanaVars are the Grafana variables the expressions use, replaced by a
// value PromQL parses.
var grafanaVars = strings.NewReplacer("$__rate_interval", "1m", "$__interval", "1m", "$__range", "1h")

// selector is one metric an expression reads, with the labels it groups or
// names in its legend by.
type selector struct {
	panel, name string
	labels      []string
}

// dashboardSelectors parses every expression of the dashboard with the
// PromQL parser and returns the metrics they read, each with the labels
// that aggregations over it group by and that the legend names.
func dashboardSelectors(t *testing.T) []selector {
	t.Helper()
	var sels []selector
	seenIDs := map[int]bool{}
	for _, panel := range loadDashboard(t).Panels {
		if seenIDs[panel.ID] {
			t.Errorf("panel id %d used twice", panel.ID)
		}
		seenIDs[panel.ID] = true
		if len(panel.Targets) == 0 {
			t.Errorf("panel %q: no query", panel.Title)
		}
		for _, target := range panel.Targets {
			expr, err := promql.NewParser(promql.Options{}).ParseExpr(grafanaVars.Replace(target.Expr))
			if err != nil {
				t.Errorf("panel %q: %s: %v", panel.Title, target.Expr, err)
				continue
			}
			var grouping []string
			promql.Inspect(expr, func(n promql.Node, _ []promql.Node) error {
				if a, ok := n.(*promql.AggregateExpr); ok && !a.Without {
					grouping = append(grouping, a.Grouping...)
				}
				return nil
			})
			for _, m := range regexp.MustCompile(`\{\{\s*(\w+)\s*\}\}`).FindAllStringSubmatch(target.LegendFormat, -1) {
				if !slices.Contains(grouping, m[1]) {
					t.Errorf("panel %q: legend {{%s}} is no label of the result (by %v)", panel.Title, m[1], grouping)
				}
			}
			promql.Inspect(expr, func(n promql.Node, _ []promql.Node) error {
				if vs, ok := n.(*promql.VectorSelector); ok {
					name := vs.Name
					if name == "" {
						t.Errorf("panel %q: %s: a selector without a metric name", panel.Title, target.Expr)
					}
					var ls []string
					for _, l := range grouping {
						if l != "le" || !strings.HasSuffix(name, "_bucket") {
							ls = append(ls, l)
						}
					}
					sels = append(sels, selector{panel: panel.Title, name: name, labels: ls})
				}
				return nil
			})
		}
	}
	return sels
}

// family returns the metric family of a series name: a histogram's _bucket,
// _sum and _count series belong to the family without the suffix.
func family(name string) string {
	for _, suffix := range []string{"_bucket", "_sum", "_count"} {
		if f, ok := strings.CutSuffix(name, suffix); ok && slices.Contains(telemetry.MetricNames, f) {
			return f
		}
	}
	return name
}

// TestDashboard: every expression parses as PromQL; every metric is one of
// telemetry.MetricNames and every label it groups by is one of its labels;
// the panels the README promises are there.
func TestDashboard(t *testing.T) {
	sels := dashboardSelectors(t)
	labels := telemetry.MetricLabels()
	read := map[string]bool{}
	for _, s := range sels {
		f := family(s.name)
		read[f] = true
		if !slices.Contains(telemetry.MetricNames, f) {
			t.Errorf("panel %q: %s is not a Vigil metric (telemetry.MetricNames)", s.panel, s.name)
			continue
		}
		for _, l := range s.labels {
			if !slices.Contains(labels[f], l) {
				t.Errorf("panel %q: %s has no label %q (it has %v)", s.panel, f, l, labels[f])
			}
		}
	}
	for _, want := range []string{
		telemetry.NameRecordsIn, telemetry.NameEventTimeLag, telemetry.NameConsumerLag,
		telemetry.NameCheckpointDuration, telemetry.NameDecisionLatency, telemetry.NameRuleHits, telemetry.NameDLQ,
	} {
		if !read[want] {
			t.Errorf("no panel shows %s", want)
		}
	}
}

// TestDashboardMetricsLive runs vigil serve on its embedded broker, feeds it
// with the compose producer's own script (one round, kcat and vigil gen as
// in the container) and one unreadable record, and requires every series the
// dashboard reads to appear in /metrics, with the labels it groups by.
func TestDashboardMetricsLive(t *testing.T) {
	if testing.Short() {
		t.Skip("starts vigil serve")
	}
	if _, err := exec.LookPath("kcat"); err != nil {
		t.Fatal("kcat is not installed: ./scripts/test installs it (apt-get install kafkacat)")
	}
	vigilBinary(t)
	in := startVigil(t, "--checkpoint-interval", "1s", "--partitions", "4")

	runProducerRound(t, in.broker)
	bad := exec.Command("kcat", "-P", "-b", in.broker, "-t", "transactions", "-K", "\t")
	bad.Stdin = strings.NewReader("u1\tthis is not JSON\n")
	if out, err := bad.CombinedOutput(); err != nil {
		t.Fatalf("kcat: %v\n%s", err, out)
	}

	sels := dashboardSelectors(t)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	var missing []string
	for {
		code, body, err := in.get(ctx, "/metrics")
		if err == nil && code == 200 {
			series, err := parseMetrics(body)
			if err != nil {
				t.Fatalf("/metrics: %v", err)
			}
			missing = missing[:0]
			for _, s := range sels {
				have, ok := series[s.name]
				if !ok {
					missing = append(missing, s.name)
					continue
				}
				for _, l := range s.labels {
					if !have[l] {
						missing = append(missing, fmt.Sprintf("%s{%s}", s.name, l))
					}
				}
			}
			if len(missing) == 0 {
				return
			}
		}
		select {
		case <-ctx.Done():
			t.Fatalf("/metrics of a running vigil lacks what the dashboard reads: %v\nlast error: %v\nvigil's log:\n%s",
				missing, err, in.stderr)
		case <-time.After(500 * time.Millisecond): // the next scrape
		}
	}
}

// parseMetrics reads the Prometheus text format into series name → the
// label names seen on it.
func parseMetrics(body string) (map[string]map[string]bool, error) {
	parser := expfmt.NewTextParser(model.UTF8Validation)
	families, err := parser.TextToMetricFamilies(strings.NewReader(body))
	if err != nil {
		return nil, err
	}
	series := map[string]map[string]bool{}
	add := func(name string, labels map[string]bool) {
		if series[name] == nil {
			series[name] = map[string]bool{}
		}
		for l := range labels {
			series[name][l] = true
		}
	}
	for name, f := range families {
		for _, m := range f.GetMetric() {
			labels := map[string]bool{}
			for _, lp := range m.GetLabel() {
				labels[lp.GetName()] = true
			}
			if m.GetHistogram() != nil {
				add(name+"_sum", labels)
				add(name+"_count", labels)
				labels["le"] = true
				add(name+"_bucket", labels)
				continue
			}
			add(name, labels)
		}
	}
	return series, nil
}

// runProducerRound runs the compose producer's script against broker for
// one round: kafka:9092 becomes broker, vigil is the binary under test, and
// a stand-in sleep ends the loop after the first round with status 77.
func runProducerRound(t *testing.T, broker string) {
	t.Helper()
	p := loadCompose(t)
	script := strings.Join(service(t, p, "producer").Command, "\n")
	brokers, _ := flagValue(service(t, p, "vigil").Command, "brokers")
	if !strings.Contains(script, brokers) {
		t.Fatalf("the producer script does not name %s:\n%s", brokers, script)
	}
	script = strings.ReplaceAll(script, brokers, broker)
	stub := t.TempDir()
	if err := os.WriteFile(filepath.Join(stub, "sleep"), []byte("#!/bin/sh\nexit 77\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command("/bin/sh", "-c", script)
	cmd.Env = []string{"PATH=" + stub + string(os.PathListSeparator) + binDir + string(os.PathListSeparator) + os.Getenv("PATH")}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	cmd.Run()
	if code := cmd.ProcessState.ExitCode(); code != 77 || !strings.Contains(stdout.String(), "round 1:") {
		t.Fatalf("the producer script did not finish a round: exit %d\nstdout:\n%s\nstderr:\n%s", code, stdout.String(), stderr.String())
	}
}
