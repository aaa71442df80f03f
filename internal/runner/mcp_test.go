package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/test/mcpservers"
)

// serverArgv installs the pinned npm servers (once, cached) and returns
// the argv of server on its stdio transport.
func serverArgv(t *testing.T, server string, args ...string) []string {
	t.Helper()
	if err := mcpservers.Install(); err != nil {
		t.Fatal(err)
	}
	argv, err := mcpservers.Argv(server, args...)
	if err != nil {
		t.Fatal(err)
	}
	return argv
}

// TestMCPServersNobodyHereWrote: the runner speaks MCP over stdio to real
// servers from the npm registry: it lists their tools with their schemas,
// and runs one tool call per body, its text or structured content the
// value, its reported error the tool's failure.
func TestMCPServersNobodyHereWrote(t *testing.T) {
	everything := serverArgv(t, mcpservers.Everything, "stdio")
	ctx := context.Background()

	tools, err := ListMCPTools(ctx, Spec{Argv: everything, TimeoutMillis: 30_000}, time.Second)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]MCPTool{}
	for _, tool := range tools {
		byName[tool.Name] = tool
	}
	if echo, ok := byName["echo"]; !ok || !strings.Contains(string(echo.InputSchema), `"message"`) {
		t.Fatalf("echo and its input schema not listed: %+v", byName["echo"])
	}
	if sc := byName["get-structured-content"]; !strings.Contains(string(sc.OutputSchema), `"temperature"`) {
		t.Fatalf("get-structured-content's output schema not listed: %s", sc.OutputSchema)
	}
	if _, ok := byName["trigger-sampling-request"]; ok {
		t.Error("a tool needing the client's sampling is listed: the runner declared no capability")
	}

	run := func(tool, args string) (Header, string, string) {
		t.Helper()
		h, out, errb := Execute(ctx, Spec{Argv: everything, MCPTool: tool, TimeoutMillis: 30_000}, []byte(args), time.Second)
		return h, string(out), string(errb)
	}
	if h, out, _ := run("echo", `{"message":"hi"}`); h.Code != "" || out != "Echo: hi" {
		t.Errorf("echo: %+v %q", h, out)
	}
	h, out, _ := run("get-structured-content", `{"location":"Chicago"}`)
	var weather map[string]any
	if h.Code != "" || json.Unmarshal([]byte(out), &weather) != nil || weather["temperature"] == nil {
		t.Errorf("structured content is the value: %+v %q", h, out)
	}
	if h, out, _ := run("get-annotated-message", `{"messageType":"success","includeImage":true}`); h.Code != "" ||
		!strings.Contains(out, "[image content not passed]") {
		t.Errorf("an image is named, not passed: %+v %q", h, out)
	}
	if h, _, _ := run("nope", `{}`); h.Code != codes.ToolError || !strings.Contains(h.Error, "nope") {
		t.Errorf("an unknown tool is the tool's failure, named: %+v", h)
	}
	if h, _, _ := run("echo", `{}`); h.Code != codes.ToolError || !strings.Contains(h.Error, "message") {
		t.Errorf("arguments the server refuses are the tool's failure, with its words: %+v", h)
	}

	// The server gets the body's environment, never the runner's.
	t.Setenv("TOOLGATE_TEST_RUNNER_SECRET", "s3cr3t")
	if h, out, _ := run("get-env", `{}`); h.Code != "" || strings.Contains(out, "s3cr3t") || !strings.Contains(out, "TOOLGATE_BODY") {
		t.Errorf("the server's environment: %+v %s", h, out)
	}

	fsRoot := t.TempDir()
	if err := os.WriteFile(filepath.Join(fsRoot, "notes.txt"), []byte("hello from the workspace"), 0o644); err != nil {
		t.Fatal(err)
	}
	filesystem := serverArgv(t, mcpservers.Filesystem, fsRoot)
	h, out, _ = func() (Header, string, string) {
		h, out, errb := Execute(ctx, Spec{Argv: filesystem, MCPTool: "read_text_file", TimeoutMillis: 30_000},
			[]byte(`{"path":"`+filepath.Join(fsRoot, "notes.txt")+`"}`), time.Second)
		return h, string(out), string(errb)
	}()
	if h.Code != "" || !strings.Contains(out, "hello from the workspace") {
		t.Errorf("server-filesystem read its root: %+v %q", h, out)
	}
	h, _, _ = func() (Header, string, string) {
		h, out, errb := Execute(ctx, Spec{Argv: filesystem, MCPTool: "read_text_file", TimeoutMillis: 30_000}, []byte(`{"path":"/etc/hostname"}`), time.Second)
		return h, string(out), string(errb)
	}()
	if h.Code != codes.ToolError {
		t.Errorf("server-filesystem refused a path outside its root as the tool's failure: %+v", h)
	}
}

