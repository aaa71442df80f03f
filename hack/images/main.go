// Command images assembles toolgate's container images without a Docker
// engine (go-containerregistry) and writes them as tarballs that
// `ctr images import` loads:
//
//	toolgate.dev/toolgate:dev  the manager (/manager, user 65532)
//	toolgate.dev/runner:dev    /toolgate-runner (injected into tool pods)
//	toolgate.dev/tools:dev     busybox-static with its applets, for sample tools
//	toolgate.dev/pause:dev     the pod sandbox image (toolgate-runner pause)
//
// They match the Dockerfile: static binaries on an empty base, non-root.
package main

import (
	"archive/tar"
	"bytes"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// file is one entry of a layer.
type file struct {
	path, link string
	mode       int64
	data       []byte
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

func image(files []file, cfg v1.Config) (v1.Image, error) {
	l, err := layer(files)
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cf, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cf = cf.DeepCopy()
	cf.Architecture, cf.OS, cf.Config = "amd64", "linux", cfg
	return mutate.ConfigFile(img, cf)
}

func main() {
	out := flag.String("out", "_output/images", "directory for the image tarballs")
	runnerBin := flag.String("runner", "", "static toolgate-runner binary")
	managerBin := flag.String("manager", "", "static manager binary")
	gatewayBin := flag.String("gateway", "", "static toolgate-gateway binary, added to the operator image as /toolgate-gateway (optional)")
	busybox := flag.String("busybox", "/bin/busybox", "busybox-static binary")
	flag.Parse()
	if err := build(*out, *runnerBin, *managerBin, *gatewayBin, *busybox); err != nil {
		fmt.Fprintln(os.Stderr, "images:", err)
		os.Exit(1)
	}
}

func build(out, runnerBin, managerBin, gatewayBin, busybox string) error {
	read := func(p string) ([]byte, error) {
		if p == "" {
			return nil, fmt.Errorf("a binary path is missing")
		}
		return os.ReadFile(p)
	}
	runner, err := read(runnerBin)
	if err != nil {
		return err
	}
	manager, err := read(managerBin)
	if err != nil {
		return err
	}
	bb, err := read(busybox)
	if err != nil {
		return err
	}
	operator := []file{{path: "/manager", mode: 0o755, data: manager}}
	if gatewayBin != "" {
		gateway, err := read(gatewayBin)
		if err != nil {
			return err
		}
		operator = append(operator, file{path: "/toolgate-gateway", mode: 0o755, data: gateway})
	}
	tools := []file{{path: "/bin/busybox", mode: 0o755, data: bb}}
	for _, applet := range []string{"sh", "cat", "wc", "echo", "sleep", "ls", "printf", "head", "tail", "tr", "sed", "grep", "true", "false", "env", "id", "sort", "uniq", "date", "touch", "mkdir", "rm", "cp", "mv", "sha256sum"} {
		tools = append(tools, file{path: "/bin/" + applet, link: "/bin/busybox", mode: 0o777})
	}
	nonroot := v1.Config{User: "65532:65532", Env: []string{"PATH=/bin"}}
	images := []struct {
		tag   string
		files []file
		cfg   v1.Config
	}{
		{"toolgate.dev/toolgate:dev", operator, v1.Config{User: "65532:65532", Entrypoint: []string{"/manager"}}},
		{"toolgate.dev/runner:dev", []file{{path: "/toolgate-runner", mode: 0o755, data: runner}}, v1.Config{User: "65532:65532", Entrypoint: []string{"/toolgate-runner"}}},
		{"toolgate.dev/tools:dev", tools, nonroot},
		{"toolgate.dev/pause:dev", []file{{path: "/toolgate-runner", mode: 0o755, data: runner}}, v1.Config{User: "65535:65535", Entrypoint: []string{"/toolgate-runner", "pause"}}},
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	for _, im := range images {
		img, err := image(im.files, im.cfg)
		if err != nil {
			return err
		}
		ref, err := name.NewTag(im.tag)
		if err != nil {
			return err
		}
		path := filepath.Join(out, filepath.Base(ref.RepositoryStr())+".tar")
		if err := tarball.WriteToFile(path, ref, img); err != nil {
			return err
		}
		fmt.Println(path)
	}
	return nil
}
