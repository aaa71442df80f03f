// Command images builds toolgate's container images without a Docker
// engine (go-containerregistry) and writes them as tarballs that
// `ctr images import` loads. It follows the Dockerfile: it runs the go
// builds of its build stage's RUN (the same flags and environment) and
// assembles each FROM scratch stage from the files its COPY --from takes,
// with its USER and ENTRYPOINT; any instruction it cannot follow is an
// error naming the line (dockerfile.go). Three more images, for the local
// cluster only, are defined here: tools (busybox-static with its applets
// and the runner), pause (the pod sandbox, toolgate-runner pause) and
// mcp-node (node, the libraries it links, and the npm MCP servers the
// tests run, as their packages installed them: the image a team would
// build for an npm server).
//
// Every image's reference is in the table refs; refs_test.go checks that
// the repository names no other toolgate.dev image.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"maps"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// imageRef is one image and its reference.
type imageRef struct {
	name  string // the Dockerfile stage, or a dev-only image below
	ref   string
	stage bool // built from the Dockerfile stage name
}

// refs is the one place toolgate's image references are set.
var refs = []imageRef{
	{name: "manager", ref: "toolgate.dev/toolgate:dev", stage: true},
	{name: "runner", ref: "toolgate.dev/runner:dev", stage: true},
	{name: "tools", ref: "toolgate.dev/tools:dev"},
	{name: "pause", ref: "toolgate.dev/pause:dev"},
	{name: "mcp-node", ref: "toolgate.dev/mcp-node:dev"},
}

// scratchConfig is the config BuildKit gives a FROM scratch stage on
// Linux, before the stage's own instructions.
func scratchConfig() v1.Config {
	return v1.Config{WorkingDir: "/", Env: []string{"PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"}}
}

// runnerName is the go build output (its base name) that the dev-only
// images carry.
const runnerName = "toolgate-runner"

// busyboxApplets are the tools image's /bin links to busybox.
var busyboxApplets = []string{"sh", "cat", "wc", "echo", "sleep", "ls", "printf", "head", "tail", "tr", "sed", "grep", "true", "false", "env", "id", "sort", "uniq", "date", "touch", "mkdir", "rm", "cp", "mv", "sha256sum", "nc", "httpd", "wget"}

// builder builds the images of a Dockerfile.
type builder struct {
	dockerfile string // its directory is the build context
	bin, out   string
	busybox    string
	// extra are more files of the tools image: its path and the local
	// file (the e2e suite's stand-in API).
	extra map[string]string
	// nodeFiles are the mcp-node image's files at their own paths (node
	// and the libraries it links); nodeModules is the node_modules
	// directory it holds at /app/node_modules. Without them, no mcp-node.
	nodeFiles   []string
	nodeModules string
	// run executes a command of the build stage in dir with env added to
	// the environment; goVersion is `go env GOVERSION` there.
	run       func(dir string, env, argv []string) error
	goVersion func(dir string) (string, error)
	log       io.Writer
}

func main() {
	b := &builder{run: execRun, goVersion: execGoVersion, log: os.Stderr}
	flag.StringVar(&b.dockerfile, "dockerfile", "Dockerfile", "the Dockerfile to follow; its directory is the build context")
	flag.StringVar(&b.bin, "bin", "_output/bin", "directory for the built binaries")
	flag.StringVar(&b.out, "out", "_output/images", "directory for the image tarballs")
	flag.StringVar(&b.busybox, "busybox", "/bin/busybox", "busybox-static binary, for the tools image")
	var extra string
	flag.StringVar(&extra, "tools-extra", "", "more files of the tools image, comma-separated PATH=LOCALFILE (executables)")
	var nodeFiles string
	flag.StringVar(&nodeFiles, "node-files", "", "the mcp-node image's files, comma-separated: a file at its own path, or IMAGEPATH=LOCALFILE (node and the libraries ldd lists)")
	flag.StringVar(&b.nodeModules, "node-modules", "", "the node_modules directory the mcp-node image holds at /app/node_modules")
	flag.Parse()
	for _, f := range strings.Split(nodeFiles, ",") {
		if f != "" {
			b.nodeFiles = append(b.nodeFiles, f)
		}
	}
	b.extra = map[string]string{}
	for _, e := range strings.Split(extra, ",") {
		if e == "" {
			continue
		}
		p, f, ok := strings.Cut(e, "=")
		if !ok || !strings.HasPrefix(p, "/") {
			fmt.Fprintln(os.Stderr, "images: -tools-extra wants /PATH=LOCALFILE, not", e)
			os.Exit(2)
		}
		b.extra[p] = f
	}
	paths, err := b.build()
	if err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
	for _, p := range paths {
		fmt.Println(p)
	}
}

