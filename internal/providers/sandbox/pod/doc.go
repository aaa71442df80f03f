// Package pod is the sandbox provider that runs each attempt of a call in
// its own constrained pod (see BuildPod), controlled by the ToolCall. The
// pod starts with no call in it; the provider hands the call to the pod's
// runner over the authenticated channel (runner.Exchange) and receives the
// sealed frame the same way, as soon as the body ends.
//
// A restarted manager finds the attempt's pod again instead of starting a
// second one: a pod it created has the attempt's deterministic name
// (Name), and a warm pod, started ahead under a generated name, is
// labelled with the call's UID and the attempt when a call claims it
// (warm.go).
//
// Files: pod.go is the attempt's lifecycle, follower.go the goroutine
// that hands each pod its call and collects the frame, netpol.go the
// NetworkPolicies that isolate tool pods, spec.go the pod itself, warm.go
// the warm pods.
package pod
