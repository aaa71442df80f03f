package runner

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/internal/mcpschema"
	"github.com/toolgate/toolgate/internal/textutil"
)

// MCP servers as tools. A tool whose Spec names an MCPTool is an MCP
// server (Spec.Argv, over its stdio transport) and one of its tools: the
// runner starts the server as the body, initializes it, makes the one
// tools/call of the call with the call's arguments, and answers with its
// result; the server is then stopped (one call per sandbox, as every
// body). A cancellation or the budget first tells the server
// (notifications/cancelled), then stops its process tree as any body's.
// The server's requests to the client (sampling, elicitation, roots) are
// refused: toolgate offers them none, and says so on stderr, which never
// reaches the model past post-execute; its notifications (logs, progress)
// are dropped. ListMCPTools lists a server's tools (discovery, and the
// body of a Spec.MCPList); a call whose Spec pins the tool's schemas
// (MCPSchemaDigest) lists them first and calls the tool only if they are
// the pinned ones.

// MCPProtocolVersion is the protocol version the runner asks for; it
// accepts a server answering any of mcpVersions (the fields it uses are
// the same in each).
const MCPProtocolVersion = "2025-11-25"

var mcpVersions = map[string]bool{"2025-11-25": true, "2025-06-18": true, "2025-03-26": true, "2024-11-05": true}

// Bounds of a server's listing.
const (
	maxMCPPages = 100
	maxMCPTools = 1000
)

// MCPTool is a tool as an MCP server lists it (tools/list).
type MCPTool struct {
	Name         string          `json:"name"`
	Title        string          `json:"title,omitempty"`
	Description  string          `json:"description,omitempty"`
	InputSchema  json.RawMessage `json:"inputSchema,omitempty"`
	OutputSchema json.RawMessage `json:"outputSchema,omitempty"`
	Annotations  json.RawMessage `json:"annotations,omitempty"`
}

// rpcMessage is one JSON-RPC 2.0 message of the stdio transport (one line).
type rpcMessage struct {
	JSONRPC string          `json:"jsonrpc"`
	ID      json.RawMessage `json:"id,omitempty"`
	Method  string          `json:"method,omitempty"`
	Params  json.RawMessage `json:"params,omitempty"`
	Result  json.RawMessage `json:"result,omitempty"`
	Error   *rpcError       `json:"error,omitempty"`
}

type rpcError struct {
	Code    int    `json:"code"`
	Message string `json:"message"`
}

// JSON-RPC error codes the runner reads or answers with.
const (
	rpcMethodNotFound = -32601
	rpcInvalidParams  = -32602
)

// mcpConn is the runner's side of one stdio session with a server.
type mcpConn struct {
	mu      sync.Mutex // writes, pending, refused
	w       io.Writer
	nextID  int64
	pending map[string]chan rpcMessage
	refused []string
	ended   chan struct{} // closed when the server's output ends
	err     error         // why it ended (set before ended closes)
}

// newMCPConn reads the server's messages from r (each at most max bytes)
// until it ends, and writes to w.
func newMCPConn(w io.Writer, r io.Reader, max int) *mcpConn {
	c := &mcpConn{w: w, pending: map[string]chan rpcMessage{}, ended: make(chan struct{})}
	go c.read(r, max)
	return c
}

func (c *mcpConn) read(r io.Reader, max int) {
	br := bufio.NewReaderSize(r, 64<<10)
	var err error
	for {
		var line []byte
		if line, err = readMessage(br, max); err != nil {
			break
		}
		if len(strings.TrimSpace(string(line))) == 0 {
			continue
		}
		var m rpcMessage
		if json.Unmarshal(line, &m) != nil || m.JSONRPC != "2.0" {
			err = errors.New("the MCP server wrote a line that is not a JSON-RPC 2.0 message on its stdout")
			break
		}
		c.handle(m)
	}
	if errors.Is(err, io.EOF) {
		err = errors.New("the MCP server's output ended")
	}
	c.mu.Lock()
	c.err = err
	c.mu.Unlock()
	close(c.ended)
}