func execRun(dir string, env, argv []string) error {
	c := exec.Command(argv[0], argv[1:]...)
	c.Dir, c.Env = dir, append(buildEnv(os.Environ()), env...)
	c.Stdout, c.Stderr = os.Stderr, os.Stderr
	return c.Run()
}

// changesBinary are the variables of the user's environment that would
// make other binaries than the Dockerfile's golang image (where none is
// set); the Dockerfile's own are added after.
var changesBinary = []string{"GOFLAGS", "GOAMD64", "GOARM64", "GOEXPERIMENT"}

// buildEnv is environ without changesBinary: the module proxy, caches and
// toolchain stay the user's.
func buildEnv(environ []string) []string {
	out := make([]string, 0, len(environ))
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !slices.Contains(changesBinary, name) {
			out = append(out, kv)
		}
	}
	return out
}

func execGoVersion(dir string) (string, error) {
	c := exec.Command("go", "env", "GOVERSION")
	c.Dir, c.Stderr = dir, os.Stderr
	out, err := c.Output()
	return strings.TrimSpace(string(out)), err
}

// build runs the Dockerfile's go builds into b.bin and writes every image
// of refs into b.out, returning the tarballs' paths.
func (b *builder) build() ([]string, error) {
	src, err := os.ReadFile(b.dockerfile)
	if err != nil {
		return nil, err
	}
	p, err := parseDockerfile(string(src))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", b.dockerfile, err)
	}
	if err := checkRefs(p, refs); err != nil {
		return nil, fmt.Errorf("%s: %w", b.dockerfile, err)
	}
	context := filepath.Dir(b.dockerfile)
	bin, err := filepath.Abs(b.bin)
	if err != nil {
		return nil, err
	}
	if v, err := b.goVersion(context); err != nil {
		return nil, fmt.Errorf("go env GOVERSION: %w", err)
	} else if v != p.goVersion() {
		fmt.Fprintf(b.log, "images: warning: the local Go is %s, the Dockerfile builds with %s: the binaries will differ from docker build's\n", v, p.goImage)
	}
	if err := os.MkdirAll(bin, 0o755); err != nil {
		return nil, err
	}
	built := map[string]string{} // build-stage path -> file in bin
	for _, c := range p.commands {
		argv := append([]string(nil), c.argv...)
		if c.out != "" {
			built[c.out] = filepath.Join(bin, path.Base(c.out))
			argv[c.oArg] = strings.TrimSuffix(argv[c.oArg], c.out) + built[c.out]
		}
		fmt.Fprintf(b.log, "images: %s line %d: %s\n", b.dockerfile, c.line, shellJoin(append(append([]string(nil), c.env...), argv...)))
		if err := b.run(context, c.env, argv); err != nil {
			return nil, fmt.Errorf("%s line %d: %s: %w", b.dockerfile, c.line, shellJoin(argv), err)
		}
	}
	var runner []byte
	for src, f := range built {
		if path.Base(src) == runnerName {
			if runner, err = os.ReadFile(f); err != nil {
				return nil, err
			}
		}
	}
	if runner == nil {
		return nil, fmt.Errorf("%s: no go build writes %s, which the tools and pause images carry", b.dockerfile, runnerName)
	}
	stages := map[string]stage{}
	for _, s := range p.stages {
		stages[s.name] = s
	}
	if err := os.MkdirAll(b.out, 0o755); err != nil {
		return nil, err
	}
	var paths []string
	for _, r := range refs {
		var (
			layers [][]file
			cfg    v1.Config
		)
		switch {
		case r.stage:
			s := stages[r.name]
			// One layer per COPY, as docker build makes them.
			for _, c := range s.copies {
				data, err := os.ReadFile(built[c.src])
				if err != nil {
					return nil, err
				}
				// 0755: what go build writes under the build stage's umask.
				layers = append(layers, []file{{path: c.dst, mode: 0o755, data: data}})
			}
			cfg = scratchConfig()
			cfg.User, cfg.Entrypoint = s.user, s.entrypoint
		case r.name == "tools":
			bb, err := os.ReadFile(b.busybox)
			if err != nil {
				return nil, err
			}
			tools := []file{{path: "/bin/busybox", mode: 0o755, data: bb}}
			for _, applet := range busyboxApplets {
				tools = append(tools, file{path: "/bin/" + applet, link: "/bin/busybox", mode: 0o777})
			}
			// A tool image that holds toolgate's runner (container.runnerPath).
			tools = append(tools, file{path: "/" + runnerName, mode: 0o755, data: runner})
			for _, p := range slices.Sorted(maps.Keys(b.extra)) {
				data, err := os.ReadFile(b.extra[p])
				if err != nil {
					return nil, err
				}
				tools = append(tools, file{path: p, mode: 0o755, data: data})
			}
			layers, cfg = [][]file{tools}, v1.Config{User: "65532:65532", Env: []string{"PATH=/bin"}}
		case r.name == "pause":
			layers = [][]file{{{path: "/" + runnerName, mode: 0o755, data: runner}}}
			cfg = v1.Config{User: "65535:65535", Entrypoint: []string{"/" + runnerName, "pause"}}
		case r.name == "mcp-node":
			if len(b.nodeFiles) == 0 || b.nodeModules == "" {
				continue // not asked for
			}
			var node, modules []file
			for _, f := range b.nodeFiles {
				at, local, ok := strings.Cut(f, "=")
				if !ok {
					local = at
				}
				data, err := os.ReadFile(local)
				if err != nil {
					return nil, err
				}
				node = append(node, file{path: at, mode: 0o755, data: data})
			}
			if modules, err = tree(b.nodeModules, "/app/node_modules"); err != nil {
				return nil, err
			}
			layers, cfg = [][]file{node, modules}, v1.Config{User: "65532:65532", Env: []string{"PATH=/usr/bin:/bin"}, WorkingDir: "/app"}
		default:
			return nil, fmt.Errorf("image %s has no definition", r.name)
		}
		img, err := image(layers, cfg, p.os, p.arch)
		if err != nil {
			return nil, err
		}
		ref, err := name.NewTag(r.ref)
		if err != nil {
			return nil, err
		}
		out := filepath.Join(b.out, path.Base(ref.RepositoryStr())+".tar")
		if err := tarball.WriteToFile(out, ref, img); err != nil {
			return nil, err
		}
		paths = append(paths, out)
	}
	return paths, nil
}

