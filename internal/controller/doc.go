// Package controller holds toolgate's reconcilers: ToolProfile (resolves and
// compiles a profile), AgentSession (carries out its part of a session's
// plan and keeps its log head) and ToolCall (drives one call through the
// pipeline, persisting each stage boundary). What the reconcilers know of
// calls without reconciling them is in internal/toolcalls: a session's
// plan (the Planner, screening, the log head), a call's pipeline state in
// its status, the call predicates, the index of a session's calls and this
// process's own writes. The reconcilers read and write through it: the
// session writes the part of status.schedule a call cannot write itself
// (refusals, nested admissions, releases of calls that never start) and
// each call admits and releases itself when the plan allows it
// (toolcall_admit.go); patch.go is the one write path and lists who writes
// which field. Every other field of a call's status is the ToolCall
// controller's.
//
// Files, by concern: toolcall_controller.go (the reconciler, its scope and
// phase list), toolcall_phases.go (the phases), toolcall_admit.go (a call
// scheduling itself), toolcall_watch.go (what wakes a call),
// toolcall_status.go (persisting the pipeline state),
// toolcall_announce.go (Events and metrics of a call); the agentsession_*
// files likewise. Controllers consume provider contracts from
// internal/providers and never import a concrete provider: the
// composition mounts the providers and hands them over in Config.
// docs/architecture.md walks a call through the functions here.
package controller

// The manager's permissions. Least privilege: toolgate reads the kinds people
// write, writes the status it owns, creates the children it owns (approval
// requests, sandbox pods, workspace claims, network policies) and reads pod
// logs to collect results.
//
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolprofiles;agentsessions;toolcalls,verbs=get;list;watch;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolprofiles/status;agentsessions/status;toolcalls/status;approvalrequests/status,verbs=get;update;patch
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls/finalizers;agentsessions/finalizers;toolprofiles/finalizers,verbs=update
// +kubebuilder:rbac:groups=toolgate.dev,resources=approvalrequests,verbs=get;list;watch;create;delete
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls;approvalrequests,verbs=manage
// +kubebuilder:rbac:groups=toolgate.dev,resources=toolcalls,verbs=create;delete;deletecollection
// +kubebuilder:rbac:groups="",resources=pods,verbs=get;list;watch;create;delete;patch
// +kubebuilder:rbac:groups="",resources=persistentvolumeclaims,verbs=get;list;watch;create;patch
// +kubebuilder:rbac:groups=storage.k8s.io,resources=storageclasses,verbs=get;list
// +kubebuilder:rbac:groups=node.k8s.io,resources=runtimeclasses,verbs=get
// +kubebuilder:rbac:groups="",resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=events.k8s.io,resources=events,verbs=create;patch
// +kubebuilder:rbac:groups=networking.k8s.io,resources=networkpolicies,verbs=get;list;watch;create;update;patch
// +kubebuilder:rbac:groups="",resources=services,verbs=get;list
// +kubebuilder:rbac:groups=discovery.k8s.io,resources=endpointslices,verbs=get;list
