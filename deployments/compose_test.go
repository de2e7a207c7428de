package deployments

import (
	"bytes"
	"context"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/compose-spec/compose-go/v2/cli"
	"github.com/compose-spec/compose-go/v2/types"
	"go.yaml.in/yaml/v3"
)

const composeDir = "compose"

// loadCompose loads compose.yaml with compose-go, the loader of docker
// compose itself: schema validation, interpolation ($$ → $), env_file
// resolution, consistency (depends_on, volumes). The caller's environment is
// not used.
func loadCompose(t *testing.T) *types.Project {
	t.Helper()
	opts, err := cli.NewProjectOptions([]string{filepath.Join(composeDir, "compose.yaml")},
		cli.WithWorkingDirectory(composeDir), cli.WithResolvedPaths(true), cli.WithEnv([]string{}))
	if err != nil {
		t.Fatal(err)
	}
	p, err := opts.LoadProject(context.Background())
	if err != nil {
		t.Fatalf("compose.yaml: %v", err)
	}
	return p
}

func service(t *testing.T, p *types.Project, name string) types.ServiceConfig {
	t.Helper()
	s, ok := p.Services[name]
	if !ok {
		t.Fatalf("compose.yaml: no service %q", name)
	}
	return s
}

// flagValue returns the value of --name in args ("--name v" or "--name=v").
func flagValue(args []string, name string) (string, bool) {
	for i, a := range args {
		switch {
		case a == "--"+name || a == "-"+name:
			if i+1 < len(args) {
				return args[i+1], true
			}
		case strings.HasPrefix(a, "--"+name+"="), strings.HasPrefix(a, "-"+name+"="):
			_, v, _ := strings.Cut(a, "=")
			return v, true
		}
	}
	return "", false
}

func environment(s types.ServiceConfig) map[string]string {
	env := map[string]string{}
	for k, v := range s.Environment {
		if v != nil {
			env[k] = *v
		}
	}
	return env
}

