package deployments

import (
	"bufio"
	"bytes"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	policyv1 "k8s.io/api/policy/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	sigsyaml "sigs.k8s.io/yaml"
)

const k8sDir = "k8s"

// manifests holds the decoded objects of deployments/k8s.
type manifests struct {
	statefulSets []*appsv1.StatefulSet
	services     []*corev1.Service
	configMaps   []*corev1.ConfigMap
	secrets      []*corev1.Secret
	pdbs         []*policyv1.PodDisruptionBudget
}

// decodeStrict decodes one YAML document into obj, refusing unknown and
// duplicate fields (sigs.k8s.io/yaml: YAML → JSON, then a strict decode into
// the API type), as `kubectl apply --validate=strict` would.
func decodeStrict(doc []byte, obj any) error {
	return sigsyaml.UnmarshalStrict(doc, obj)
}

// loadManifests decodes every document of the files the kustomization lists
// into the Kubernetes API types, by apiVersion and kind.
func loadManifests(t *testing.T) *manifests {
	t.Helper()
	var m manifests
	for _, file := range kustomization(t).Resources {
		path := filepath.Join(k8sDir, file)
		r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(readFile(t, path))))
		for i := 1; ; i++ {
			doc, err := r.Read()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if len(bytes.TrimSpace(stripComments(doc))) == 0 {
				continue
			}
			if err := m.add(doc); err != nil {
				t.Errorf("%s, document %d: %v", path, i, err)
			}
		}
	}
	return &m
}

func (m *manifests) add(doc []byte) error {
	var tm metav1.TypeMeta
	if err := sigsyaml.Unmarshal(doc, &tm); err != nil {
		return err
	}
	var obj any
	switch tm.APIVersion + " " + tm.Kind {
	case "apps/v1 StatefulSet":
		o := new(appsv1.StatefulSet)
		m.statefulSets, obj = append(m.statefulSets, o), o
	case "v1 Service":
		o := new(corev1.Service)
		m.services, obj = append(m.services, o), o
	case "v1 ConfigMap":
		o := new(corev1.ConfigMap)
		m.configMaps, obj = append(m.configMaps, o), o
	case "v1 Secret":
		o := new(corev1.Secret)
		m.secrets, obj = append(m.secrets, o), o
	case "policy/v1 PodDisruptionBudget":
		o := new(policyv1.PodDisruptionBudget)
		m.pdbs, obj = append(m.pdbs, o), o
	default:
		return fmt.Errorf("unexpected object %q %q", tm.APIVersion, tm.Kind)
	}
	return decodeStrict(doc, obj)
}

func stripComments(doc []byte) []byte {
	var b bytes.Buffer
	for _, line := range strings.Split(string(doc), "\n") {
		if !strings.HasPrefix(strings.TrimSpace(line), "#") {
			b.WriteString(line + "\n")
		}
	}
	return b.Bytes()
}

// kustomizationFile is the part of kustomize's Kustomization these
// manifests use; an unknown field is an error.
type kustomizationFile struct {
	APIVersion string   `yaml:"apiVersion"`
	Kind       string   `yaml:"kind"`
	Resources  []string `yaml:"resources"`
	Labels     []struct {
		Pairs            map[string]string `yaml:"pairs"`
		IncludeSelectors bool              `yaml:"includeSelectors"`
	} `yaml:"labels"`
	Images []struct {
		Name    string `yaml:"name"`
		NewName string `yaml:"newName"`
		NewTag  string `yaml:"newTag"`
	} `yaml:"images"`
}

func kustomization(t *testing.T) kustomizationFile {
	t.Helper()
	var k kustomizationFile
	dec := yaml.NewDecoder(bytes.NewReader(readFile(t, filepath.Join(k8sDir, "kustomization.yaml"))))
	dec.KnownFields(true)
	if err := dec.Decode(&k); err != nil {
		t.Fatalf("kustomization.yaml: %v", err)
	}
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Fatalf("kustomization.yaml: %s %s", k.APIVersion, k.Kind)
	}
	return k
}

