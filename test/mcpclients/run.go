package mcpclients

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strconv"
	"strings"
	"sync"
)

// Dir is the directory of the client scripts.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

var installOnce = sync.OnceValue(func() error {
	out, err := exec.Command(filepath.Join(Dir(), "..", "..", "hack", "npm-clients.sh")).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/npm-clients.sh: %w\n%s", err, out)
	}
	return nil
})

// Install installs the pinned clients (once per process; the cache makes a
// second run cheap).
func Install() error { return installOnce() }

// Target is where and as whom a script calls.
type Target struct {
	// URL is the session's MCP endpoint.
	URL string
	// Token is a bearer token for the gateway's audience.
	Token string
	// Turn is the first model turn the script uses; it uses three.
	Turn int64
	// Env adds variables (the script's own options).
	Env []string
	// CancelWhen returns once the call the script cancels runs in the
	// cluster; the script then aborts it. An error leaves it running (the
	// script then fails on its own deadline, or the test's).
	CancelWhen func(context.Context) error
}

// Report is what a script reported, by step.
type Report struct {
	Steps map[string]json.RawMessage
	// Lines are the other lines of stdout.
	Lines  []string
	Stderr string
}

// Into decodes the step into v.
func (r *Report) Into(step string, v any) error {
	raw, ok := r.Steps[step]
	if !ok {
		return fmt.Errorf("the client reported no step %q (stderr: %s)", step, r.Stderr)
	}
	return json.Unmarshal(raw, v)
}

// Run runs script (a file of Dir) against t and returns its report; an
// error says the script failed, with its output.
func Run(ctx context.Context, script string, t Target) (*Report, error) {
	if err := Install(); err != nil {
		return nil, err
	}
	cmd := exec.CommandContext(ctx, "node", filepath.Join(Dir(), script))
	cmd.Env = append(os.Environ(), "MCP_URL="+t.URL, "MCP_TOKEN="+t.Token, "TOOLGATE_TURN="+strconv.FormatInt(t.Turn, 10))
	cmd.Env = append(cmd.Env, t.Env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	wctx, stopWatching := context.WithCancel(ctx)
	go func() {
		// Closing stdin lets the script's event loop end.
		defer func() { _ = stdin.Close() }()
		if t.CancelWhen != nil && t.CancelWhen(wctx) == nil {
			_, _ = stdin.Write([]byte("cancel\n"))
		}
	}()
	err = cmd.Wait()
	stopWatching()
	r := &Report{Steps: map[string]json.RawMessage{}, Stderr: stderr.String()}
	out := stdout.String()
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		var s struct {
			Step string `json:"step"`
		}
		if line == "" || json.Unmarshal([]byte(line), &s) != nil || s.Step == "" {
			r.Lines = append(r.Lines, line)
			continue
		}
		r.Steps[s.Step] = json.RawMessage(line)
	}
	if err != nil {
		return r, fmt.Errorf("%s: %w\nstdout:\n%s\nstderr:\n%s", script, err, out, r.Stderr)
	}
	return r, nil
}

// Result is a tool result as a script reports it.
type Result struct {
	IsError    bool           `json:"isError"`
	Text       string         `json:"text"`
	Meta       map[string]any `json:"meta"`
	Structured any            `json:"structured"`
}

// Failure is a thrown error as a script reports it.
type Failure struct {
	Name    string `json:"name"`
	Message string `json:"message"`
	Code    any    `json:"code"`
}

// Scenario is what the common scenario (common.mjs) reports.
type Scenario struct {
	Connected struct {
		Era             string `json:"era"`
		ProtocolVersion string `json:"protocolVersion"`
	}
	List struct {
		Tools []string `json:"tools"`
	}
	Turn struct {
		Results  []Result `json:"results"`
		Progress []string `json:"progress"`
	}
	Denied    Result
	Cancelled struct {
		Resolved   *Result  `json:"resolved"`
		Error      *Failure `json:"error"`
		SawRunning bool     `json:"sawRunning"`
	}
}

// Scenario decodes the common scenario's steps.
func (r *Report) Scenario() (*Scenario, error) {
	s := &Scenario{}
	for step, v := range map[string]any{"connected": &s.Connected, "list": &s.List, "turn": &s.Turn, "denied": &s.Denied, "cancelled": &s.Cancelled} {
		if err := r.Into(step, v); err != nil {
			return nil, err
		}
	}
	return s, nil
}
