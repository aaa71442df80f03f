package mcpservers

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"sync"
)

// Dir is this directory.
func Dir() string {
	_, file, _, _ := runtime.Caller(0)
	return filepath.Dir(file)
}

var installOnce = sync.OnceValue(func() error {
	out, err := exec.Command(filepath.Join(Dir(), "..", "..", "hack", "npm-clients.sh"), Dir()).CombinedOutput()
	if err != nil {
		return fmt.Errorf("hack/npm-clients.sh %s: %w\n%s", Dir(), err, out)
	}
	return nil
})

// Install installs the pinned servers (once per process; the cache makes
// a second run cheap).
func Install() error { return installOnce() }

// The servers, by their package's entry point.
const (
	Everything = "@modelcontextprotocol/server-everything/dist/index.js"
	Filesystem = "@modelcontextprotocol/server-filesystem/dist/index.js"
)

// Node is the path of node, which runs the servers.
func Node() (string, error) { return exec.LookPath("node") }

// Argv is the exact argv that starts server (one of the constants above)
// on its stdio transport, with args.
func Argv(server string, args ...string) ([]string, error) {
	node, err := Node()
	if err != nil {
		return nil, err
	}
	return append([]string{node, filepath.Join(Dir(), "node_modules", server)}, args...), nil
}

// GoEverything builds (once per process) the Go SDK's "everything"
// example server from the module proxy, the version go.mod pins, as a
// static binary, and returns its path. It asks its client for sampling
// and roots whatever the client declared.
func GoEverything() (string, error) { return goEverything() }

var goEverything = sync.OnceValues(func() (string, error) {
	dir, err := os.MkdirTemp("", "toolgate-mcp-go-")
	if err != nil {
		return "", err
	}
	bin := filepath.Join(dir, "mcp-everything")
	cmd := exec.Command("go", "build", "-trimpath", "-o", bin, GoEverythingPackage)
	cmd.Dir = Dir()
	cmd.Env = append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("go build %s: %w\n%s", GoEverythingPackage, err, out)
	}
	return bin, nil
})

// GoEverythingPackage is the Go SDK's example server the tests run.
const GoEverythingPackage = "github.com/modelcontextprotocol/go-sdk/examples/server/everything"

// Greeter is an MCP server on stdio in a few lines of sh (run it with
// /bin/sh -c): one tool, greet, whose description is $GREETING, so a
// test changes what the server lists by changing its environment, as a
// new version of a server changes it. It stands in for a server that
// changes, which no published server does on demand.
const Greeter = `while IFS= read -r line; do
  id=$(printf '%s' "$line" | sed -n 's/^{"jsonrpc":"2.0","id":\([0-9]*\).*/\1/p')
  case "$line" in
  *'"method":"initialize"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"protocolVersion":"2025-06-18","capabilities":{"tools":{}},"serverInfo":{"name":"greeter","version":"1"}}}\n' "$id" ;;
  *'"method":"tools/list"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"tools":[{"name":"greet","description":"%s","inputSchema":{"type":"object"},"annotations":{"readOnlyHint":true}}]}}\n' "$id" "$GREETING" ;;
  *'"method":"tools/call"'*) printf '{"jsonrpc":"2.0","id":%s,"result":{"content":[{"type":"text","text":"hello"}]}}\n' "$id" ;;
  esac
done`