// TestKubernetesKustomization: the kustomization lists every manifest of
// the directory, once, and nothing else.
func TestKubernetesKustomization(t *testing.T) {
	k := kustomization(t)
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, f := range files {
		if filepath.Base(f) != "kustomization.yaml" {
			want = append(want, filepath.Base(f))
		}
	}
	got := slices.Clone(k.Resources)
	slices.Sort(got)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		t.Errorf("kustomization resources %v, want the manifests %v", got, want)
	}
	for _, l := range k.Labels {
		if l.IncludeSelectors {
			t.Error("kustomization labels with includeSelectors change the StatefulSet's immutable selector")
		}
	}
}

// TestKubernetesStrictDecoding: the decoding refuses what the API server
// would refuse, so that the manifests' own success means something.
func TestKubernetesStrictDecoding(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: apps/v1\nkind: StatefulSet\nspec:\n  replica: 3\n",
		"apiVersion: apps/v1\nkind: StatefulSet\nspec:\n  replicas: three\n",
		"apiVersion: v1\nkind: Service\nspec:\n  clusterIP: None\n  clusterIP: None\n",
		"apiVersion: v1\nkind: Pod\n",
	} {
		if err := new(manifests).add([]byte(doc)); err == nil {
			t.Errorf("accepted:\n%s", doc)
		}
	}
}