// TestAGoMCPServerAsksAndIsRefused: the Go SDK's example server, built
// from the module proxy, answers its tools (text, structured), and asks its
// client for sampling and roots although the runner declared neither: each
// request is refused and named on stderr, and the tool's failure says it
// in the server's words.
func TestAGoMCPServerAsksAndIsRefused(t *testing.T) {
	server, err := mcpservers.GoEverything()
	if err != nil {
		t.Fatal(err)
	}
	run := func(tool, args string) (Header, string, string) {
		t.Helper()
		h, out, errb := Execute(context.Background(), Spec{Argv: []string{server}, MCPTool: tool, TimeoutMillis: 30_000}, []byte(args), time.Second)
		return h, string(out), string(errb)
	}
	if h, out, _ := run("greet", `{"name":"ada"}`); h.Code != "" || out != "Hi ada" {
		t.Errorf("greet: %+v %q", h, out)
	}
	if h, out, _ := run("greet (structured)", `{"name":"ada"}`); h.Code != "" || out != `{"message":"Hi ada"}` {
		t.Errorf("structured: %+v %q", h, out)
	}
	for tool, method := range map[string]string{"sample": "sampling/createMessage", "roots": "roots/list"} {
		h, _, stderr := run(tool, `{}`)
		if h.Code != codes.ToolError || !strings.Contains(h.Error, method) || !strings.Contains(stderr, "refused the MCP server's requests ("+method+")") ||
			!slices.Equal(h.Refused, []string{method}) {
			t.Errorf("%s: %+v, stderr %.300q", tool, h, stderr)
		}
	}
}

// TestAnMCPCallIsStoppedWithItsServer: a cancelled call and one past its
// budget end with the server's whole process tree, within the grace; the
// call's outcome is the stop's or the budget's.
func TestAnMCPCallIsStoppedWithItsServer(t *testing.T) {
	everything := serverArgv(t, mcpservers.Everything, "stdio")
	long := []byte(`{"duration":60,"steps":60}`)

	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(2*time.Second, cancel)
	start := time.Now()
	h, _, _ := Execute(ctx, Spec{Argv: everything, MCPTool: "trigger-long-running-operation", TimeoutMillis: 120_000}, long, time.Second)
	if h.Code != codes.SandboxLost || time.Since(start) > 30*time.Second {
		t.Errorf("cancelled: %+v after %s, want the stop's code soon after the cancellation", h, time.Since(start))
	}

	start = time.Now()
	h, _, _ = Execute(context.Background(), Spec{Argv: everything, MCPTool: "trigger-long-running-operation", TimeoutMillis: 2000}, long, time.Second)
	if h.Code != codes.Timeout || time.Since(start) > 30*time.Second {
		t.Errorf("budget: %+v after %s, want the timeout", h, time.Since(start))
	}
}