func TestCompose(t *testing.T) {
	p := loadCompose(t)
	for _, name := range []string{"kafka", "kafka-init", "redis", "vigil", "producer", "prometheus", "grafana"} {
		service(t, p, name)
	}
	kafka, vigil := service(t, p, "kafka"), service(t, p, "vigil")

	// Kafka in KRaft mode, one node: broker and controller.
	kenv := environment(kafka)
	if roles := kenv["KAFKA_PROCESS_ROLES"]; !strings.Contains(roles, "broker") || !strings.Contains(roles, "controller") {
		t.Errorf("kafka: KAFKA_PROCESS_ROLES=%q, want broker,controller (KRaft)", roles)
	}
	if !strings.HasPrefix(kafka.Image, "apache/kafka:") {
		t.Errorf("kafka: image %s", kafka.Image)
	}

	// Vigil: built from the Dockerfile, from the repository root.
	abs := func(p string) string { a, _ := filepath.Abs(p); return a }
	if vigil.Build == nil || vigil.Build.Context != abs(repoRoot) ||
		filepath.Join(vigil.Build.Context, vigil.Build.Dockerfile) != abs(dockerfilePath) {
		t.Errorf("vigil: build %+v, want context the repository root and %s", vigil.Build, dockerfilePath)
	}
	args := []string(vigil.Command)
	env := environment(vigil)
	checkFlagsAndEnv(t, "compose service vigil", args, env)
	vigilEnv := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "VIGIL_") {
			vigilEnv[k] = v
		}
	}
	checkServeAccepts(t, "compose service vigil", args, vigilEnv)
	checkAPIKeys(t, "compose service vigil", env["VIGIL_API_KEYS"])

	// --brokers names the kafka service at an address it advertises.
	brokers, ok := flagValue(args, "brokers")
	if !ok {
		t.Error("vigil: no --brokers: it would start its embedded broker")
	}
	for _, b := range strings.Split(brokers, ",") {
		host, _, err := net.SplitHostPort(b)
		if _, isService := p.Services[host]; err != nil || !isService {
			t.Errorf("vigil: --brokers %s is no service of the compose file", b)
		}
		if !strings.Contains(kenv["KAFKA_ADVERTISED_LISTENERS"], "//"+b) {
			t.Errorf("vigil: --brokers %s is not among kafka's advertised listeners %s", b, kenv["KAFKA_ADVERTISED_LISTENERS"])
		}
	}
	if r, ok := flagValue(args, "redis"); ok {
		if host, _, err := net.SplitHostPort(r); err != nil || p.Services[host].Name == "" {
			t.Errorf("vigil: --redis %s is no service of the compose file", r)
		}
	}
	// The API port is published, and it is the one Prometheus scrapes.
	httpAddr, _ := flagValue(args, "http")
	_, httpPort, err := net.SplitHostPort(httpAddr)
	if err != nil || !strings.HasPrefix(httpAddr, "0.0.0.0:") {
		t.Errorf("vigil: --http %q: want 0.0.0.0:PORT in a container", httpAddr)
	}
	if !slices.ContainsFunc(vigil.Ports, func(pc types.ServicePortConfig) bool { return strconv.Itoa(int(pc.Target)) == httpPort }) {
		t.Errorf("vigil: the API port %s is not published (%v)", httpPort, vigil.Ports)
	}
	// Partitions: Vigil's, the input topics' and Kafka's default agree
	// (every input topic must have the same count).
	partitions, _ := flagValue(args, "partitions")
	if partitions == "" {
		partitions = "4"
	}
	if kenv["KAFKA_NUM_PARTITIONS"] != partitions {
		t.Errorf("KAFKA_NUM_PARTITIONS=%s, vigil --partitions %s", kenv["KAFKA_NUM_PARTITIONS"], partitions)
	}
	initScript := strings.Join(service(t, p, "kafka-init").Command, " ")
	if !strings.Contains(initScript, "--partitions "+partitions) {
		t.Errorf("kafka-init does not create the topics with %s partitions:\n%s", partitions, initScript)
	}
	for dep, cond := range map[string]string{"kafka": "service_healthy", "kafka-init": "service_completed_successfully"} {
		if vigil.DependsOn[dep].Condition != cond {
			t.Errorf("vigil: depends_on %s: condition %q, want %s", dep, vigil.DependsOn[dep].Condition, cond)
		}
	}
	// GOMEMLIMIT under the container's memory limit.
	if gml, ok := env["GOMEMLIMIT"]; ok {
		n, err := parseGoMemLimit(gml)
		if ratio := float64(n) / float64(vigil.MemLimit); err != nil || vigil.MemLimit == 0 || ratio < 0.8 || ratio > 0.96 {
			t.Errorf("vigil: GOMEMLIMIT=%s with mem_limit %d: want 80-96%% of it (%v)", gml, vigil.MemLimit, err)
		}
	}

	// The producer: built from the Dockerfile's producer stage; its vigil gen
	// flags exist and it writes to the broker Vigil reads.
	producer := service(t, p, "producer")
	if producer.Build == nil || !slices.Contains(dockerStageNames(t), producer.Build.Target) {
		t.Errorf("producer: build target %v is no stage of %s", producer.Build, dockerfilePath)
	}
	script := strings.Join(producer.Command, "\n")
	genFlags := commandFlags(t, "gen")
	for _, call := range regexp.MustCompile(`vigil gen ([^|\n]*)`).FindAllStringSubmatch(script, -1) {
		for _, f := range flagNames(strings.Fields(call[1])) {
			if !genFlags[f] {
				t.Errorf("producer: vigil gen has no flag --%s", f)
			}
		}
	}
	if !strings.Contains(script, "-b "+brokers) {
		t.Errorf("producer: kcat does not write to %s:\n%s", brokers, script)
	}

	checkPrometheus(t, p, "vigil:"+httpPort)
	checkGrafana(t, p)
}

// bindSource returns the host file mounted at target in service s.
func bindSource(t *testing.T, s types.ServiceConfig, target string) string {
	t.Helper()
	for _, v := range s.Volumes {
		if v.Target == target {
			if _, err := os.Stat(v.Source); err != nil {
				t.Errorf("%s: volume %s: %v", s.Name, target, err)
			}
			return v.Source
		}
	}
	t.Errorf("%s: nothing mounted at %s", s.Name, target)
	return ""
}

// prometheusConfig is the part of Prometheus' configuration the compose
// stack uses; an unknown field is an error.
type prometheusConfig struct {
	Global struct {
		ScrapeInterval     string `yaml:"scrape_interval"`
		EvaluationInterval string `yaml:"evaluation_interval"`
	} `yaml:"global"`
	ScrapeConfigs []struct {
		JobName       string `yaml:"job_name"`
		MetricsPath   string `yaml:"metrics_path"`
		StaticConfigs []struct {
			Targets []string `yaml:"targets"`
		} `yaml:"static_configs"`
	} `yaml:"scrape_configs"`
}

