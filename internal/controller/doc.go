// Package controller holds toolgate's reconcilers: ToolProfile (resolves and
// compiles a profile), AgentSession (plans a session's calls with
// pipeline.PlanTurn and writes each call's status.schedule) and ToolCall
// (drives one call through the pipeline, persisting each stage boundary;
// every other field of its status is its own). Controllers consume provider
// contracts from internal/providers and never import a concrete provider:
// cmd/manager mounts the providers and hands them over in Config.
// docs/architecture.md walks a call through the functions here.
package controller

// The manager's permissions. Least privilege: toolgate reads the kinds people
// write, writes the status it owns, creates the children it owns (approval
// requests, sandbox pods, workspace claims, network policies) and reads pod
// logs to collect results.
//
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolprofiles;agentsessions;toolcalls,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolprofiles/status;agentsessions/status;toolcalls/status;approvalrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls/finalizers;agentsessions/finalizers,verbs=update
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvalrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls;approvalrequests,verbs=manage
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls,verbs=create;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list