// readMessage reads one newline-terminated message of at most max bytes.
func readMessage(br *bufio.Reader, max int) ([]byte, error) {
	var line []byte
	for {
		part, err := br.ReadSlice('\n')
		line = append(line, part...)
		if len(line) > max {
			return nil, fmt.Errorf("a message of the MCP server exceeds %d bytes", max)
		}
		switch {
		case err == nil:
			return line, nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF) && len(line) > 0:
			return line, nil
		default:
			return nil, err
		}
	}
}

// handle routes one message: a response to its waiter, a request of the
// server's answered (ping) or refused, a notification dropped.
func (c *mcpConn) handle(m rpcMessage) {
	switch {
	case m.Method != "" && len(m.ID) > 0:
		if m.Method == "ping" {
			_ = c.send(rpcMessage{JSONRPC: "2.0", ID: m.ID, Result: json.RawMessage(`{}`)})
			return
		}
		c.mu.Lock()
		if len(c.refused) < 16 {
			c.refused = append(c.refused, textutil.Truncate(textutil.OneLine(m.Method, 128), 128))
		}
		c.mu.Unlock()
		_ = c.send(rpcMessage{JSONRPC: "2.0", ID: m.ID, Error: &rpcError{Code: rpcMethodNotFound,
			Message: "toolgate offers MCP servers no " + m.Method + ": a tool call runs without a client to ask"}})
	case m.Method != "":
		// A notification (a log line, progress, a list changed): nothing
		// of it reaches the model.
	default:
		c.mu.Lock()
		ch := c.pending[string(m.ID)]
		delete(c.pending, string(m.ID))
		c.mu.Unlock()
		if ch != nil {
			ch <- m
		}
	}
}

// send writes one message as one line.
func (c *mcpConn) send(m rpcMessage) error {
	b, err := json.Marshal(m)
	if err != nil {
		return err
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err = c.w.Write(append(b, '\n'))
	return err
}

// request sends a request and returns its ID and where its response
// arrives.
func (c *mcpConn) request(method string, params any) (json.RawMessage, <-chan rpcMessage, error) {
	raw, err := json.Marshal(params)
	if err != nil {
		return nil, nil, err
	}
	c.mu.Lock()
	c.nextID++
	id := json.RawMessage(fmt.Sprint(c.nextID))
	ch := make(chan rpcMessage, 1)
	c.pending[string(id)] = ch
	c.mu.Unlock()
	if err := c.send(rpcMessage{JSONRPC: "2.0", ID: id, Method: method, Params: raw}); err != nil {
		return nil, nil, fmt.Errorf("the MCP server's input is closed: %w", err)
	}
	return id, ch, nil
}

// call sends a request and waits for its response, or for the server's
// output to end.
func (c *mcpConn) call(method string, params any) (json.RawMessage, error) {
	_, ch, err := c.request(method, params)
	if err != nil {
		return nil, err
	}
	return c.response(method, ch)
}

func (c *mcpConn) response(method string, ch <-chan rpcMessage) (json.RawMessage, error) {
	select {
	case m := <-ch:
		if m.Error != nil {
			return nil, &mcpError{method: method, rpc: *m.Error}
		}
		return m.Result, nil
	case <-c.ended:
		c.mu.Lock()
		defer c.mu.Unlock()
		return nil, fmt.Errorf("the MCP server did not answer %s: %w", method, c.err)
	}
}

// mcpError is a server's JSON-RPC error answer.
type mcpError struct {
	method string
	rpc    rpcError
}

func (e *mcpError) Error() string {
	return fmt.Sprintf("the MCP server answered %s with error %d: %s", e.method, e.rpc.Code, e.rpc.Message)
}

// pinError says the server's tool is not the one its profile pinned.
type pinError struct{ why string }

func (e *pinError) Error() string { return e.why }

// initialize opens the session: the server must answer a protocol version
// the runner speaks.
func (c *mcpConn) initialize() error {
	res, err := c.call("initialize", map[string]any{
		"protocolVersion": MCPProtocolVersion,
		"capabilities":    map[string]any{},
		"clientInfo":      map[string]string{"name": "toolgate-runner", "version": "1"},
	})
	if err != nil {
		return err
	}
	var init struct {
		ProtocolVersion string `json:"protocolVersion"`
	}
	if err := json.Unmarshal(res, &init); err != nil {
		return fmt.Errorf("the MCP server's answer to initialize is not an InitializeResult: %w", err)
	}
	if !mcpVersions[init.ProtocolVersion] {
		return fmt.Errorf("the MCP server speaks protocol version %q, which toolgate does not", textutil.Truncate(init.ProtocolVersion, 64))
	}
	return c.send(rpcMessage{JSONRPC: "2.0", Method: "notifications/initialized"})
}

// refusedMethods are the methods of the server's requests refused.
func (c *mcpConn) refusedMethods() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return slices.Clone(c.refused)
}

