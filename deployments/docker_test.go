package deployments

import (
	"bytes"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/moby/buildkit/frontend/dockerfile/instructions"
	"github.com/moby/buildkit/frontend/dockerfile/linter"
	"github.com/moby/buildkit/frontend/dockerfile/parser"
	"github.com/moby/patternmatcher"
	"github.com/moby/patternmatcher/ignorefile"
)

const dockerfilePath = "docker/Dockerfile"

// buildCommand is how the image, the README and a developer build vigil.
const buildCommand = "./scripts/build"

// parseDockerfile parses the Dockerfile with BuildKit's own parser into its
// stages, failing on syntax errors, unknown instructions or flags, and on
// the linter's warnings.
func parseDockerfile(t *testing.T) ([]instructions.Stage, []instructions.ArgCommand) {
	t.Helper()
	res, err := parser.Parse(bytes.NewReader(readFile(t, dockerfilePath)))
	if err != nil {
		t.Fatalf("%s: %v", dockerfilePath, err)
	}
	for _, w := range res.Warnings {
		t.Errorf("%s: %s", dockerfilePath, w.Short)
	}
	lint := linter.New(&linter.Config{Warn: func(rule, desc, url, msg string, loc []parser.Range) {
		t.Errorf("%s: line %v: %s: %s", dockerfilePath, loc, rule, msg)
	}})
	stages, args, err := instructions.Parse(res.AST, lint)
	if err != nil {
		t.Fatalf("%s: %v", dockerfilePath, err)
	}
	return stages, args
}

func dockerStageNames(t *testing.T) []string {
	stages, _ := parseDockerfile(t)
	var names []string
	for _, s := range stages {
		names = append(names, s.Name)
	}
	return names
}

func runLines(s instructions.Stage) []string {
	var lines []string
	for _, c := range s.Commands {
		if r, ok := c.(*instructions.RunCommand); ok {
			lines = append(lines, strings.Join(r.CmdLine, " "))
		}
	}
	return lines
}

// TestDockerfile: a multi-stage build whose builder runs scripts/build, a
// distroless non-root runtime with a health check on /healthz, the API port
// exposed, vigil serve as the entry point with default flags it accepts.
func TestDockerfile(t *testing.T) {
	stages, metaArgs := parseDockerfile(t)
	if len(stages) < 2 {
		t.Fatalf("%d stages: want a builder and a runtime", len(stages))
	}
	build, runtime := stages[0], stages[len(stages)-1]

	// The builder: the Go of go.mod, the build script.
	goVersion := ""
	for _, a := range metaArgs {
		for _, kv := range a.Args {
			if kv.Key == "GO_VERSION" && kv.Value != nil {
				goVersion = *kv.Value
			}
		}
	}
	mod := regexp.MustCompile(`(?m)^go (\d+\.\d+)`).FindStringSubmatch(string(readFile(t, filepath.Join(repoRoot, "go.mod"))))
	if build.BaseName != "golang:${GO_VERSION}" || mod == nil || goVersion != mod[1] {
		t.Errorf("builder FROM %s with GO_VERSION=%s: want golang:${GO_VERSION} with the go.mod version %v", build.BaseName, goVersion, mod)
	}
	runs := runLines(build)
	if !slices.Contains(runs, buildCommand+" /out/vigil") {
		t.Errorf("builder RUN lines %q: want %s /out/vigil", runs, buildCommand)
	}
	for _, s := range stages {
		for _, r := range runLines(s) {
			if strings.Contains(r, "go build") && strings.Contains(r, "cmd/vigil") {
				t.Errorf("stage %s builds vigil with its own command %q: use %s", s.Name, r, buildCommand)
			}
		}
	}
	if !slices.ContainsFunc(runs, func(r string) bool { return strings.Contains(r, "./docker/healthcheck") }) {
		t.Error("the builder does not build docker/healthcheck")
	}

	// The runtime: distroless, non-root, the two binaries, health check,
	// exposed port, entry point.
	if !strings.HasPrefix(runtime.BaseName, "gcr.io/distroless/static") {
		t.Errorf("runtime FROM %s: want a distroless static image", runtime.BaseName)
	}
	var user, healthcheck string
	var entrypoint, cmd []string
	var exposed []string
	copied := map[string]bool{}
	for _, c := range runtime.Commands {
		switch c := c.(type) {
		case *instructions.UserCommand:
			user = c.User
		case *instructions.HealthCheckCommand:
			healthcheck = strings.Join(c.Health.Test, " ")
		case *instructions.EntrypointCommand:
			entrypoint = c.CmdLine
		case *instructions.CmdCommand:
			cmd = c.CmdLine
		case *instructions.ExposeCommand:
			exposed = append(exposed, c.Ports...)
		case *instructions.CopyCommand:
			for _, src := range c.SourcePaths {
				copied[filepath.Join(c.DestPath, filepath.Base(src))] = c.From == build.Name
			}
		}
	}
	if u, _, _ := strings.Cut(user, ":"); u == "" || u == "root" || u == "0" {
		t.Errorf("runtime USER %q: want a non-root user", user)
	}
	if !copied["/usr/local/bin/vigil"] || !copied["/usr/local/bin/healthcheck"] {
		t.Errorf("runtime copies %v from the builder: want /usr/local/bin/vigil and /usr/local/bin/healthcheck", copied)
	}
	if healthcheck != "CMD /usr/local/bin/healthcheck" {
		t.Errorf("HEALTHCHECK %q: want CMD /usr/local/bin/healthcheck", healthcheck)
	}
	if !slices.Equal(entrypoint, []string{"/usr/local/bin/vigil", "serve"}) {
		t.Errorf("ENTRYPOINT %q: want vigil serve", entrypoint)
	}
	httpAddr, _ := flagValue(cmd, "http")
	if _, port, _ := strings.Cut(httpAddr, ":"); port == "" || !slices.Contains(exposed, port) {
		t.Errorf("CMD --http %q, EXPOSE %v: the API port must be exposed", httpAddr, exposed)
	}
	checkFlagsAndEnv(t, "Dockerfile CMD", cmd, nil)
	checkServeAccepts(t, "Dockerfile CMD", cmd, nil)
	if _, err := os.Stat(filepath.Join("docker", "healthcheck", "main.go")); err != nil {
		t.Error(err)
	}
}