func checkPrometheus(t *testing.T, p *types.Project, target string) {
	t.Helper()
	prom := service(t, p, "prometheus")
	configPath := ""
	for _, a := range prom.Command {
		if v, ok := strings.CutPrefix(a, "--config.file="); ok {
			configPath = v
		}
	}
	src := bindSource(t, prom, configPath)
	if src == "" {
		return
	}
	var c prometheusConfig
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, src)))
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil {
		t.Fatalf("%s: %v", src, err)
	}
	found := false
	for _, sc := range c.ScrapeConfigs {
		for _, st := range sc.StaticConfigs {
			if slices.Contains(st.Targets, target) {
				found = true
				if sc.MetricsPath != "" && sc.MetricsPath != "/metrics" {
					t.Errorf("%s: job %s scrapes %s, Vigil serves /metrics", src, sc.JobName, sc.MetricsPath)
				}
			}
		}
	}
	if !found {
		t.Errorf("%s: no job scrapes %s", src, target)
	}
}

// grafanaDatasources and grafanaDashboards are Grafana's provisioning files;
// an unknown field is an error.
type grafanaDatasources struct {
	APIVersion  int `yaml:"apiVersion"`
	Datasources []struct {
		Name      string         `yaml:"name"`
		UID       string         `yaml:"uid"`
		Type      string         `yaml:"type"`
		Access    string         `yaml:"access"`
		URL       string         `yaml:"url"`
		IsDefault bool           `yaml:"isDefault"`
		Editable  bool           `yaml:"editable"`
		JSONData  map[string]any `yaml:"jsonData"`
	} `yaml:"datasources"`
}

type grafanaDashboards struct {
	APIVersion int `yaml:"apiVersion"`
	Providers  []struct {
		Name              string `yaml:"name"`
		Folder            string `yaml:"folder"`
		Type              string `yaml:"type"`
		DisableDeletion   bool   `yaml:"disableDeletion"`
		AllowUIUpdates    bool   `yaml:"allowUiUpdates"`
		UpdateIntervalSec int    `yaml:"updateIntervalSeconds"`
		Options           struct {
			Path string `yaml:"path"`
		} `yaml:"options"`
	} `yaml:"providers"`
}

func decodeKnown(t *testing.T, path string, v any) {
	t.Helper()
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, path)))
	dec.KnownFields(true)
	if err := dec.Decode(v); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
}

func checkGrafana(t *testing.T, p *types.Project) {
	t.Helper()
	g := service(t, p, "grafana")
	prov := bindSource(t, g, "/etc/grafana/provisioning")
	var ds grafanaDatasources
	decodeKnown(t, filepath.Join(prov, "datasources", "prometheus.yaml"), &ds)
	if len(ds.Datasources) != 1 || ds.Datasources[0].Type != "prometheus" {
		t.Fatalf("grafana: want one prometheus datasource, have %+v", ds.Datasources)
	}
	url := ds.Datasources[0].URL
	if host, _, err := net.SplitHostPort(strings.TrimPrefix(url, "http://")); err != nil || p.Services[host].Name == "" {
		t.Errorf("grafana datasource %s: no such service", url)
	}
	var dbs grafanaDashboards
	decodeKnown(t, filepath.Join(prov, "dashboards", "vigil.yaml"), &dbs)
	if len(dbs.Providers) != 1 {
		t.Fatalf("grafana: want one dashboard provider, have %d", len(dbs.Providers))
	}
	dir := bindSource(t, g, dbs.Providers[0].Options.Path)
	if dir != "" && dir != func() string { a, _ := filepath.Abs(filepath.Join(composeDir, "grafana", "dashboards")); return a }() {
		t.Errorf("grafana: the provider reads %s, which is not grafana/dashboards", dir)
	}
	if home := environment(g)["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]; home != "" {
		rel, err := filepath.Rel(dbs.Providers[0].Options.Path, home)
		if _, err2 := os.Stat(filepath.Join(dir, rel)); err != nil || err2 != nil {
			t.Errorf("grafana: home dashboard %s is not in the mounted dashboards", home)
		}
	}
	for _, panel := range loadDashboard(t).Panels {
		for _, target := range panel.Targets {
			for _, d := range []dashboardDatasource{panel.Datasource, target.Datasource} {
				if d.UID != ds.Datasources[0].UID {
					t.Errorf("dashboard panel %q: datasource uid %q, provisioned %q", panel.Title, d.UID, ds.Datasources[0].UID)
				}
			}
		}
	}
}