// TestKubernetesManifests decodes every manifest into the API types with
// unknown fields rejected, then checks that the objects fit together and
// that vigil accepts what the StatefulSet gives it.
func TestKubernetesManifests(t *testing.T) {
	m := loadManifests(t)
	if len(m.statefulSets) != 1 || len(m.configMaps) != 1 || len(m.secrets) != 1 || len(m.pdbs) != 1 || len(m.services) != 2 {
		t.Fatalf("want 1 StatefulSet, 1 ConfigMap, 1 Secret, 1 PodDisruptionBudget and 2 Services; have %d, %d, %d, %d, %d",
			len(m.statefulSets), len(m.configMaps), len(m.secrets), len(m.pdbs), len(m.services))
	}
	sts, cm, secret, pdb := m.statefulSets[0], m.configMaps[0], m.secrets[0], m.pdbs[0]
	spec := &sts.Spec
	pod := &spec.Template.Spec
	podLabels := labels.Set(spec.Template.Labels)

	sel, err := metav1.LabelSelectorAsSelector(spec.Selector)
	if err != nil || sel.Empty() || !sel.Matches(podLabels) {
		t.Errorf("StatefulSet selector %v does not select its pods %v (%v)", spec.Selector, podLabels, err)
	}
	if spec.Replicas == nil || *spec.Replicas < 1 {
		t.Error("StatefulSet: set replicas")
	}

	// Services: a headless one named by serviceName, one for the API; both
	// select the pods and reach the container's http port.
	var headless, apiSvc *corev1.Service
	for _, s := range m.services {
		if !labels.SelectorFromSet(s.Spec.Selector).Matches(podLabels) || len(s.Spec.Selector) == 0 {
			t.Errorf("Service %s: selector %v does not select the pods %v", s.Name, s.Spec.Selector, podLabels)
		}
		if s.Spec.ClusterIP == corev1.ClusterIPNone {
			headless = s
		} else {
			apiSvc = s
		}
	}
	if headless == nil || headless.Name != spec.ServiceName {
		t.Errorf("StatefulSet serviceName %q: want a headless Service (clusterIP: None) of that name", spec.ServiceName)
	}
	if apiSvc == nil {
		t.Error("no Service for the API")
	}

	if len(pod.Containers) != 1 {
		t.Fatalf("want one container, have %d", len(pod.Containers))
	}
	c := &pod.Containers[0]
	ports := map[string]int32{}
	for _, p := range c.Ports {
		ports[p.Name] = p.ContainerPort
	}
	for _, s := range m.services {
		for _, p := range s.Spec.Ports {
			if _, ok := ports[p.TargetPort.String()]; !ok && p.TargetPort.IntVal != ports["http"] {
				t.Errorf("Service %s port %s: target %s is no container port %v", s.Name, p.Name, p.TargetPort.String(), ports)
			}
		}
	}

	// PodDisruptionBudget: selects the pods, lets at most one go at a time.
	pdbSel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
	if err != nil || pdbSel.Empty() || !pdbSel.Matches(podLabels) {
		t.Errorf("PodDisruptionBudget selector %v does not select the pods (%v)", pdb.Spec.Selector, err)
	}
	if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.IntValue() != 1 {
		t.Errorf("PodDisruptionBudget maxUnavailable %v, want 1", pdb.Spec.MaxUnavailable)
	}

	// Probes: liveness on /healthz, readiness on /readyz, on the http port.
	for name, probe := range map[string]*corev1.Probe{"liveness": c.LivenessProbe, "readiness": c.ReadinessProbe, "startup": c.StartupProbe} {
		want := map[string]string{"liveness": "/healthz", "readiness": "/readyz", "startup": "/healthz"}[name]
		if probe == nil || probe.HTTPGet == nil || probe.HTTPGet.Path != want {
			t.Errorf("%s probe: want an HTTP GET of %s", name, want)
			continue
		}
		if _, ok := ports[probe.HTTPGet.Port.String()]; !ok {
			t.Errorf("%s probe: port %s is no container port", name, probe.HTTPGet.Port.String())
		}
	}

	// Resources: requests and limits of CPU and memory.
	for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
		if _, ok := c.Resources.Requests[r]; !ok {
			t.Errorf("resources: no %s request", r)
		}
		if _, ok := c.Resources.Limits[r]; !ok {
			t.Errorf("resources: no %s limit", r)
		}
	}

	// Volumes: every mount is a pod volume or a claim template; the claim
	// holds the data directory.
	volumes := map[string]*corev1.Volume{}
	for i := range pod.Volumes {
		volumes[pod.Volumes[i].Name] = &pod.Volumes[i]
	}
	claims := map[string]bool{}
	for _, vct := range spec.VolumeClaimTemplates {
		claims[vct.Name] = true
		if _, ok := vct.Spec.Resources.Requests[corev1.ResourceStorage]; !ok {
			t.Errorf("volumeClaimTemplate %s: no storage request", vct.Name)
		}
	}
	mounts := map[string]string{} // path → volume
	for _, vm := range c.VolumeMounts {
		mounts[vm.MountPath] = vm.Name
		if volumes[vm.Name] == nil && !claims[vm.Name] {
			t.Errorf("volumeMount %s: no volume or claim template of that name", vm.Name)
		}
	}

	// The config file and the ruleset come from the ConfigMap.
	config := configFromMount(t, c, volumes, cm)
	configPath := filepath.Join(t.TempDir(), "vigil.yaml")
	if err := os.WriteFile(configPath, []byte(config.src), 0o644); err != nil {
		t.Fatal(err)
	}
	if dataDir := config.values["data-dir"]; !claims[mounts[dataDir]] {
		t.Errorf("the data directory %q is not on a volumeClaimTemplate (mounts %v)", dataDir, mounts)
	}
	if rules := config.values["rules"]; rules != "" {
		src, ok := configMapFile(cm, volumes, c, rules)
		if !ok {
			t.Errorf("--rules %s: not a file of ConfigMap %s", rules, cm.Name)
		} else {
			validateRuleset(t, "ConfigMap "+cm.Name+" "+filepath.Base(rules), src)
		}
	}
	if shutdown, err := time.ParseDuration(config.values["shutdown-timeout"]); err == nil {
		if grace := pod.TerminationGracePeriodSeconds; grace == nil || time.Duration(*grace)*time.Second <= shutdown {
			t.Errorf("terminationGracePeriodSeconds must exceed --shutdown-timeout %s (the final checkpoint)", shutdown)
		}
	}

	// The environment, as the kubelet resolves it.
	env := resolveEnv(t, c, sts, secret)
	if env["VIGIL_INSTANCE_ID"] != sts.Name+"-0" {
		t.Errorf("VIGIL_INSTANCE_ID = %q for pod %s-0, want the pod name (downward API metadata.name)", env["VIGIL_INSTANCE_ID"], sts.Name)
	}
	checkGOMEMLIMIT(t, c, env)
	if _, ok := env["VIGIL_API_KEYS"]; !ok {
		t.Error("no VIGIL_API_KEYS from the Secret")
	}
	checkAPIKeys(t, "Secret "+secret.Name, env["VIGIL_API_KEYS"])

	// --checkpoints kafka, so that partitions can move between pods.
	args := slices.Clone(c.Args)
	if i := slices.Index(args, "--checkpoints"); i < 0 || i+1 >= len(args) || args[i+1] != "kafka" {
		if config.values["checkpoints"] != "kafka" {
			t.Errorf("args %v: want --checkpoints kafka", args)
		}
	}
	// Security: non-root, no privilege escalation.
	if psc := pod.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Error("pod securityContext: want runAsNonRoot")
	}

	// vigil serve reads exactly what the StatefulSet gives it.
	if i := slices.Index(args, "--config"); i >= 0 && i+1 < len(args) {
		args[i+1] = configPath
	} else {
		t.Errorf("args %v: want --config FILE from the ConfigMap", args)
	}
	vigilEnv := map[string]string{}
	for k, v := range env {
		if strings.HasPrefix(k, "VIGIL_") {
			vigilEnv[k] = v
		}
	}
	checkFlagsAndEnv(t, "StatefulSet "+sts.Name, args, vigilEnv)
	checkServeAccepts(t, "StatefulSet "+sts.Name, args, vigilEnv)
}

