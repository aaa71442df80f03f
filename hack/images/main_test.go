package main

import (
	"archive/tar"
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

type ran struct {
	dir       string
	env, argv []string
}

// fakeBuilder follows the project's Dockerfile with a runner that records
// each command and, for a go build, writes "binary NAME" to its -o.
func fakeBuilder(t *testing.T, goVersion string) (*builder, *[]ran, *bytes.Buffer) {
	t.Helper()
	dir := t.TempDir()
	busybox := filepath.Join(dir, "busybox")
	if err := os.WriteFile(busybox, []byte("busybox"), 0o755); err != nil {
		t.Fatal(err)
	}
	var cmds []ran
	var log bytes.Buffer
	b := &builder{
		dockerfile: "../../Dockerfile",
		bin:        filepath.Join(dir, "bin"),
		out:        filepath.Join(dir, "images"),
		busybox:    busybox,
		log:        &log,
		run: func(dir string, env, argv []string) error {
			cmds = append(cmds, ran{dir, env, argv})
			for i, a := range argv {
				if a == "-o" {
					return os.WriteFile(argv[i+1], []byte("binary "+filepath.Base(argv[i+1])), 0o755)
				}
			}
			return nil
		},
		goVersion: func(string) (string, error) { return goVersion, nil },
	}
	return b, &cmds, &log
}

// The builds run are the Dockerfile's, writing into -bin; the images are
// its stages plus the dev-only ones.
func TestBuild(t *testing.T) {
	p := readPlan(t)
	b, cmds, log := fakeBuilder(t, p.goVersion())
	paths, err := b.build()
	if err != nil {
		t.Fatal(err)
	}
	if strings.Contains(log.String(), "warning") {
		t.Errorf("a warning with the same Go: %s", log)
	}
	var builds []ran
	for _, c := range *cmds {
		if c.dir != "../.." {
			t.Errorf("%q ran in %s, want the Dockerfile's directory", c.argv, c.dir)
		}
		if c.argv[1] == "build" {
			builds = append(builds, c)
		}
	}
	if len(*cmds) != 5 || len(builds) != 4 {
		t.Fatalf("ran %+v, want go mod download and four go builds", *cmds)
	}
	for i, n := range []string{"manager", "toolgate-runner", "toolgate-gateway", "toolgate-egress"} {
		want := []string{"go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o", filepath.Join(b.bin, n), "./cmd/" + n}
		if !reflect.DeepEqual(builds[i].argv, want) || !reflect.DeepEqual(builds[i].env, []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}) {
			t.Errorf("build %d: env %q argv %q, want argv %q", i, builds[i].env, builds[i].argv, want)
		}
	}
	wantPaths := []string{"toolgate.tar", "runner.tar", "tools.tar", "pause.tar"}
	for i := range wantPaths {
		wantPaths[i] = filepath.Join(b.out, wantPaths[i])
	}
	if !reflect.DeepEqual(paths, wantPaths) {
		t.Fatalf("wrote %q, want %q", paths, wantPaths)
	}
	scratchEnv := []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}
	for _, tc := range []struct {
		path, ref  string
		layers     []map[string]string // path -> content ("->target" for a link)
		user, wd   string
		entrypoint []string
		env        []string
	}{
		{paths[0], "toolgate.dev/toolgate:dev", []map[string]string{{"manager": "binary manager"}, {"toolgate-gateway": "binary toolgate-gateway"}, {"toolgate-egress": "binary toolgate-egress"}}, "65532:65532", "/", []string{"/manager"}, scratchEnv},
		{paths[1], "toolgate.dev/runner:dev", []map[string]string{{"toolgate-runner": "binary toolgate-runner"}}, "65532:65532", "/", []string{"/toolgate-runner"}, scratchEnv},
		{paths[3], "toolgate.dev/pause:dev", []map[string]string{{"toolgate-runner": "binary toolgate-runner"}}, "65535:65535", "", []string{"/toolgate-runner", "pause"}, nil},
	} {
		tag, err := name.NewTag(tc.ref)
		if err != nil {
			t.Fatal(err)
		}
		img, err := tarball.ImageFromPath(tc.path, &tag)
		if err != nil {
			t.Fatalf("%s as %s: %v", tc.path, tc.ref, err)
		}
		cf, err := img.ConfigFile()
		if err != nil {
			t.Fatal(err)
		}
		c := cf.Config
		if c.User != tc.user || c.WorkingDir != tc.wd || !reflect.DeepEqual(c.Entrypoint, tc.entrypoint) || !reflect.DeepEqual(c.Env, tc.env) || cf.OS != "linux" || cf.Architecture != "amd64" {
			t.Errorf("%s: %s/%s config %+v", tc.ref, cf.OS, cf.Architecture, c)
		}
		if got := layerFiles(t, img); !reflect.DeepEqual(got, tc.layers) {
			t.Errorf("%s: layers %v, want %v", tc.ref, got, tc.layers)
		}
	}
	tag, _ := name.NewTag("toolgate.dev/tools:dev")
	img, err := tarball.ImageFromPath(paths[2], &tag)
	if err != nil {
		t.Fatal(err)
	}
	files := layerFiles(t, img)
	if len(files) != 1 || files[0]["toolgate-runner"] != "binary toolgate-runner" || files[0]["bin/busybox"] != "busybox" || files[0]["bin/sh"] != "->/bin/busybox" || len(files[0]) != len(busyboxApplets)+2 {
		t.Errorf("tools: layers %v", files)
	}
}

func layerFiles(t *testing.T, img v1.Image) []map[string]string {
	t.Helper()
	ls, err := img.Layers()
	if err != nil {
		t.Fatal(err)
	}
	var out []map[string]string
	for _, l := range ls {
		rc, err := l.Uncompressed()
		if err != nil {
			t.Fatal(err)
		}
		m := map[string]string{}
		tr := tar.NewReader(rc)
		for {
			h, err := tr.Next()
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				t.Fatal(err)
			}
			data, _ := io.ReadAll(tr)
			switch h.Typeflag {
			case tar.TypeSymlink:
				m[h.Name] = "->" + h.Linkname
			case tar.TypeReg:
				if h.Mode != 0o755 || h.Uid != 0 || !h.ModTime.Equal(time.Unix(0, 0)) {
					t.Errorf("%s: mode %o uid %d time %s", h.Name, h.Mode, h.Uid, h.ModTime)
				}
				m[h.Name] = string(data)
			}
		}
		if err := rc.Close(); err != nil {
			t.Fatal(err)
		}
		out = append(out, m)
	}
	return out
}

// A local Go other than the Dockerfile's is warned of.
func TestBuildWarnsOfAnotherGo(t *testing.T) {
	b, _, log := fakeBuilder(t, "go1.25.0")
	if _, err := b.build(); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(log.String(), "images: warning: the local Go is go1.25.0, the Dockerfile builds with golang:1.") {
		t.Errorf("no warning: %s", log)
	}
}

// A failed go build stops the build, naming the Dockerfile line.
func TestBuildFails(t *testing.T) {
	b, _, _ := fakeBuilder(t, "go1.0")
	b.run = func(string, []string, []string) error { return errors.New("exit status 1") }
	if _, err := b.build(); err == nil || !strings.Contains(err.Error(), "../../Dockerfile line 14: go mod download: ") || !strings.Contains(err.Error(), "exit status 1") {
		t.Errorf("error %v", err)
	}
}