// shellJoin writes words as a shell would read them back.
func shellJoin(words []string) string {
	q := make([]string, len(words))
	for i, w := range words {
		q[i] = w
		if w == "" || strings.ContainsAny(w, " \t\n'\"\\$`|&;<>()*?[]{}~!#") {
			q[i] = "'" + strings.ReplaceAll(w, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}

// checkRefs checks that the Dockerfile's scratch stages and the table's
// stage images are the same.
func checkRefs(p *plan, refs []imageRef) error {
	want := map[string]bool{}
	for _, r := range refs {
		if r.stage {
			want[r.name] = true
		}
	}
	for _, s := range p.stages {
		if !want[s.name] {
			return fmt.Errorf("line %d: stage %s has no reference in hack/images' refs", s.line, s.name)
		}
		delete(want, s.name)
	}
	for n := range want {
		return fmt.Errorf("hack/images' refs names stage %s, which is not defined", n)
	}
	return nil
}

// file is one entry of a layer.
type file struct {
	path, link string
	mode       int64
	data       []byte
}

// tree is the files under dir (its own path resolved, its links kept as
// links), at the same places under at.
func tree(dir, at string) ([]file, error) {
	root, err := filepath.EvalSymlinks(dir)
	if err != nil {
		return nil, err
	}
	var files []file
	err = filepath.WalkDir(root, func(p string, d os.DirEntry, err error) error {
		if err != nil || p == root {
			return err
		}
		rel, err := filepath.Rel(root, p)
		if err != nil {
			return err
		}
		f := file{path: path.Join(at, filepath.ToSlash(rel))}
		switch {
		case d.Type()&os.ModeSymlink != 0:
			if f.link, err = os.Readlink(p); err != nil {
				return err
			}
			f.mode = 0o777
		case d.IsDir():
			return nil // made for the files under it
		case d.Type().IsRegular():
			info, err := d.Info()
			if err != nil {
				return err
			}
			if f.data, err = os.ReadFile(p); err != nil {
				return err
			}
			f.mode = int64(info.Mode().Perm()) | 0o444
		default:
			return nil
		}
		files = append(files, f)
		return nil
	})
	return files, err
}

func layer(files []file) (v1.Layer, error) {
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	epoch := time.Unix(0, 0)
	dirs := map[string]bool{}
	for _, f := range files {
		for d := filepath.Dir(f.path); d != "/" && d != "." && !dirs[d]; d = filepath.Dir(d) {
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Name: d[1:] + "/", Typeflag: tar.TypeDir, Mode: 0o755, ModTime: epoch}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: f.path[1:], Mode: f.mode, ModTime: epoch, Size: int64(len(f.data)), Typeflag: tar.TypeReg}
		if f.link != "" {
			h.Typeflag, h.Linkname, h.Size = tar.TypeSymlink, f.link, 0
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(f.data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	data := buf.Bytes()
	return tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
}

func image(layers [][]file, cfg v1.Config, goos, goarch string) (v1.Image, error) {
	img := empty.Image
	for _, files := range layers {
		l, err := layer(files)
		if err != nil {
			return nil, err
		}
		if img, err = mutate.AppendLayers(img, l); err != nil {
			return nil, err
		}
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Config = goarch, goos, cfg
	return mutate.ConfigFile(img, cf)
}