// TestDockerignore: the build context keeps what the build reads: the
// modules, the build script and every Go source and embedded file of the
// main module.
func TestDockerignore(t *testing.T) {
	patterns, err := ignorefile.ReadAll(bytes.NewReader(readFile(t, filepath.Join(repoRoot, ".dockerignore"))))
	if err != nil {
		t.Fatal(err)
	}
	pm, err := patternmatcher.New(patterns)
	if err != nil {
		t.Fatal(err)
	}
	needed := []string{"go.mod", "go.sum", "scripts/build", "examples/fraud.yaml",
		"deployments/go.mod", "deployments/go.sum", "deployments/docker/healthcheck/main.go"}
	err = filepath.WalkDir(repoRoot, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(repoRoot, path)
		if d.IsDir() && (d.Name() == ".git" || rel == "deployments") {
			return filepath.SkipDir
		}
		if strings.HasSuffix(rel, ".go") && !strings.HasSuffix(rel, "_test.go") {
			needed = append(needed, filepath.ToSlash(rel))
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range needed {
		if excluded, err := pm.MatchesOrParentMatches(f); err != nil || excluded {
			t.Errorf(".dockerignore excludes %s, which the image build needs (%v)", f, err)
		}
	}
	for _, f := range []string{".git/HEAD", "vigil", "vigil-data/checkpoints/x"} {
		if excluded, _ := pm.MatchesOrParentMatches(f); !excluded {
			t.Errorf(".dockerignore keeps %s in the build context", f)
		}
	}
}

// TestOneBuildCommand: scripts/build holds the one go build of vigil, and
// the Dockerfile and the README's Deploying section both use it, so that
// the image holds the binary a local build makes.
func TestOneBuildCommand(t *testing.T) {
	script := string(readFile(t, filepath.Join(repoRoot, "scripts", "build")))
	var builds []string
	for _, line := range strings.Split(script, "\n") {
		if strings.Contains(line, "go build") && !strings.HasPrefix(strings.TrimSpace(line), "#") {
			builds = append(builds, line)
		}
	}
	if len(builds) != 1 {
		t.Fatalf("scripts/build: %d go build lines, want 1: %q", len(builds), builds)
	}
	for _, want := range []string{"CGO_ENABLED=0", "-trimpath", `-ldflags "-s -w"`, "./cmd/vigil"} {
		if !strings.Contains(builds[0], want) {
			t.Errorf("scripts/build: %q lacks %s", builds[0], want)
		}
	}
	// The root README builds with the script everywhere, not only in its
	// Deploying section: the binary it measures is the image's.
	if strings.Contains(string(readFile(t, filepath.Join(repoRoot, "README.md"))), "go build") {
		t.Errorf("README.md runs go build; use %s", buildCommand)
	}
	// The Dockerfile: TestDockerfile checks its RUN line. The READMEs:
	for _, readme := range []struct {
		path     string
		required bool
	}{{"README.md", true}, {filepath.Join(repoRoot, "README.md"), true}} {
		section, ok := markdownSection(string(readFile(t, readme.path)), "Deploying")
		if !ok {
			if readme.required {
				t.Errorf("%s: no Deploying section", readme.path)
			} else {
				t.Logf("%s has no Deploying section yet (deployments/README.md has it)", readme.path)
			}
			continue
		}
		if strings.Contains(section, "go build") {
			t.Errorf("%s, Deploying: builds with go build; use %s", readme.path, buildCommand)
		}
		for _, want := range []string{
			buildCommand,
			"docker build -f deployments/docker/Dockerfile",
			"docker compose -f deployments/compose/compose.yaml up",
			"kubectl apply -k deployments/k8s/",
		} {
			if !strings.Contains(section, want) {
				t.Errorf("%s, Deploying: lacks %q", readme.path, want)
			}
		}
	}
}

// markdownSection returns the text under the heading named title (any
// level) up to the next heading of the same or a higher level.
func markdownSection(doc, title string) (string, bool) {
	lines := strings.Split(doc, "\n")
	for i, l := range lines {
		level := len(l) - len(strings.TrimLeft(l, "#"))
		if level == 0 || strings.TrimSpace(l[level:]) != title {
			continue
		}
		var b strings.Builder
		inCode := false
		for _, l := range lines[i+1:] {
			if strings.HasPrefix(l, "```") {
				inCode = !inCode
			}
			if n := len(l) - len(strings.TrimLeft(l, "#")); !inCode && n > 0 && n <= level && strings.HasPrefix(l[n:], " ") {
				break
			}
			fmt.Fprintln(&b, l)
		}
		return b.String(), true
	}
	return "", false
}

func TestMarkdownSection(t *testing.T) {
	doc := "# A\nintro\n## Deploying\nrun this\n```sh\n# a comment, not a heading\n./scripts/build\n```\n### Sub\nmore\n## Next\nother\n"
	got, ok := markdownSection(doc, "Deploying")
	want := "run this\n```sh\n# a comment, not a heading\n./scripts/build\n```\n### Sub\nmore\n"
	if !ok || got != want {
		t.Errorf("got %q, want %q", got, want)
	}
}
