package engine

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-cmp/cmp"

	"github.com/vigil-cep/vigil/rules"
)

var update = flag.Bool("update", false, "rewrite the golden files of testdata/replay")

// TestReplayGolden runs every testdata/replay/<case>: rules.yaml over
// events.ndjson must give exactly want.ndjson. Review diffs of want.ndjson as
// code: they are the semantics.
func TestReplayGolden(t *testing.T) {
	dirs, err := filepath.Glob("testdata/replay/*")
	if err != nil || len(dirs) == 0 {
		t.Fatalf("no golden cases: %v", err)
	}
	for _, dir := range dirs {
		t.Run(filepath.Base(dir), func(t *testing.T) {
			got := replayFile(t, filepath.Join(dir, "rules.yaml"), filepath.Join(dir, "events.ndjson"), ReplayConfig{})
			golden := filepath.Join(dir, "want.ndjson")
			if *update {
				if err := os.WriteFile(golden, got, 0o644); err != nil {
					t.Fatal(err)
				}
				return
			}
			want, err := os.ReadFile(golden)
			if err != nil {
				t.Fatalf("%v (run go test ./engine -run TestReplayGolden -update to create it)", err)
			}
			if diff := cmp.Diff(strings.Split(string(want), "\n"), strings.Split(string(got), "\n")); diff != "" {
				t.Errorf("replay output differs from %s (-want +got):\n%s", golden, diff)
			}
		})
	}
}

func loadRuleset(t testing.TB, path string) *rules.Ruleset {
	t.Helper()
	src, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	rs, err := rules.Load(src)
	if err != nil {
		t.Fatalf("load %s: %v", path, err)
	}
	return rs
}

func replayFile(t testing.TB, rulesPath, eventsPath string, cfg ReplayConfig) []byte {
	t.Helper()
	rs := loadRuleset(t, rulesPath)
	in, err := os.Open(eventsPath)
	if err != nil {
		t.Fatal(err)
	}
	defer in.Close()
	var out bytes.Buffer
	if _, err := Replay(context.Background(), rs, in, &out, cfg); err != nil {
		t.Fatalf("replay: %v", err)
	}
	return out.Bytes()
}
