package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/codes"
)

// Sub-calls (Code Mode). While a body runs, the runner offers it a local
// endpoint: a Unix socket named by $TOOLGATE_CALL_SOCKET, in a directory
// only the tool's user can reach. A body asks for another tool of its
// session with one JSON line ({"tool":…,"arguments":…}) and reads one JSON
// line back (SubResult); "$TOOLGATE_RUNNER call TOOL ARGUMENTS" does that
// for a shell script. The runner forwards the sub-call to the manager (over
// the channel, or in-process for the Process provider), which runs it
// through the whole pipeline as its own ToolCall, nested under the calling
// one, and answers with its settled result.

// SubCall is a call a body makes to another tool of its session.
type SubCall struct {
	// ID is unique within the calling attempt ("1", "2", … in the order the
	// body made them): the same ID is the same sub-call, answered once.
	ID        string `json:"id"`
	Tool      string `json:"tool"`
	Arguments string `json:"arguments"`
}

// SubResult is a sub-call's settled result.
type SubResult struct {
	ID      string `json:"id,omitempty"`
	Outcome string `json:"outcome"`
	Code    string `json:"code,omitempty"`
	Message string `json:"message,omitempty"`
	// Value is the result's value as JSON text; Content what the model
	// would see.
	Value   string `json:"value,omitempty"`
	Content string `json:"content,omitempty"`
}

// SubCaller runs a sub-call to its result.
type SubCaller func(ctx context.Context, call SubCall) SubResult

// Environment of a body that may make sub-calls.
const (
	EnvCallSocket = "TOOLGATE_CALL_SOCKET"
	EnvRunner     = "TOOLGATE_RUNNER"
)

// maxSubCallBytes bounds one sub-call request line.
const maxSubCallBytes = 256 << 10

// serveSubCalls listens for the body's sub-calls until ctx ends and
// returns the socket's path ("" and no listener when it cannot).
func serveSubCalls(ctx context.Context, caller SubCaller) (string, func()) {
	dir, err := os.MkdirTemp("", "toolgate-calls-")
	if err != nil {
		return "", func() {}
	}
	path := filepath.Join(dir, "call.sock")
	ln, err := net.Listen("unix", path)
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", func() {}
	}
	ctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var mu sync.Mutex
	next := 0
	wg.Add(1)
	go func() {
		defer wg.Done()
		go func() { <-ctx.Done(); _ = ln.Close() }()
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			next++
			id := strconv.Itoa(next)
			mu.Unlock()
			wg.Add(1)
			go func() {
				defer wg.Done()
				defer func() { _ = conn.Close() }()
				res := answerSubCall(ctx, conn, id, caller)
				line, _ := json.Marshal(res)
				_, _ = conn.Write(append(line, '\n'))
			}()
		}
	}()
	return path, func() {
		cancel()
		wg.Wait()
		_ = os.RemoveAll(dir)
	}
}

func answerSubCall(ctx context.Context, conn net.Conn, id string, caller SubCaller) SubResult {
	_ = conn.SetReadDeadline(time.Now().Add(10 * time.Second))
	line, err := readLine(bufio.NewReader(conn), maxSubCallBytes)
	if err != nil {
		return SubResult{Outcome: "Failed", Code: codes.InvalidArguments, Message: "no sub-call request: " + err.Error()}
	}
	var req struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}
	if err := json.Unmarshal([]byte(line), &req); err != nil || req.Tool == "" {
		return SubResult{Outcome: "Failed", Code: codes.InvalidArguments, Message: `a sub-call is one JSON line: {"tool":"NAME","arguments":{…}}`}
	}
	args := string(req.Arguments)
	if args == "" {
		args = "{}"
	}
	res := caller(ctx, SubCall{ID: id, Tool: req.Tool, Arguments: args})
	res.ID = id
	return res
}

// CallMain is the runner's "call" command, for a body's shell script:
// "toolgate-runner call TOOL [ARGUMENTS]" makes one sub-call through
// $TOOLGATE_CALL_SOCKET, prints its value (its content when it has no
// value) on stdout, and exits 0 when it succeeded; otherwise it prints the
// code and message on stderr and exits 1.
func CallMain(args []string, stdout, stderr io.Writer) int {
	if len(args) < 1 || len(args) > 2 {
		fmt.Fprintln(stderr, "usage: toolgate-runner call TOOL [ARGUMENTS-JSON]")
		return 2
	}
	arguments := "{}"
	if len(args) == 2 {
		arguments = args[1]
	}
	if !json.Valid([]byte(arguments)) {
		fmt.Fprintln(stderr, "toolgate-runner call: the arguments are not JSON")
		return 2
	}
	res, err := Call(os.Getenv(EnvCallSocket), args[0], arguments)
	if err != nil {
		fmt.Fprintln(stderr, "toolgate-runner call:", err)
		return 1
	}
	if res.Outcome != "Succeeded" {
		fmt.Fprintf(stderr, "%s %s: %s\n", res.Outcome, res.Code, res.Message)
		return 1
	}
	out := res.Value
	if out == "" {
		out = res.Content
	}
	fmt.Fprintln(stdout, out)
	return 0
}

// Call makes one sub-call through the socket at path.
func Call(path, tool, arguments string) (SubResult, error) {
	if path == "" {
		return SubResult{}, errors.New("no sub-call endpoint ($" + EnvCallSocket + " is not set): this body cannot make sub-calls")
	}
	conn, err := net.Dial("unix", path)
	if err != nil {
		return SubResult{}, err
	}
	defer func() { _ = conn.Close() }()
	line, err := json.Marshal(struct {
		Tool      string          `json:"tool"`
		Arguments json.RawMessage `json:"arguments"`
	}{tool, json.RawMessage(arguments)})
	if err != nil {
		return SubResult{}, err
	}
	if _, err := conn.Write(append(line, '\n')); err != nil {
		return SubResult{}, err
	}
	answer, err := bufio.NewReaderSize(conn, 64<<10).ReadString('\n')
	if err != nil && answer == "" {
		return SubResult{}, err
	}
	var res SubResult
	if err := json.Unmarshal([]byte(strings.TrimSpace(answer)), &res); err != nil {
		return SubResult{}, err
	}
	return res, nil
}