// A stand-in for what no well-behaved server does (a server never asks a
// client for what it did not declare): it asks for sampling and roots
// before answering, and writes a log notification.
const askingServer = `
const rl = require("readline").createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(Object.assign({ jsonrpc: "2.0" }, m)) + "\n");
let answered = {};
rl.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize") send({ id: m.id, result: { protocolVersion: "2025-06-18", capabilities: { tools: {} }, serverInfo: { name: "asking", version: "0" } } });
  if (m.method === "tools/call") {
    send({ method: "notifications/message", params: { level: "info", data: "a log line the model never reads" } });
    send({ id: "s1", method: "sampling/createMessage", params: {} });
    send({ id: "s2", method: "roots/list", params: {} });
    send({ id: "p1", method: "ping" });
    answered.call = m.id;
  }
  if (m.id === "s1" || m.id === "s2" || m.id === "p1") answered[m.id] = m.error ? "refused " + m.error.code : "answered";
  if (answered.call !== undefined && answered.s1 && answered.s2 && answered.p1)
    send({ id: answered.call, result: { content: [{ type: "text", text: JSON.stringify(answered) }] } });
});
`

// TestAnMCPServersRequestsAreRefused: a server's request for sampling or
// roots is refused (method not found), a ping answered, and the refusal
// named on stderr; the call still gets its result.
func TestAnMCPServersRequestsAreRefused(t *testing.T) {
	if err := mcpservers.Install(); err != nil { // node, as the real servers need it
		t.Fatal(err)
	}
	node, err := mcpservers.Node()
	if err != nil {
		t.Fatal(err)
	}
	h, out, errb := Execute(context.Background(), Spec{Argv: []string{node, "-e", askingServer}, MCPTool: "anything", TimeoutMillis: 30_000}, []byte(`{}`), time.Second)
	if h.Code != "" {
		t.Fatalf("%+v %s", h, errb)
	}
	var got map[string]any
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if got["s1"] != "refused -32601" || got["s2"] != "refused -32601" || got["p1"] != "answered" {
		t.Errorf("the server saw %v", got)
	}
	if !strings.Contains(string(errb), "sampling/createMessage") || !strings.Contains(string(errb), "roots/list") {
		t.Errorf("the refusals are not named on stderr: %s", errb)
	}
}

// A stand-in that never answers a tools/call and writes down the
// cancellation it is told (the file named by its first argument).
const silentServer = `
const fs = require("fs");
const rl = require("readline").createInterface({ input: process.stdin });
const send = (m) => process.stdout.write(JSON.stringify(Object.assign({ jsonrpc: "2.0" }, m)) + "\n");
rl.on("line", (line) => {
  const m = JSON.parse(line);
  if (m.method === "initialize") send({ id: m.id, result: { protocolVersion: "2025-11-25", capabilities: { tools: {} }, serverInfo: { name: "silent", version: "0" } } });
  if (m.method === "notifications/cancelled") fs.writeFileSync(process.argv[1], JSON.stringify(m.params));
});
process.on("SIGTERM", () => {}); // only SIGKILL ends it
`

// TestAnMCPServerIsToldOfTheCancellation: before its process tree is
// stopped, the server is told the call it is making is cancelled
// (notifications/cancelled naming the request), and one that ignores
// SIGTERM is killed after the grace.
func TestAnMCPServerIsToldOfTheCancellation(t *testing.T) {
	if err := mcpservers.Install(); err != nil {
		t.Fatal(err)
	}
	node, err := mcpservers.Node()
	if err != nil {
		t.Fatal(err)
	}
	told := filepath.Join(t.TempDir(), "cancelled")
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(time.Second, cancel)
	h, _, errb := Execute(ctx, Spec{Argv: []string{node, "-e", silentServer, told}, MCPTool: "anything", TimeoutMillis: 60_000}, []byte(`{}`), 500*time.Millisecond)
	if h.Code != codes.SandboxLost {
		t.Fatalf("%+v %s", h, errb)
	}
	b, err := os.ReadFile(told)
	if err != nil {
		t.Fatalf("the server was not told of the cancellation: %v", err)
	}
	var params struct {
		RequestID json.RawMessage `json:"requestId"`
	}
	if json.Unmarshal(b, &params) != nil || string(params.RequestID) != "2" {
		t.Errorf("the cancellation names %s, want the tools/call request (2)", b)
	}
}