// refusals says which of the server's requests were refused ("" if none).
func (c *mcpConn) refusals() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	if len(c.refused) == 0 {
		return ""
	}
	return "toolgate-runner: refused the MCP server's requests (" + strings.Join(c.refused, ", ") + "): toolgate offers MCP servers no sampling, elicitation or roots\n"
}

// mcpCallResult is a tools/call result.
type mcpCallResult struct {
	Content           []mcpContent    `json:"content"`
	StructuredContent json.RawMessage `json:"structuredContent,omitempty"`
	IsError           bool            `json:"isError,omitempty"`
}

type mcpContent struct {
	Type string `json:"type"`
	Text string `json:"text,omitempty"`
}

// text is the result's text content, one item per line; an item of
// another type is named, not passed (toolgate passes text and structured
// content).
func (r mcpCallResult) text() string {
	var parts []string
	for _, c := range r.Content {
		if c.Type == "text" {
			parts = append(parts, c.Text)
			continue
		}
		parts = append(parts, "["+textutil.Truncate(textutil.OneLine(c.Type, 64), 64)+" content not passed]")
	}
	return strings.Join(parts, "\n")
}

// startServer starts the server b runs, its stderr kept in stderr, and
// opens the session's connection over its stdio (messages of at most max
// bytes).
func startServer(ctx context.Context, b *body, spec Spec, stderr *Bounded, max int) (*mcpConn, error) {
	in, err := b.cmd.StdinPipe()
	if err != nil {
		return nil, fmt.Errorf("the MCP server could not start: %w", err)
	}
	out, err := b.cmd.StdoutPipe()
	if err != nil {
		return nil, fmt.Errorf("the MCP server could not start: %w", err)
	}
	b.cmd.Stderr = stderr
	if spec.Await != "" {
		await(ctx, spec.Await)
	}
	if err := b.cmd.Start(); err != nil {
		return nil, fmt.Errorf("the MCP server could not start: %w", err)
	}
	return newMCPConn(in, out, max), nil
}