// configFile is the config file a container reads, with its values.
type configFile struct {
	src    string
	values map[string]string
}

// configFromMount finds the file the container's --config names in the
// ConfigMap mounted there, and checks its keys against vigil serve's flags.
func configFromMount(t *testing.T, c *corev1.Container, volumes map[string]*corev1.Volume, cm *corev1.ConfigMap) configFile {
	t.Helper()
	i := slices.Index(c.Args, "--config")
	if i < 0 || i+1 >= len(c.Args) {
		t.Fatalf("container args %v: no --config", c.Args)
	}
	src, ok := configMapFile(cm, volumes, c, c.Args[i+1])
	if !ok {
		t.Fatalf("--config %s is not a file of ConfigMap %s as mounted", c.Args[i+1], cm.Name)
	}
	var values map[string]string
	if err := yaml.Unmarshal([]byte(src), &values); err != nil {
		t.Fatalf("ConfigMap %s, config file: %v", cm.Name, err)
	}
	flags := serveFlags(t)
	for k := range values {
		if !flags[k] {
			t.Errorf("ConfigMap %s, config file: vigil serve has no flag --%s", cm.Name, k)
		}
	}
	return configFile{src: src, values: values}
}

// configMapFile returns the content of path in the container, when path is
// a key of the ConfigMap mounted at its directory.
func configMapFile(cm *corev1.ConfigMap, volumes map[string]*corev1.Volume, c *corev1.Container, path string) (string, bool) {
	for _, vm := range c.VolumeMounts {
		v := volumes[vm.Name]
		if v == nil || v.ConfigMap == nil || v.ConfigMap.Name != cm.Name || filepath.Dir(path) != filepath.Clean(vm.MountPath) {
			continue
		}
		src, ok := cm.Data[filepath.Base(path)]
		return src, ok
	}
	return "", false
}

var envRef = regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)

// resolveEnv computes the container's environment as the kubelet does for
// pod 0: fieldRef metadata.name, secretKeyRef, resourceFieldRef (value
// divided by the divisor, rounded up), and $(VAR) references to earlier
// variables.
func resolveEnv(t *testing.T, c *corev1.Container, sts *appsv1.StatefulSet, secret *corev1.Secret) map[string]string {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		var v string
		switch {
		case e.ValueFrom == nil:
			v = envRef.ReplaceAllStringFunc(e.Value, func(ref string) string {
				name := envRef.FindStringSubmatch(ref)[1]
				if val, ok := env[name]; ok {
					return val
				}
				t.Errorf("env %s: $(%s) is not defined before it", e.Name, name)
				return ref
			})
		case e.ValueFrom.FieldRef != nil:
			switch e.ValueFrom.FieldRef.FieldPath {
			case "metadata.name":
				v = sts.Name + "-0"
			case "metadata.namespace":
				v = "default"
			default:
				t.Errorf("env %s: fieldRef %s not emulated here", e.Name, e.ValueFrom.FieldRef.FieldPath)
			}
		case e.ValueFrom.SecretKeyRef != nil:
			ref := e.ValueFrom.SecretKeyRef
			s, ok := secret.StringData[ref.Key]
			if b, ok2 := secret.Data[ref.Key]; ok2 {
				s, ok = string(b), true
			}
			if ref.Name != secret.Name || !ok {
				if ref.Optional != nil && *ref.Optional {
					continue // the kubelet leaves the variable unset
				}
				t.Errorf("env %s: secretKeyRef %s/%s: no such Secret key", e.Name, ref.Name, ref.Key)
			}
			v = s
		case e.ValueFrom.ResourceFieldRef != nil:
			ref := e.ValueFrom.ResourceFieldRef
			if ref.ContainerName != "" && ref.ContainerName != c.Name {
				t.Errorf("env %s: resourceFieldRef of container %q", e.Name, ref.ContainerName)
			}
			v = resourceFieldValue(t, e.Name, c, ref)
		default:
			t.Errorf("env %s: valueFrom not emulated here", e.Name)
		}
		env[e.Name] = v
	}
	return env
}

