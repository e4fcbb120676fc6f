// Package docker holds the Docker files for users with a Docker engine. These tests check what
// can be checked without one (`make test` needs none): every path a Dockerfile copies or builds
// exists, every binary an image runs is one it builds, and every flag and EJCLOUD_* variable the
// images and the compose file give our binaries is one they accept. image_test.go (build tag
// dockertest, `make docker-test`) builds and runs the images with an engine.
package docker

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/ejcloud/ejcloud/envflag"
	"github.com/ejcloud/ejcloud/internal/testcert"
	"github.com/ejcloud/ejcloud/scheduler"
)

const root = ".." // the build context of every image

// instruction is one Dockerfile instruction, continuation lines joined.
type instruction struct {
	cmd  string // upper case
	args string
}

func parseDockerfile(t *testing.T, path string) []instruction {
	t.Helper()
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var out []instruction
	var cur string
	for _, line := range strings.Split(string(b), "\n") {
		trimmed := strings.TrimSpace(line)
		if cur == "" && (trimmed == "" || strings.HasPrefix(trimmed, "#")) {
			continue
		}
		if strings.HasSuffix(trimmed, "\\") {
			cur += strings.TrimSuffix(trimmed, "\\") + " "
			continue
		}
		cur += trimmed
		cmd, args, _ := strings.Cut(cur, " ")
		out = append(out, instruction{cmd: strings.ToUpper(cmd), args: strings.TrimSpace(args)})
		cur = ""
	}
	if cur != "" {
		t.Fatalf("%s ends inside a continued line", path)
	}
	return out
}

// execForm parses the JSON array form of ENTRYPOINT and CMD (the shell form is not used here:
// it would not pass signals to the binary).
func execForm(t *testing.T, in instruction) []string {
	t.Helper()
	var argv []string
	if err := json.Unmarshal([]byte(in.args), &argv); err != nil {
		t.Fatalf("%s %s: want the JSON exec form: %v", in.cmd, in.args, err)
	}
	return argv
}

var (
	goBuild  = regexp.MustCompile(`go build [^&]*?-o (\S+) (\./\S+)`)
	flagName = regexp.MustCompile(`^--([a-z0-9-]+)(=.*)?$`)
)

// image is what a Dockerfile's final stage runs.
type image struct {
	built      map[string]string // output path in the build stage → package directory
	installed  map[string]bool   // paths in the final image
	entrypoint []string
	cmd        []string
}

var gzipped = regexp.MustCompile(`gzip(?: -[0-9n]+)* (\S+)`)

func checkDockerfile(t *testing.T, path string) image {
	t.Helper()
	img := image{built: map[string]string{}, installed: map[string]bool{}}
	for _, in := range parseDockerfile(t, path) {
		switch in.cmd {
		case "COPY":
			fields := strings.Fields(in.args)
			from := strings.HasPrefix(fields[0], "--from=")
			if from {
				fields = fields[1:]
			}
			srcs, dst := fields[:len(fields)-1], fields[len(fields)-1]
			for _, src := range srcs {
				if from {
					if _, ok := img.built[src]; !ok {
						t.Errorf("%s: COPY --from copies %s, which no go build in it writes", path, src)
					}
					if strings.HasSuffix(dst, "/") {
						img.installed[dst+filepath.Base(src)] = true
					}
					continue
				}
				if _, err := os.Stat(filepath.Join(root, src)); err != nil {
					t.Errorf("%s: COPY %s: not in the build context: %v", path, src, err)
				}
			}
		case "RUN":
			for _, m := range goBuild.FindAllStringSubmatch(in.args, -1) {
				out, pkg := m[1], m[2]
				main, err := os.ReadFile(filepath.Join(root, pkg, "main.go"))
				if err != nil || !strings.Contains(string(main), "package main") {
					t.Errorf("%s: go build %s: not a main package: %v", path, pkg, err)
				}
				img.built[out] = pkg
			}
			// gzip -n FILE replaces a built binary with FILE.gz (the scheduler image's executor).
			for _, m := range gzipped.FindAllStringSubmatch(in.args, -1) {
				if pkg, ok := img.built[m[1]]; ok {
					delete(img.built, m[1])
					img.built[m[1]+".gz"] = pkg
				}
			}
		case "ENTRYPOINT":
			img.entrypoint = execForm(t, in)
		case "CMD":
			img.cmd = execForm(t, in)
		}
	}
	if len(img.entrypoint) == 0 || !img.installed[img.entrypoint[0]] {
		t.Errorf("%s: ENTRYPOINT %v is not a binary the image installs (%v)", path, img.entrypoint, img.installed)
	}
	return img
}