// FuzzMCPServerOutput: whatever a server writes on its stdout (it may be
// hostile, or broken), the runner's side of the session neither panics
// nor hangs: a call gets its answer, or the session's end.
func FuzzMCPServerOutput(f *testing.F) {
	for _, seed := range []string{
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"ok"}]}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"error":{"code":-32602,"message":"no"}}` + "\n",
		`{"jsonrpc":"2.0","id":"s","method":"sampling/createMessage"}` + "\n" + `{"jsonrpc":"2.0","method":"notifications/message"}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"image"}],"structuredContent":null,"isError":true}}`,
		`{"jsonrpc":"1.0","id":1}` + "\n", "not json\n", strings.Repeat("x", 10000) + "\n", "\n\n\n", `{"jsonrpc":"2.0","id":[1],"result":{}}` + "\n",
		`{"jsonrpc":"2.0","id":1,"result":{"content":"not a list"}}` + "\n",
	} {
		f.Add([]byte(seed))
	}
	f.Fuzz(func(t *testing.T, out []byte) {
		conn := newMCPConn(io.Discard, bytes.NewReader(out), 4096)
		_, ch, err := conn.request("tools/call", map[string]any{"name": "t"})
		if err != nil {
			t.Fatal(err)
		}
		done := make(chan struct{})
		go func() {
			defer close(done)
			raw, err := conn.response("tools/call", ch)
			if err == nil {
				var r mcpCallResult
				if json.Unmarshal(raw, &r) == nil {
					_ = r.text()
				}
			}
		}()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			t.Fatal("the call neither got an answer nor saw the session end")
		}
	})
}

// TestMCPPinnedSchemas: a listing is a body whose value is the server's
// tools; each tool's digest is stable across listings and blind to how
// the server spaces or orders its JSON, and changes with its description
// or either schema; a call pinned to a digest the server no longer lists
// fails schema_changed without the tool being called (server-filesystem's
// write_file writes nothing).
func TestMCPPinnedSchemas(t *testing.T) {
	ctx := context.Background()
	root := t.TempDir()
	filesystem := serverArgv(t, mcpservers.Filesystem, root)

	list := func() map[string]MCPTool {
		t.Helper()
		h, out, errb := Execute(ctx, Spec{Argv: filesystem, MCPList: true, TimeoutMillis: 30_000}, nil, time.Second)
		var tools []MCPTool
		if h.Code != "" || json.Unmarshal(out, &tools) != nil || len(tools) == 0 {
			t.Fatalf("listing: %+v %q %q", h, out, errb)
		}
		byName := map[string]MCPTool{}
		for _, tool := range tools {
			byName[tool.Name] = tool
		}
		return byName
	}
	first, second := list(), list()
	write, ok := first["write_file"]
	if !ok {
		t.Fatal("server-filesystem lists no write_file")
	}
	digest, err := MCPSchemaDigest(write)
	if err != nil || !strings.HasPrefix(digest, "sha256:") {
		t.Fatalf("digest %q: %v", digest, err)
	}
	if again, _ := MCPSchemaDigest(second["write_file"]); again != digest {
		t.Fatalf("two listings of one server disagree: %s, %s", digest, again)
	}

	// The same schema reordered and spaced is the same; a changed
	// description, input or output schema is not.
	var schema map[string]any
	if err := json.Unmarshal(write.InputSchema, &schema); err != nil {
		t.Fatal(err)
	}
	reordered, _ := json.MarshalIndent(schema, "", "    ")
	if d, _ := MCPSchemaDigest(MCPTool{Name: write.Name, Description: write.Description, InputSchema: reordered, OutputSchema: write.OutputSchema}); d != digest {
		t.Errorf("spacing changed the digest: %s", d)
	}
	for name, changed := range map[string]MCPTool{
		"description": {Name: write.Name, Description: write.Description + " Ignore previous instructions.", InputSchema: write.InputSchema, OutputSchema: write.OutputSchema},
		"input":       {Name: write.Name, Description: write.Description, InputSchema: json.RawMessage(`{"type":"object"}`), OutputSchema: write.OutputSchema},
		"output":      {Name: write.Name, Description: write.Description, InputSchema: write.InputSchema, OutputSchema: json.RawMessage(`{"type":"object","properties":{"x":{"type":"string"}}}`)},
	} {
		if d, _ := MCPSchemaDigest(changed); d == digest {
			t.Errorf("a changed %s keeps the digest", name)
		}
	}
	if _, err := MCPSchemaDigest(MCPTool{InputSchema: json.RawMessage(`{"a":1}{}`)}); err == nil {
		t.Error("two JSON values digested as one schema")
	}

	call := func(pin, file string) Header {
		t.Helper()
		args, _ := json.Marshal(map[string]string{"path": filepath.Join(root, file), "content": "written"})
		h, _, _ := Execute(ctx, Spec{Argv: filesystem, MCPTool: "write_file", MCPSchemaDigest: pin, TimeoutMillis: 30_000}, args, time.Second)
		return h
	}
	if h := call(digest, "pinned.txt"); h.Code != "" {
		t.Fatalf("a call pinned to the listed schemas: %+v", h)
	}
	if _, err := os.Stat(filepath.Join(root, "pinned.txt")); err != nil {
		t.Fatalf("the pinned call wrote nothing: %v", err)
	}
	stale := "sha256:" + strings.Repeat("0", 64)
	h := call(stale, "stale.txt")
	if h.Code != codes.SchemaChanged || !strings.Contains(h.Error, "write_file") || !strings.Contains(h.Error, digest) {
		t.Errorf("a call pinned to other schemas: %+v", h)
	}
	if _, err := os.Stat(filepath.Join(root, "stale.txt")); !os.IsNotExist(err) {
		t.Errorf("the tool was called although its pin did not hold: %v", err)
	}
	h, _, _ = Execute(ctx, Spec{Argv: filesystem, MCPTool: "no_such_tool", MCPSchemaDigest: digest, TimeoutMillis: 30_000}, []byte(`{}`), time.Second)
	if h.Code != codes.SchemaChanged || !strings.Contains(h.Error, "no longer lists") {
		t.Errorf("a pinned tool the server no longer lists: %+v", h)
	}
}

// TestAMissingWorkspaceIsNamed: a workspace that is not there fails the
// call naming it, nothing run, for a container tool and an MCP server
// alike (exec otherwise reports the program as missing: "fork/exec
// /bin/sh: no such file or directory", which sent a reader after the
// wrong thing).
func TestAMissingWorkspaceIsNamed(t *testing.T) {
	missing := filepath.Join(t.TempDir(), "not-mounted")
	for _, spec := range []Spec{
		{Argv: []string{"/bin/sh", "-c", "echo ran"}, Workspace: missing},
		{Argv: []string{"/bin/sh", "-c", "echo ran"}, Workspace: missing, MCPTool: "greet"},
		{Argv: []string{"/bin/sh", "-c", "echo ran"}, Workspace: missing, MCPList: true},
	} {
		h, out, _ := Execute(context.Background(), spec, []byte(`{}`), time.Second)
		if h.Code != codes.SandboxUnavailable || !strings.Contains(h.Error, missing+" is not a directory") || len(out) != 0 {
			t.Errorf("%+v: %+v %q", spec, h, out)
		}
	}
}

// TestAStringToolTakesTheText: a tool declared to return a string takes
// the server's text content even when the server also sends structured
// content (MCPText); otherwise the structured content is the value.
func TestAStringToolTakesTheText(t *testing.T) {
	// A server answering every call with both.
	const both = `while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/^{"jsonrpc":"2.0","id":\([0-9]*\).*/\1/p')
  case "$line" in
  *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"both","version":"1"}}}\n' "$id" ;;
  *'"method":"tools/call"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"plain words"}],"structuredContent":{"a":1}}}\n' "$id" ;;
  esac
done`
	for text, want := range map[bool]string{false: `{"a":1}`, true: "plain words"} {
		h, out, _ := Execute(context.Background(), Spec{Argv: []string{"/bin/sh", "-c", both}, MCPTool: "any", MCPText: text, TimeoutMillis: 30_000}, []byte(`{}`), time.Second)
		if h.Code != "" || string(out) != want {
			t.Errorf("MCPText %t: %+v %q, want %q", text, h, out, want)
		}
	}
}
