package deployments

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"
)

// artifacts returns every YAML and JSON file under deployments/.
func artifacts(t *testing.T) []string {
	t.Helper()
	var files []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		switch filepath.Ext(path) {
		case ".yaml", ".yml", ".json":
			files = append(files, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// TestArtifactsParse parses every YAML and JSON file under deployments/, the
// YAML documents embedded in ConfigMaps and the env files too. Duplicate
// keys are errors (YAML would silently keep one).
func TestArtifactsParse(t *testing.T) {
	files := artifacts(t)
	for _, want := range []string{
		"compose/compose.yaml", "compose/prometheus.yml", "compose/grafana/dashboards/vigil.json",
		"compose/grafana/provisioning/datasources/prometheus.yaml",
		"compose/grafana/provisioning/dashboards/vigil.yaml",
		"k8s/kustomization.yaml", "k8s/statefulset.yaml", "k8s/service.yaml", "k8s/configmap.yaml",
		"k8s/secret.yaml", "k8s/pdb.yaml",
	} {
		found := false
		for _, f := range files {
			found = found || filepath.ToSlash(f) == want
		}
		if !found {
			t.Errorf("%s is missing", want)
		}
	}
	for _, f := range files {
		src := readFile(t, f)
		if filepath.Ext(f) == ".json" {
			if err := parseJSON(src); err != nil {
				t.Errorf("%s: %v", f, err)
			}
			continue
		}
		docs, err := parseYAML(src)
		if err != nil {
			t.Errorf("%s: %v", f, err)
			continue
		}
		if len(docs) == 0 {
			t.Errorf("%s: no YAML document", f)
		}
		for _, d := range docs {
			// A ConfigMap's data holds files: YAML ones must parse too.
			m, _ := d.(map[string]any)
			if m["kind"] != "ConfigMap" {
				continue
			}
			data, _ := m["data"].(map[string]any)
			for name, v := range data {
				if ext := filepath.Ext(name); ext == ".yaml" || ext == ".yml" || ext == ".json" {
					if _, err := parseYAML([]byte(v.(string))); err != nil {
						t.Errorf("%s: data %s: %v", f, name, err)
					}
				}
			}
		}
	}
}

// parseYAML decodes every document of src.
func parseYAML(src []byte) ([]any, error) {
	dec := yaml.NewDecoder(bytes.NewReader(src))
	var docs []any
	for {
		var v any
		err := dec.Decode(&v)
		if errors.Is(err, io.EOF) {
			return docs, nil
		}
		if err != nil {
			return nil, err
		}
		docs = append(docs, v)
	}
}

// parseJSON decodes src, which must be one JSON value.
func parseJSON(src []byte) error {
	dec := json.NewDecoder(bytes.NewReader(src))
	var v any
	if err := dec.Decode(&v); err != nil {
		return err
	}
	if dec.More() {
		return errors.New("more than one JSON value")
	}
	return nil
}

func TestParseYAMLRejectsDuplicateKeys(t *testing.T) {
	if _, err := parseYAML([]byte("a: 1\na: 2\n")); err == nil || !strings.Contains(err.Error(), "already defined") {
		t.Errorf("duplicate key: %v", err)
	}
}