// schedulerConfig parses args and env as ejcloud-scheduler would, and validates the result. The
// files the image installs (installed) stand in on this host as empty files: Validate opens
// --executor-binary.
func schedulerConfig(t *testing.T, where string, args []string, env map[string]string, installed map[string]bool) {
	t.Helper()
	fs := flag.NewFlagSet("ejcloud-scheduler", flag.ContinueOnError)
	fs.SetOutput(new(strings.Builder))
	cfg := scheduler.Flags(fs)
	for _, a := range args {
		if m := flagName.FindStringSubmatch(a); m != nil && fs.Lookup(m[1]) == nil {
			t.Errorf("%s: ejcloud-scheduler has no flag --%s", where, m[1])
		}
	}
	for name := range env {
		known := false
		fs.VisitAll(func(f *flag.Flag) { known = known || envflag.Name(f.Name) == name })
		if !known {
			t.Errorf("%s: %s is no ejcloud-scheduler flag's variable", where, name)
		}
	}
	if err := envflag.Parse(fs, args, func(k string) string { return env[k] }); err != nil {
		t.Errorf("%s: ejcloud-scheduler refuses %v: %v", where, args, err)
		return
	}
	if installed[cfg.ExecutorBinary] {
		standIn := filepath.Join(t.TempDir(), filepath.Base(cfg.ExecutorBinary))
		if err := os.WriteFile(standIn, nil, 0o755); err != nil {
			t.Fatal(err)
		}
		cfg.ExecutorBinary = standIn
	}
	if err := cfg.Validate(); err != nil {
		t.Errorf("%s: ejcloud-scheduler would not start with %v %v: %v", where, args, env, err)
	}
}

func TestSchedulerImage(t *testing.T) {
	img := checkDockerfile(t, "scheduler.Dockerfile")
	if filepath.Base(img.entrypoint[0]) != "ejcloud-scheduler" {
		t.Fatalf("entrypoint %v; want ejcloud-scheduler", img.entrypoint)
	}
	args := append(img.entrypoint[1:], img.cmd...)
	for i, a := range args {
		if a == "--executor-binary" && (i+1 >= len(args) || !img.installed[args[i+1]]) {
			t.Errorf("--executor-binary points at a file the image does not have: %v", args)
		}
	}
	cert, key := testcert.NewCA(t, "test CA").Issue(t, "scheduler")
	schedulerConfig(t, "scheduler.Dockerfile", args, map[string]string{"EJCLOUD_AUTH_ROOT": "root:secret",
		"EJCLOUD_TLS_CERT_FILE": cert, "EJCLOUD_TLS_KEY_FILE": key}, img.installed)
}

func TestExecutorImage(t *testing.T) {
	img := checkDockerfile(t, "executor.Dockerfile")
	if filepath.Base(img.entrypoint[0]) != "ejcloud-executor" || img.built["/out/ejcloud-executor"] != "./executor/cmd/ejcloud-executor" {
		t.Fatalf("entrypoint %v from %v; want the ejcloud-executor built from ./executor/cmd/ejcloud-executor", img.entrypoint, img.built)
	}
}

