// Package runner is the in-pod side of the pod sandbox: the code of
// cmd/toolgate-runner, which an init container copies into every tool pod
// (so any tool image works) and which is the tool container's entrypoint.
//
// The runner executes the exact argv of the tool definition (never through a
// shell) or a built-in workspace tool, feeds it the frozen arguments on stdin
// and as a file, captures stdout and stderr up to hard bounds, and writes one
// Frame to its own stdout, which is the container log. The tool never writes
// to that log: its output goes to pipes the runner reads, and the runner
// makes itself non-dumpable so that a tool running as the same user cannot
// open the runner's descriptors or read its environment through /proc; if
// it cannot, it runs nothing and writes no frame (fail closed). Each frame
// is sealed (AES-256-GCM) under a per-attempt key that only the runner and
// the provider know, so a tool cannot forge or alter its result, and the
// container log (node files, collectors) shows sizes, never content.
//
// The runner is copied into every tool pod, so it links only the standard
// library, x/sys and the leaf packages builtin and codes: no pipeline, no
// providers, no Kubernetes (deps_test.go keeps it so). The providers turn a
// frame into the sandbox contract's answer (sandbox.Outcome).
package runner