// executeMCP runs spec's server and its tool MCPTool once with arguments.
func executeMCP(ctx context.Context, spec Spec, arguments []byte, grace time.Duration, calls Calls) (Header, []byte, []byte) {
	limit := spec.MaxOutputBytes
	if limit <= 0 {
		limit = 1 << 20
	}
	stderr := &Bounded{Limit: MaxStderrBytes}
	b := newBody(ctx, spec, grace, calls)
	defer b.cleanup()
	// A message may carry the whole value, escaped, and its envelope.
	max := 2*limit + 64<<10
	if spec.MCPSchemaDigest != "" {
		max = maxListMessage // the pin is checked on a listing
	}
	conn, err := startServer(ctx, b, spec, stderr, max)
	if err != nil {
		return Header{Error: err.Error(), Code: codes.ToolError, ExitCode: 127}, nil, nil
	}
	var (
		res    mcpCallResult
		resErr error
		callID json.RawMessage
		idSet  = make(chan struct{})
	)
	answered := make(chan struct{})
	go func() {
		defer close(answered)
		if resErr = conn.initialize(); resErr != nil {
			close(idSet)
			return
		}
		if spec.MCPSchemaDigest != "" {
			// The pin is checked on the server this call runs, not on
			// an earlier listing: an image whose tag moved, or a server
			// whose schemas depend on anything but its spec, is caught.
			changed, err := conn.checkPin(spec.MCPTool, spec.MCPSchemaDigest)
			if err == nil && changed != "" {
				err = &pinError{changed}
			}
			if err != nil {
				resErr = err
				close(idSet)
				return
			}
		}
		id, ch, err := conn.request("tools/call", map[string]any{"name": spec.MCPTool, "arguments": json.RawMessage(arguments)})
		callID = id
		close(idSet)
		if err != nil {
			resErr = err
			return
		}
		raw, err := conn.response("tools/call", ch)
		if err != nil {
			resErr = err
			return
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			resErr = fmt.Errorf("the MCP server's answer to tools/call is not a CallToolResult: %w", err)
		}
	}()
	b.onStop = func() {
		// Told first, then stopped: a server may end its work cleanly
		// within the grace.
		select {
		case <-idSet:
			if callID != nil {
				_ = conn.send(rpcMessage{JSONRPC: "2.0", Method: "notifications/cancelled",
					Params: json.RawMessage(`{"requestId":` + string(callID) + `,"reason":"the call was cancelled or ran out of time"}`)})
			}
		default:
		}
	}
	h := b.wait(ctx, spec, grace, answered)
	<-answered // the server is gone: its output ended, and the call with it
	diag := append([]byte(conn.refusals()), stderr.Bytes()...)
	h.Refused = conn.refusedMethods()
	if h.Code != "" {
		return h, nil, diag // the budget's or the stop's
	}
	// The server was stopped once it answered: how it exited then is not
	// the tool's outcome.
	h.ExitCode, h.Signal = 0, ""
	var rpcErr *mcpError
	var pinErr *pinError
	switch {
	case errors.As(resErr, &pinErr):
		h.Code, h.Error = codes.SchemaChanged, pinErr.why
		return h, nil, diag
	case errors.As(resErr, &rpcErr) && rpcErr.method == "tools/call" && rpcErr.rpc.Code == rpcInvalidParams:
		h.Code, h.Error, h.ExitCode = codes.InvalidArguments, resErr.Error(), 1
		return h, nil, diag
	case resErr != nil:
		h.Code, h.Error, h.ExitCode = codes.ToolError, resErr.Error(), 1
		return h, nil, diag
	case res.IsError:
		h.Code, h.Error, h.ExitCode = codes.ToolError, "the MCP tool reported an error: "+res.text(), 1
		return h, nil, diag
	}
	value := []byte(res.text())
	if len(res.StructuredContent) > 0 && string(res.StructuredContent) != "null" && !spec.MCPText {
		value = res.StructuredContent
	}
	if len(value) > limit {
		value, h.Truncated = value[:limit], true
	}
	return h, value, diag
}

// ListMCPTools starts spec's server (Spec.Argv), lists its tools
// (following every page, within bounds) and stops it. The error says what
// went wrong, with the server's stderr.
func ListMCPTools(ctx context.Context, spec Spec, grace time.Duration) ([]MCPTool, error) {
	if len(spec.Argv) == 0 {
		return nil, errors.New("no argv")
	}
	stderr := &Bounded{Limit: MaxStderrBytes}
	b := newBody(ctx, spec, grace, Calls{})
	defer b.cleanup()
	conn, err := startServer(ctx, b, spec, stderr, maxListMessage)
	if err != nil {
		return nil, err
	}
	var tools []MCPTool
	var listErr error
	listed := make(chan struct{})
	go func() {
		defer close(listed)
		if listErr = conn.initialize(); listErr == nil {
			tools, listErr = conn.listTools()
		}
	}()
	h := b.wait(ctx, spec, grace, listed)
	<-listed
	switch {
	case h.Code != "":
		return nil, fmt.Errorf("%s%s", h.Error, stderrTail(stderr))
	case listErr != nil:
		return nil, fmt.Errorf("%w%s", listErr, stderrTail(stderr))
	}
	return tools, nil
}

