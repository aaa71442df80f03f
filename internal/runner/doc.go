// Package runner is the in-pod side of the pod sandbox: the code of
// cmd/toolgate-runner, which an init container copies into every tool pod
// (so any tool image works) and which is the tool container's entrypoint.
//
// A tool pod starts holding no call. The runner listens for the manager,
// which hands it the call over the channel (channel.go: only the manager's
// key can hand one over, a recorded hand-over never opens again, and a
// runner runs one call, once). It executes the exact argv of the tool
// definition (never through a shell) or a built-in workspace tool, feeds it
// the arguments on stdin and as a file, counts the tool's timeout from the
// moment the body starts, captures stdout and stderr up to hard bounds,
// serves the body's sub-calls (subcall.go), and answers with one Frame
// sealed (AES-256-GCM) under a key derived from its one-time key and the
// manager's, so a tool cannot forge or alter its result and nothing of it
// reaches the container log. The tool's output goes to pipes the runner
// reads, and the runner makes itself non-dumpable so that a tool running as
// the same user cannot read its keys through /proc; if it cannot, it
// listens for nothing and runs nothing (fail closed).
//
// A tool that is an MCP server's (Spec.MCPTool) has that server as its
// body: the runner speaks MCP to it over stdio, makes the call's one
// tools/call, tells it of a cancellation before stopping it, and refuses
// its requests for sampling, elicitation or roots (mcp.go); ListMCPTools
// lists a server's tools.
//
// The runner is copied into every tool pod, so it links only the standard
// library, x/sys and the leaf packages builtin and codes: no pipeline, no
// providers, no Kubernetes (deps_test.go keeps it so). The providers turn a
// frame into the sandbox contract's answer (sandbox.Outcome).
package runner