// validMemoryDivisors are the divisors the API server accepts for a memory
// resourceFieldRef (k8s.io/kubernetes validation).
var validMemoryDivisors = []string{"1", "1k", "1M", "1G", "1T", "1P", "1E", "1Ki", "1Mi", "1Gi", "1Ti", "1Pi", "1Ei"}

func resourceFieldValue(t *testing.T, name string, c *corev1.Container, ref *corev1.ResourceFieldSelector) string {
	var q resource.Quantity
	var ok bool
	switch ref.Resource {
	case "limits.memory":
		q, ok = c.Resources.Limits[corev1.ResourceMemory]
	case "requests.memory":
		q, ok = c.Resources.Requests[corev1.ResourceMemory]
	default:
		t.Errorf("env %s: resourceFieldRef %s not emulated here", name, ref.Resource)
		return ""
	}
	if !ok {
		t.Errorf("env %s: %s is not set", name, ref.Resource)
		return ""
	}
	divisor := ref.Divisor
	if divisor.IsZero() {
		divisor = resource.MustParse("1")
	}
	valid := false
	for _, d := range validMemoryDivisors {
		valid = valid || divisor.Cmp(resource.MustParse(d)) == 0
	}
	if !valid {
		t.Errorf("env %s: divisor %s: the API server accepts only %v for memory", name, divisor.String(), validMemoryDivisors)
	}
	return strconv.FormatInt(int64(math.Ceil(float64(q.Value())/float64(divisor.Value()))), 10)
}

// checkGOMEMLIMIT: GOMEMLIMIT, as resolved, is a value the Go runtime
// accepts and a little under the memory limit.
func checkGOMEMLIMIT(t *testing.T, c *corev1.Container, env map[string]string) {
	t.Helper()
	v, ok := env["GOMEMLIMIT"]
	if !ok {
		t.Error("no GOMEMLIMIT")
		return
	}
	n, err := parseGoMemLimit(v)
	if err != nil {
		t.Errorf("GOMEMLIMIT=%s: %v", v, err)
		return
	}
	limit := c.Resources.Limits[corev1.ResourceMemory]
	if ratio := float64(n) / float64(limit.Value()); ratio < 0.85 || ratio > 0.96 {
		t.Errorf("GOMEMLIMIT=%s is %.1f%% of the memory limit %s: want 85-96%%", v, 100*ratio, limit.String())
	}
}

// parseGoMemLimit reads a byte count the way the Go runtime reads
// GOMEMLIMIT: digits and an optional suffix B, KiB, MiB, GiB or TiB.
func parseGoMemLimit(s string) (int64, error) {
	units := []struct {
		suffix string
		mult   int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}}
	mult := int64(1)
	for _, u := range units {
		if strings.HasSuffix(s, u.suffix) {
			s, mult = strings.TrimSuffix(s, u.suffix), u.mult
			break
		}
	}
	n, err := strconv.ParseInt(s, 10, 64)
	if err != nil || n < 0 || strings.HasPrefix(s, "+") {
		return 0, fmt.Errorf("not a byte count the Go runtime reads (digits and B, KiB, MiB, GiB or TiB)")
	}
	return n * mult, nil
}

func TestParseGoMemLimit(t *testing.T) {
	for s, want := range map[string]int64{"2048000000B": 2048000000, "900MiB": 900 << 20, "1GiB": 1 << 30, "123": 123} {
		if got, err := parseGoMemLimit(s); err != nil || got != want {
			t.Errorf("%s: %d, %v; want %d", s, got, err, want)
		}
	}
	for _, s := range []string{"2Gi", "1.5GiB", "2048M", "", "-1"} {
		if _, err := parseGoMemLimit(s); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
}