// maxListMessage bounds one message of a server's listing.
const maxListMessage = 8 << 20

// executeMCPList is the body of a listing (Spec.MCPList): its value is the
// server's tools as JSON, its error the listing's.
func executeMCPList(ctx context.Context, spec Spec, grace time.Duration) (Header, []byte, []byte) {
	tools, err := ListMCPTools(ctx, spec, grace)
	if err != nil {
		code := codes.ToolError
		if ctx.Err() != nil {
			code = codes.Cancelled
		}
		return Header{Error: err.Error(), Code: code, ExitCode: 1}, nil, nil
	}
	value, err := json.Marshal(tools)
	if err != nil {
		return Header{Error: err.Error(), Code: codes.ToolError, ExitCode: 1}, nil, nil
	}
	return Header{}, value, nil
}

// listTools asks the server for its tools, following every page within
// bounds.
func (c *mcpConn) listTools() ([]MCPTool, error) {
	var tools []MCPTool
	cursor := ""
	for page := 0; page < maxMCPPages; page++ {
		params := map[string]any{}
		if cursor != "" {
			params["cursor"] = cursor
		}
		raw, err := c.call("tools/list", params)
		if err != nil {
			return nil, err
		}
		var res struct {
			Tools      []MCPTool `json:"tools"`
			NextCursor string    `json:"nextCursor,omitempty"`
		}
		if err := json.Unmarshal(raw, &res); err != nil {
			return nil, fmt.Errorf("the MCP server's answer to tools/list is not a ListToolsResult: %w", err)
		}
		tools = append(tools, res.Tools...)
		if len(tools) > maxMCPTools {
			return nil, fmt.Errorf("the MCP server lists more than %d tools", maxMCPTools)
		}
		if cursor = res.NextCursor; cursor == "" {
			return tools, nil
		}
	}
	return nil, fmt.Errorf("the MCP server's tools/list has more than %d pages", maxMCPPages)
}

// checkPin lists the server's tools and says why name is not the tool
// pinned as digest ("" when it is).
func (c *mcpConn) checkPin(name, digest string) (string, error) {
	tools, err := c.listTools()
	if err != nil {
		return "", err
	}
	for _, t := range tools {
		if t.Name != name {
			continue
		}
		got, err := MCPSchemaDigest(t)
		switch {
		case err != nil:
			return "the MCP server lists the tool " + textutil.Truncate(name, 256) + " with schemas that are not JSON: " + err.Error(), nil
		case got != digest:
			return fmt.Sprintf("the MCP server lists the tool %s with other schemas than its profile pinned (pinned %s, listed %s): the tool was not called; review the server's new schemas and pin them (docs/mcp-servers.md)", textutil.Truncate(name, 256), textutil.Truncate(digest, 80), got), nil
		}
		return "", nil
	}
	return "the MCP server no longer lists the tool " + textutil.Truncate(name, 256) + ": the tool was not called", nil
}

// MCPSchemaDigest is the digest a profile pins of an MCP server's tool
// (mcpschema.Digest).
func MCPSchemaDigest(t MCPTool) (string, error) {
	return mcpschema.Digest(t.Description, t.InputSchema, t.OutputSchema)
}

// stderrTail is the end of a server's stderr, as a suffix of a message.
func stderrTail(stderr *Bounded) string {
	s := strings.TrimSpace(string(stderr.Bytes()))
	if s == "" {
		return ""
	}
	if len(s) > 1024 {
		s = s[len(s)-1024:]
	}
	return " (its stderr: " + textutil.OneLine(s, 1024) + ")"
}