func TestComposeFile(t *testing.T) {
	b, err := os.ReadFile("docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	var compose struct {
		Services map[string]struct {
			Image string `yaml:"image"`
			Build struct {
				Context    string `yaml:"context"`
				Dockerfile string `yaml:"dockerfile"`
			} `yaml:"build"`
			DependsOn   []string          `yaml:"depends_on"`
			Command     []string          `yaml:"command"`
			Environment map[string]string `yaml:"environment"`
			Ports       []string          `yaml:"ports"`
		} `yaml:"services"`
	}
	if err := yaml.Unmarshal(b, &compose); err != nil {
		t.Fatalf("docker-compose.yml: %v", err)
	}
	for _, want := range []string{"zookeeper", "mesos-master", "mesos-agent", "scheduler"} {
		if _, ok := compose.Services[want]; !ok {
			t.Errorf("docker-compose.yml has no %s service", want)
		}
	}
	for name, svc := range compose.Services {
		for _, p := range svc.Ports { // nothing here authenticates Mesos: the host's loopback only
			if !strings.HasPrefix(p, "127.0.0.1:") {
				t.Errorf("service %s publishes %q beyond the Docker host's loopback", name, p)
			}
		}
		for _, d := range svc.DependsOn {
			if _, ok := compose.Services[d]; !ok {
				t.Errorf("service %s depends on %s, which is not defined", name, d)
			}
		}
	}
	s := compose.Services["scheduler"]
	df := filepath.Join(s.Build.Context, s.Build.Dockerfile) // relative to the compose file's directory
	if df != filepath.Join("..", "docker", "scheduler.Dockerfile") || s.Build.Context != root {
		t.Errorf("the scheduler service builds %s in context %s; want docker/scheduler.Dockerfile in the repository root", df, s.Build.Context)
	}
	img := checkDockerfile(t, df)
	for i, a := range s.Command {
		if v, ok := strings.CutPrefix(a, "--executor-binary="); ok && !img.installed[v] {
			t.Errorf("command[%d] %s: the image has no such file", i, a)
		}
	}
	env := map[string]string{}
	for k, v := range s.Environment {
		if strings.HasPrefix(v, "${") { // a variable the user sets: give it a valid value
			v = "root:secret"
		}
		env[k] = v
	}
	schedulerConfig(t, "docker-compose.yml scheduler", s.Command, env, img.installed)
	if s.Environment["EJCLOUD_MESOS_USER"] == "" {
		t.Errorf("the scheduler's tasks would run as the image's user, which the agents do not have: set EJCLOUD_MESOS_USER")
	}
	if !strings.Contains(s.Environment["EJCLOUD_AUTH_ROOT"], ":?") {
		t.Errorf("the compose file must refuse to start without credentials: EJCLOUD_AUTH_ROOT=%q", s.Environment["EJCLOUD_AUTH_ROOT"])
	}
}

// TestLocalDockerfiles: the images `make images` builds FROM scratch where no base image can be
// pulled (*.local.Dockerfile) run as the public route's do: the same entrypoint, arguments,
// user and port, so that what the engine test proves of one route holds of the other.
func TestLocalDockerfiles(t *testing.T) {
	for _, name := range []string{"scheduler", "executor"} {
		runs := func(path string) map[string]string {
			got := map[string]string{}
			for _, in := range parseDockerfile(t, path) {
				switch in.cmd {
				case "ENTRYPOINT", "CMD", "USER", "EXPOSE":
					got[in.cmd] = in.args
				case "FROM":
					got["FROM"] = in.args // the last one: the final stage's base
				}
			}
			return got
		}
		public, local := runs(name+".Dockerfile"), runs(name+".local.Dockerfile")
		if local["FROM"] != "scratch" {
			t.Errorf("%s.local.Dockerfile is FROM %s; want scratch (nothing to pull)", name, local["FROM"])
		}
		if !strings.HasPrefix(public["FROM"], "${") {
			t.Errorf("%s.Dockerfile's final stage is FROM %s; want a build argument (BASE_IMAGE)", name, public["FROM"])
		}
		for _, k := range []string{"ENTRYPOINT", "CMD", "USER", "EXPOSE"} {
			if public[k] != local[k] {
				t.Errorf("%s: %s is %q in the public Dockerfile, %q in the local one", name, k, public[k], local[k])
			}
		}
	}
}
