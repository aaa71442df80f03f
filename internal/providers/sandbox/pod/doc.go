// Package pod is the sandbox provider that runs each attempt of a call in
// its own constrained pod (see BuildPod), controlled by the ToolCall. The
// pod starts with no call in it; the provider hands the call to the pod's
// runner over the authenticated channel (runner.Exchange) and receives the
// sealed frame the same way, as soon as the body ends.
//
// A restarted manager finds the attempt's pod again instead of starting a
// second one: a pod it created has the attempt's deterministic name
// (Name), and a warm pod, started ahead under a generated name, passes
// its control to the ToolCall when a call claims it, the call named in its
// annotations (its labels do not change; warm.go).
//
// Files: attempt.go is what this process knows of each attempt (one
// record, its phases, one forget), pod.go the attempt's lifecycle (Run,
// Prepare, start), release.go the end of its work (Discard, Release), life.go the
// provider's own life in the process (Stop), follower.go the goroutine
// that hands each pod its call and collects the frame, greet.go the early
// greeting of a reserved warm pod's runner, warm.go the warm pods, sweep.go
// their sweeper (aging, dropping, what they hold), spec.go
// the pod itself, seal.go which pods are toolgate's (the seal only the
// manager can make, under a key derived from the manager's key,
// internal/keys), failure.go what a pod that can no longer produce a frame
// says about why, netpol.go the NetworkPolicies that isolate tool pods,
// egress.go the egress proxy's grants and policy, check.go what of a
// profile this install will not run as written, trace.go the body's span,
// metrics.go the provider's metrics.
package pod
