package main

import (
	"os"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"testing"
)

func readPlan(t *testing.T) *plan {
	t.Helper()
	src, err := os.ReadFile("../../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	p, err := parseDockerfile(string(src))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// The project's Dockerfile: its four go builds and its two images.
func TestRealDockerfile(t *testing.T) {
	p := readPlan(t)
	if !regexp.MustCompile(`^golang:1\.\d+\.\d+$`).MatchString(p.goImage) {
		t.Errorf("build stage FROM %s: want golang pinned to a Go release (golang:1.N.P)", p.goImage)
	}
	if p.buildStage != "build" || p.os != "linux" || p.arch != "amd64" {
		t.Errorf("build stage %q for %s/%s, want build for linux/amd64", p.buildStage, p.os, p.arch)
	}
	env := []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=amd64"}
	flags := []string{"go", "build", "-trimpath", "-buildvcs=false", "-ldflags=-s -w", "-o"}
	var builds []command
	for _, c := range p.commands {
		if c.out != "" {
			builds = append(builds, c)
		} else if !reflect.DeepEqual(c.argv, []string{"go", "mod", "download"}) {
			t.Errorf("line %d: a command that is no go build: %q", c.line, c.argv)
		}
	}
	if len(builds) != 4 {
		t.Fatalf("go builds: %d, want 4: %+v", len(builds), builds)
	}
	for i, name := range []string{"manager", "toolgate-runner", "toolgate-gateway", "toolgate-egress"} {
		c := builds[i]
		want := append(append([]string(nil), flags...), "/out/"+name, "./cmd/"+name)
		if !reflect.DeepEqual(c.env, env) || !reflect.DeepEqual(c.argv, want) || c.out != "/out/"+name || c.argv[c.oArg] != "/out/"+name {
			t.Errorf("build %d: env %q argv %q out %s, want env %q argv %q", i, c.env, c.argv, c.out, env, want)
		}
	}
	want := []stage{
		{name: "runner", copies: []copyFile{{src: "/out/toolgate-runner", dst: "/toolgate-runner"}}, user: "65532:65532", entrypoint: []string{"/toolgate-runner"}},
		{name: "manager", copies: []copyFile{{src: "/out/manager", dst: "/manager"}, {src: "/out/toolgate-gateway", dst: "/toolgate-gateway"}, {src: "/out/toolgate-egress", dst: "/toolgate-egress"}}, user: "65532:65532", entrypoint: []string{"/manager"}},
	}
	got := append([]stage(nil), p.stages...)
	for i := range got {
		got[i].line = 0
		got[i].copies = append([]copyFile(nil), got[i].copies...)
		for j := range got[i].copies {
			got[i].copies[j].line = 0
		}
	}
	if !reflect.DeepEqual(got, want) {
		t.Errorf("stages:\n got %+v\nwant %+v", got, want)
	}
	if err := checkRefs(p, refs); err != nil {
		t.Error(err)
	}
}

const goodDockerfile = `# syntax=docker/dockerfile:1
FROM golang:1.26.8 AS build
WORKDIR /src
COPY . .
ARG TARGETOS=linux
ARG TARGETARCH=arm64
RUN go mod download
# a comment between instructions
RUN CGO_ENABLED=0 GOOS=$TARGETOS GOARCH="${TARGETARCH}" \
    # a comment inside the continuation
    go build -trimpath -ldflags="-s -w -X 'main.v=a b'" -tags 'x y' -o /out/a ./cmd/a && \

    GOFLAGS=-mod=mod go build -ldflags '-s' -o=/out/b\ c ./cmd/b
FROM scratch AS one
COPY --from=build /out/a /usr/bin/
USER 1:1
ENTRYPOINT ["/usr/bin/a", "x y"]
`

// Continuation (with comment and blank lines inside), quoting, ARG
// expansion, both -o forms, COPY to a directory.
func TestParseQuotingAndContinuation(t *testing.T) {
	p, err := parseDockerfile(goodDockerfile)
	if err != nil {
		t.Fatal(err)
	}
	if p.goVersion() != "go1.26.8" || p.arch != "arm64" {
		t.Errorf("go %s arch %s", p.goVersion(), p.arch)
	}
	want := []command{
		{line: 7, argv: []string{"go", "mod", "download"}},
		{line: 9, env: []string{"CGO_ENABLED=0", "GOOS=linux", "GOARCH=arm64"}, argv: []string{"go", "build", "-trimpath", "-ldflags=-s -w -X 'main.v=a b'", "-tags", "x y", "-o", "/out/a", "./cmd/a"}, out: "/out/a", oArg: 7},
		{line: 9, env: []string{"GOFLAGS=-mod=mod"}, argv: []string{"go", "build", "-ldflags", "-s", "-o=/out/b c", "./cmd/b"}, out: "/out/b c", oArg: 4},
	}
	if !reflect.DeepEqual(p.commands, want) {
		t.Errorf("commands:\n got %+v\nwant %+v", p.commands, want)
	}
	// The log's form of a command reads back as the same command.
	for _, c := range want {
		back, err := shellCommands(shellJoin(append(append([]string(nil), c.env...), c.argv...)), nil)
		if err != nil || len(back) != 1 || !reflect.DeepEqual(back[0].env, c.env) || !reflect.DeepEqual(back[0].argv, c.argv) {
			t.Errorf("%q read back as %+v (%v)", shellJoin(c.argv), back, err)
		}
	}
	wantStages := []stage{{name: "one", line: 14, copies: []copyFile{{line: 15, src: "/out/a", dst: "/usr/bin/a"}}, user: "1:1", entrypoint: []string{"/usr/bin/a", "x y"}}}
	if !reflect.DeepEqual(p.stages, wantStages) {
		t.Errorf("stages:\n got %+v\nwant %+v", p.stages, wantStages)
	}
}

// What cannot be followed is refused, naming the line.
func TestParseRefuses(t *testing.T) {
	head := "FROM golang:1.26.8 AS build\nARG TARGETOS=linux\nRUN go build -o /out/a ./cmd/a\n"
	for _, tc := range []struct{ name, src, want string }{
		{"RUN in a scratch stage", head + "FROM scratch AS one\nCOPY --from=build /out/a /a\nRUN echo hi\n", "line 6: RUN in scratch stage one"},
		{"ENV in a scratch stage", head + "FROM scratch AS one\nENV A=b\n", "line 5: ENV in scratch stage one"},
		{"shell-form ENTRYPOINT", head + "FROM scratch AS one\nENTRYPOINT /a\n", "line 5: ENTRYPOINT /a: only the JSON form"},
		{"COPY of what no build writes", head + "FROM scratch AS one\nCOPY --from=build /out/b /b\n", "line 5: COPY --from=build /out/b /b: /out/b is not a go build's output"},
		{"COPY with --chown", head + "FROM scratch AS one\nCOPY --from=build --chown=1 /out/a /a\n", "line 5: COPY"},
		{"another command", head + "RUN go build -o /out/b ./cmd/b && \\\n  strip /out/b\n", "line 4: RUN strip /out/b: only `go build"},
		{"a pipe", head + "RUN go build -o /out/b ./cmd/b | tee log\n", "line 4: RUN: shell syntax \"| \""},
		{"a semicolon", head + "RUN go mod download; go build -o /out/b ./cmd/b\n", "line 4: RUN: shell syntax \";"},
		{"an unknown variable", head + "RUN GOARCH=$TARGETARCH go build -o /out/b ./cmd/b\n", "line 4: RUN: $TARGETARCH is not an ARG"},
		{"command substitution", head + "RUN go build -ldflags \"-X main.v=$(git describe)\" -o /out/b ./cmd/b\n", "line 4: RUN: $( is not followed"},
		{"an unclosed quote", head + "RUN go build -ldflags '-s -o /out/b ./cmd/b\n", "line 4: RUN: an unclosed single quote"},
		{"no -o", head + "RUN go build ./cmd/b\n", "line 4: RUN go build ./cmd/b: go build needs -o"},
		{"two packages", head + "RUN go build -o /out/b ./cmd/b ./cmd/c\n", "line 4: RUN go build -o /out/b ./cmd/b ./cmd/c: go build needs exactly one package"},
		{"a RUN flag", head + "RUN --mount=type=cache,target=/root/.cache go build -o /out/b ./cmd/b\n", "line 4: RUN --mount"},
		{"ENV in the build stage", head + "ENV CGO_ENABLED=0\n", "line 4: ENV in the build stage"},
		{"an ARG without default", "FROM golang:1.26.8 AS build\nARG TARGETOS\n", "line 2: ARG TARGETOS has no default"},
		{"another base", head + "FROM alpine:3 AS one\n", "line 4: FROM alpine:3"},
		{"an unnamed stage", head + "FROM scratch\n", "line 4: FROM scratch: want FROM IMAGE AS NAME"},
		{"an escape directive", "# escape=`\n" + head, "line 1: escape directive"},
		{"two builds of one name", head + "RUN go build -o /bin/a ./cmd/x\n", "line 4: RUN: two go builds write a"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := parseDockerfile(tc.src)
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}

// The table and the Dockerfile's stages must name the same images.
func TestCheckRefs(t *testing.T) {
	p := readPlan(t)
	p.stages = append(p.stages, stage{name: "extra", line: 40})
	if err := checkRefs(p, refs); err == nil || !strings.Contains(err.Error(), "line 40: stage extra has no reference") {
		t.Errorf("an extra stage: %v", err)
	}
	p.stages = p.stages[:1]
	if err := checkRefs(p, refs); err == nil || !strings.Contains(err.Error(), "names stage manager, which is not defined") {
		t.Errorf("a missing stage: %v", err)
	}
}

func TestTheUsersBuildSettingsDoNotReachTheBuild(t *testing.T) {
	got := buildEnv([]string{"PATH=/usr/bin", "GOFLAGS=-tags=netgo", "GOAMD64=v3", "GOPROXY=https://proxy.example", "GOEXPERIMENT=arenas", "HOME=/root"})
	want := []string{"PATH=/usr/bin", "GOPROXY=https://proxy.example", "HOME=/root"}
	if !slices.Equal(got, want) {
		t.Fatalf("build environment %q, want %q: the Dockerfile's golang image sets no GOFLAGS, GOAMD64 or GOEXPERIMENT", got, want)
	}
}
