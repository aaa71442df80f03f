package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ToolProfileSpec is the GitOps-managed catalog and policy for tool calls:
// which tools a session sees, how each call is decided, guarded, confined and
// checked afterwards.
// +kubebuilder:validation:XValidation:rule="!has(self.preExecute) || self.preExecute.all(r, !has(r.tools) || r.tools.all(t, self.tools.exists(d, d.name == t)))",message="preExecute rules may only name tools declared in tools",fieldPath=".preExecute"
// +kubebuilder:validation:XValidation:rule="!has(self.guards) || self.guards.all(r, !has(r.tools) || r.tools.all(t, self.tools.exists(d, d.name == t)))",message="guards may only name tools declared in tools",fieldPath=".guards"
// +kubebuilder:validation:XValidation:rule="!has(self.postExecute) || self.postExecute.all(r, !has(r.tools) || r.tools.all(t, self.tools.exists(d, d.name == t)))",message="postExecute rules may only name tools declared in tools",fieldPath=".postExecute"
type ToolProfileSpec struct {
	// tools is the visible tool catalog. A call to a tool not listed here
	// settles as an unknown-tool error.
	// +required
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	Tools []ToolDefinition `json:"tools"`

	// permissionPreset decides calls that no preExecute rule matches:
	// Restricted denies them, Supervised asks a human, Trusted allows them.
	// +optional
	// +kubebuilder:default=Restricted
	// +kubebuilder:validation:Enum=Restricted;Supervised;Trusted
	PermissionPreset PermissionPreset `json:"permissionPreset,omitempty"`

	// preExecute are the pre-execute rules, evaluated in list order; the first
	// rule that matches a call decides Allow, Deny or Ask. Rules cannot
	// change a call's arguments.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	PreExecute []PolicyRule `json:"preExecute,omitempty"`

	// guards are monotonic owner rules evaluated after pre-execute policy
	// and approval. A guard either denies a call or abstains; nothing later
	// can override its denial.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Guards []GuardRule `json:"guards,omitempty"`

	// postExecute are the post-execute rules, evaluated in list order on a
	// body's result. Each may accept (optionally replacing content or value
	// and attaching contexts) or block the result.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	PostExecute []PostRule `json:"postExecute,omitempty"`

	// sandbox confines execution once a call is permitted.
	// +optional
	// +kubebuilder:default={}
	Sandbox SandboxPolicy `json:"sandbox,omitempty"`

	// approval configures how Ask decisions reach a human.
	// +optional
	// +kubebuilder:default={}
	Approval ApprovalSettings `json:"approval,omitempty"`

	// mcpServers are MCP servers whose tools this profile runs (a tool
	// with mcp set): each call of such a tool starts its server, over the
	// server's stdio transport, in the call's own sandbox, and asks it that
	// one tool with the call's arguments, after every policy, guard and
	// approval of the profile, as any tool.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	MCPServers []MCPServer `json:"mcpServers,omitempty"`
}

// MCPServer is an MCP server a profile's tools run in.
type MCPServer struct {
	// name names the server in this profile (a tool's mcp.server).
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9]*[a-z0-9])?$`
	Name string `json:"name"`

	// container is the server: its image, and the exact argv that starts
	// its stdio transport (maxOutputBytes bounds a tool's value).
	// +required
	Container ContainerRuntime `json:"container"`
}

// MCPToolRuntime makes a tool one of an MCP server's.
type MCPToolRuntime struct {
	// server names one of the profile's mcpServers.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	Server string `json:"server"`

	// tool is the server's name for the tool; empty: the definition's name.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	Tool string `json:"tool,omitempty"`

	// schemaDigest pins the tool's description and input and output
	// schemas as the server listed them when the profile was reviewed
	// (status.mcpServers[].tools[].schemaDigest): a listing with other
	// schemas makes the profile not Ready, naming the tool, and a call
	// whose server lists other schemas fails schema_changed without the
	// tool being called. Empty: not pinned (a warning), and the server may
	// change the tool unnoticed.
	// +optional
	// +kubebuilder:validation:Pattern=`^sha256:[0-9a-f]{64}$`
	SchemaDigest string `json:"schemaDigest,omitempty"`
}

// PermissionPreset is the decision for calls no preExecute rule matches.
type PermissionPreset string

// Permission presets.
const (
	// PresetRestricted denies unmatched calls.
	PresetRestricted PermissionPreset = "Restricted"
	// PresetSupervised asks a human about unmatched calls.
	PresetSupervised PermissionPreset = "Supervised"
	// PresetTrusted allows unmatched calls.
	PresetTrusted PermissionPreset = "Trusted"
)

// ToolDefinition declares one tool: what the model sees (name, description,
// parameters), what it must return (output), and how it runs (runtime).
// +kubebuilder:validation:XValidation:rule="[has(self.container), has(self.builtin), has(self.mcp)].filter(x, x).size() == 1",message="exactly one of container, builtin or mcp must be set"
// +kubebuilder:validation:XValidation:rule="has(self.mcp) || has(self.description)",message="description is required (only an MCP server's tool may leave it to its server)",fieldPath=".description"
// +kubebuilder:validation:XValidation:rule="has(self.mcp) || has(self.parameters)",message="parameters is required (only an MCP server's tool may leave it to its server)",fieldPath=".parameters"
// +kubebuilder:validation:XValidation:rule="has(self.mcp) || has(self.output.schema)",message="output.schema is required (only an MCP server's tool may leave it to its server)",fieldPath=".output.schema"
// +kubebuilder:validation:XValidation:rule="!has(self.retry) || self.retry.maxAttempts <= 1 || (has(self.idempotent) && self.idempotent)",message="retry with maxAttempts > 1 requires idempotent: true",fieldPath=".retry.maxAttempts"
type ToolDefinition struct {
	// name is the tool name the model calls.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// description is shown to the model. Required, but for an MCP
	// server's tool, which may leave it to the server (below).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Description string `json:"description,omitempty"`

	// parameters is the JSON Schema (2020-12) of the call's arguments. It
	// must describe an object (checked when the profile is resolved);
	// network $ref is not resolved. Required, but for an MCP server's
	// tool, which may leave its description, parameters and output
	// schema to the server: they are then the server's, as listed in
	// status.mcpServers, and only with mcp.schemaDigest pinning them.
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Parameters apiextensionsv1.JSON `json:"parameters,omitzero"`

	// output declares the value the tool returns and how it is rendered to
	// the model. Every result value is validated against output.schema.
	// +required
	Output OutputDeclaration `json:"output"`

	// container runs the tool as an exact argv in a sandbox.
	// +optional
	Container *ContainerRuntime `json:"container,omitempty"`

	// builtin runs one of toolgate's workspace tools, confined to the
	// workspace root.
	// +optional
	Builtin *BuiltinRuntime `json:"builtin,omitempty"`

	// mcp runs the tool as a tool of one of the profile's MCP servers
	// (spec.mcpServers): the server is the body. Its description,
	// parameters and output schema are declared here as for any tool, or
	// left to the server's listing its schemaDigest pins.
	// +optional
	MCP *MCPToolRuntime `json:"mcp,omitempty"`

	// isConcurrencySafe is a CEL expression over `args` (the call's
	// arguments). Only the exact value true lets a call run in parallel with
	// its neighbours; anything else, an error, or no expression means the
	// call is exclusive.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	IsConcurrencySafe string `json:"isConcurrencySafe,omitempty"`

	// subCalls lists the tools of the profile this tool's body may call
	// while it runs (Code Mode: "$TOOLGATE_RUNNER call TOOL ARGS"), each
	// call a nested ToolCall through the whole pipeline; "*" is any tool
	// of the profile. Empty: the body may call none, and a sub-call it
	// asks for is denied (policy_denied) without a ToolCall.
	// +optional
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=128
	// +listType=set
	SubCalls []string `json:"subCalls,omitempty"`

	// timeoutSeconds bounds one attempt of the body; a call that exceeds it
	// settles as a timeout.
	// +optional
	// +kubebuilder:default=60
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=86400
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// idempotent declares that running the body twice has the effect of
	// running it once. Only an idempotent body is ever re-run (by retry, or
	// after a crash while it ran).
	// +optional
	Idempotent bool `json:"idempotent,omitempty"`

	// retry re-runs a failed idempotent body.
	// +optional
	Retry *RetryPolicy `json:"retry,omitempty"`

	// egress names the hosts this tool's body may reach, through
	// toolgate's egress proxy, and the credentials the proxy adds to its
	// requests. A tool that declares it reaches those hosts and nothing
	// else, whatever the profile's allowEgress or other tools of the
	// session may reach (docs/sandbox.md).
	// +optional
	Egress *ToolEgress `json:"egress,omitempty"`
}

// ToolEgress is what one tool's body may reach, by host name.
// +kubebuilder:validation:XValidation:rule="!has(self.credentials) || self.credentials.all(c, self.hosts.exists(h, h.host == c.host))",message="a credential's host must be one of hosts",fieldPath=".credentials"
type ToolEgress struct {
	// hosts the body may reach; any other destination is refused.
	// +required
	// +listType=map
	// +listMapKey=host
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=32
	Hosts []EgressHost `json:"hosts"`

	// credentials are added by the proxy to the body's requests to a host;
	// the tool's pod never holds them. A host with a credential is reached
	// only by requests in absolute form (http://host/path through the
	// proxy, which opens TLS to the host itself), never by a tunnel the
	// proxy cannot read.
	// +optional
	// +listType=map
	// +listMapKey=host
	// +kubebuilder:validation:MaxItems=32
	Credentials []EgressCredential `json:"credentials,omitempty"`
}

// EgressHost is one host a tool may reach.
type EgressHost struct {
	// host is an exact DNS name or IP address (IPv6 in canonical form,
	// without brackets: the profile is not Ready otherwise), or "*." and a
	// name (every name below it, not the name itself). Lowercase.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^((\*\.)?[a-z0-9]([a-z0-9.-]*[a-z0-9])?|[0-9a-f.:]*:[0-9a-f.:]*)$`
	Host string `json:"host"`

	// ports the body may reach on the host; 443 when empty.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:Minimum=1
	// +kubebuilder:validation:items:Maximum=65535
	Ports []int32 `json:"ports,omitempty"`

	// caBundle holds PEM certificates the proxy trusts, instead of the
	// system's, for this host when it opens TLS to it itself (a host with a
	// credential): a private or in-cluster API with a CA of its own.
	// +optional
	// +kubebuilder:validation:MaxLength=8192
	CABundle string `json:"caBundle,omitempty"`
}

// EgressCredential is a header the proxy adds to requests to one host.
type EgressCredential struct {
	// host is one of the tool's egress hosts.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Host string `json:"host"`

	// header is the request header set (replacing any the body sent).
	// +optional
	// +kubebuilder:default=Authorization
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z0-9-]+$`
	Header string `json:"header,omitempty"`

	// secretRef names the Secret, in the profile's namespace, and its key
	// holding the value. The egress proxy reads it: grant its service
	// account get on that Secret (docs/sandbox.md).
	// +required
	SecretRef SecretKeyRef `json:"secretRef"`

	// format is the header's value, "{{value}}" standing for the Secret's
	// (for instance "Bearer {{value}}"); the value alone when empty.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:XValidation:rule="self.contains('{{value}}')",message="format must contain {{value}}"
	Format string `json:"format,omitempty"`
}

// SecretKeyRef names a key of a Secret in the referrer's namespace.
type SecretKeyRef struct {
	// name of the Secret.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Name string `json:"name"`

	// key in the Secret's data.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=253
	Key string `json:"key"`
}

// OutputDeclaration is a tool's mandatory output contract.
// +kubebuilder:validation:XValidation:rule="self.render.format != 'Template' || has(self.render.template)",message="render.template is required when render.format is Template",fieldPath=".render.template"
type OutputDeclaration struct {
	// schema is the JSON Schema (2020-12) every result value must satisfy.
	// Required, but for an MCP server's tool, whose server's output schema
	// it then is (its text, a string, for a server that declares none).
	// +optional
	// +kubebuilder:validation:Type=object
	// +kubebuilder:pruning:PreserveUnknownFields
	Schema apiextensionsv1.JSON `json:"schema,omitzero"`

	// render turns the value into model-facing content.
	// +required
	Render RenderSpec `json:"render"`

	// finalizeContent shapes the model-facing content of every result of
	// the tool, failures included: once, last, content only (the outcome,
	// code and value never change).
	// +optional
	FinalizeContent *FinalizeContentSpec `json:"finalizeContent,omitempty"`

	// failureDetail is what the message of a body that exited non-zero
	// tells besides its exit code: Withheld (the default: the size of its
	// stderr only, since no post-execute rule passes a failure, and a
	// tool's output reaches the model only through its result) or
	// StderrTail (the last 512 bytes of its stderr, for a tool whose
	// stderr is safe to show).
	// +optional
	// +kubebuilder:default=Withheld
	FailureDetail FailureDetail `json:"failureDetail,omitempty"`
}

// FailureDetail is what a failed body's message carries of its stderr.
// +kubebuilder:validation:Enum=Withheld;StderrTail
type FailureDetail string

// Failure details.
const (
	FailureDetailWithheld   FailureDetail = "Withheld"
	FailureDetailStderrTail FailureDetail = "StderrTail"
)

// FinalizeContentSpec is the last, content-only word on a result: a
// template, then a byte cap.
// +kubebuilder:validation:XValidation:rule="has(self.template) || has(self.maxBytes)",message="set template, maxBytes or both"
type FinalizeContentSpec struct {
	// template is a Go text/template over .Content, .Outcome, .Code and
	// .Message; its output replaces the content. A template that fails to
	// execute fails the result as normalization_failed.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Template string `json:"template,omitempty"`

	// maxBytes cuts the content, after the template, to at most this many
	// bytes, never inside a character, ending in "…[truncated]" when cut.
	// +optional
	// +kubebuilder:validation:Minimum=32
	// +kubebuilder:validation:Maximum=1048576
	MaxBytes int32 `json:"maxBytes,omitempty"`
}

// RenderSpec says how a result value becomes content.
type RenderSpec struct {
	// format is JSON (the canonical value as JSON text), Text (a string value
	// as is) or Template (a Go text/template over .Args and .Value).
	// +required
	// +kubebuilder:validation:Enum=JSON;Text;Template
	Format RenderFormat `json:"format"`

	// template is the text/template used when format is Template. Every
	// profile template runs on a budget: at most 100,000 range iterations
	// and 2 MiB of output per execution, and it may not define or call
	// templates.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	Template string `json:"template,omitempty"`
}

// RenderFormat names a rendering of a result value.
type RenderFormat string

// Render formats.
const (
	RenderJSON     RenderFormat = "JSON"
	RenderText     RenderFormat = "Text"
	RenderTemplate RenderFormat = "Template"
)

// ContainerRuntime runs a tool image with an exact argv, never through a
// shell. The frozen arguments reach the process on stdin and as a file.
type ContainerRuntime struct {
	// image is the tool image.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=512
	Image string `json:"image"`

	// command is the exact argv; command[0] is the executable.
	// +required
	// +listType=atomic
	// +kubebuilder:validation:MinItems=1
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=4096
	Command []string `json:"command"`

	// env are extra environment variables for the tool process.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=32
	Env []EnvVar `json:"env,omitempty"`

	// maxOutputBytes bounds the captured stdout; more is truncated and the
	// result says so.
	// +optional
	// +kubebuilder:default=1048576
	// +kubebuilder:validation:Minimum=1024
	// +kubebuilder:validation:Maximum=8388608
	MaxOutputBytes int32 `json:"maxOutputBytes,omitempty"`

	// runnerPath is where the tool image already holds toolgate's runner
	// (copied from the runner image of the same release). The tool's pod
	// then needs no init container to inject it: one container start less
	// on every cold call. The runner in the image is trusted as the tool's
	// own code is; one speaking another channel protocol than the manager
	// fails the call as sandbox_unavailable. Empty: the runner is injected.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	// +kubebuilder:validation:Pattern=`^/`
	RunnerPath string `json:"runnerPath,omitempty"`
}

// EnvVar is a literal environment variable. Secrets are not passed through
// tool definitions.
type EnvVar struct {
	// name of the variable.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=128
	// +kubebuilder:validation:Pattern=`^[A-Za-z_][A-Za-z0-9_]*$`
	Name string `json:"name"`

	// value of the variable.
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Value string `json:"value,omitempty"`
}

// BuiltinRuntime selects a built-in workspace tool.
type BuiltinRuntime struct {
	// name is one of the built-in tools: fs.read, fs.write, fs.list, fs.edit.
	// +required
	// +kubebuilder:validation:Enum=fs.read;fs.write;fs.list;fs.edit
	Name string `json:"name"`
}

// RetryPolicy re-runs an idempotent body after a failure.
type RetryPolicy struct {
	// maxAttempts is the total number of attempts, the first included.
	// +required
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	MaxAttempts int32 `json:"maxAttempts"`

	// backoffSeconds is the wait before each further attempt.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=0
	// +kubebuilder:validation:Maximum=300
	BackoffSeconds int32 `json:"backoffSeconds,omitempty"`
}

// PolicyRule is one pre-execute rule.
// +kubebuilder:validation:XValidation:rule="!has(self.approvers) || self.action == 'Ask'",message="approvers are for rules that ask",fieldPath=".approvers"
type PolicyRule struct {
	// name identifies the rule in traces and results.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// tools limits the rule to these tools; empty means every tool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	Tools []string `json:"tools,omitempty"`

	// when is a CEL expression over `call` (tool, args, requester, session,
	// turn, index); the rule matches when it is true. Empty always matches.
	// A field of call.args that the schemas of the rule's tools cannot hold
	// makes the profile not Ready (one they do not declare but allow is a
	// warning in the Ready condition).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	When string `json:"when,omitempty"`

	// action is the decision when the rule matches.
	// +required
	// +kubebuilder:validation:Enum=Allow;Deny;Ask
	Action PolicyAction `json:"action"`

	// message explains the decision to the model and to approvers.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`

	// approvers say who may approve a call this rule asks about and how
	// many must (action Ask only); the profile's approval.approvers
	// otherwise.
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`
}

// Approvers say who may answer a question and how many distinct people
// must approve it. Any one of them denying decides. Enforced by the API
// server (admission): an approver is the user recording the approval, never
// the call's requester, counted once, and, where users or groups are
// named, one of the users or a member of one of the groups (as the API
// server authenticates them).
type Approvers struct {
	// required is how many distinct people must approve.
	// +optional
	// +kubebuilder:default=1
	// +kubebuilder:validation:Minimum=1
	// +kubebuilder:validation:Maximum=10
	Required int32 `json:"required,omitempty"`

	// users who may answer (usernames as the API server authenticates
	// them). With groups: either. Neither: anyone allowed the verb approve.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	Users []string `json:"users,omitempty"`

	// groups whose members may answer (the groups the API server puts in
	// the user's info).
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=512
	Groups []string `json:"groups,omitempty"`
}

// PolicyAction is a pre-execute decision.
type PolicyAction string

// Pre-execute decisions.
const (
	ActionAllow PolicyAction = "Allow"
	ActionDeny  PolicyAction = "Deny"
	ActionAsk   PolicyAction = "Ask"
)

// GuardRule is a monotonic owner rule: it denies or abstains.
type GuardRule struct {
	// name identifies the guard in traces and results.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// tools limits the guard to these tools; empty means every tool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	Tools []string `json:"tools,omitempty"`

	// deny is a CEL expression over `call`; true denies the call. An
	// evaluation error also denies (guards fail closed), naming a missing
	// field. Fields are checked against the tools' schemas as for rules.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	Deny string `json:"deny"`

	// message is the denial reason.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message"`
}

// PostRule is one post-execute rule.
// +kubebuilder:validation:XValidation:rule="!(has(self.replaceContent) && has(self.replaceValue))",message="replaceContent and replaceValue are mutually exclusive"
// +kubebuilder:validation:XValidation:rule="self.action == 'Accept' || (!has(self.replaceContent) && !has(self.replaceValue) && !has(self.redact))",message="a Block rule cannot replace content or value, or redact"
// +kubebuilder:validation:XValidation:rule="!has(self.redact) || (!has(self.replaceContent) && !has(self.replaceValue))",message="redact replaces the value; it excludes replaceContent and replaceValue"
type PostRule struct {
	// name identifies the rule in traces and results.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=63
	// +kubebuilder:validation:Pattern=`^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`
	Name string `json:"name"`

	// tools limits the rule to these tools; empty means every tool.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=64
	// +kubebuilder:validation:items:MaxLength=63
	Tools []string `json:"tools,omitempty"`

	// when is a CEL expression over `call` and `result` (value, content:
	// a post-execute rule sees only successes); the rule applies when it is
	// true. Empty always applies. Fields of call.args and result.value are
	// checked against the tools' schemas as for pre-execute rules.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	When string `json:"when,omitempty"`

	// action is Accept or Block. Block turns the result into a valueless
	// failure carrying only this rule's contexts.
	// +required
	// +kubebuilder:validation:Enum=Accept;Block
	Action PostAction `json:"action"`

	// replaceContent is a text/template over .Args and .Value that replaces
	// the rendered content (presentation only; the value is kept).
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=8192
	ReplaceContent string `json:"replaceContent,omitempty"`

	// replaceValue is a CEL expression producing a new value, which is
	// validated against the output schema and rendered again.
	// +optional
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=4096
	ReplaceValue string `json:"replaceValue,omitempty"`

	// redact replaces every match of each pattern, in order, in every
	// string of the value (object keys aside); the new value is validated
	// against the output schema and rendered again, so the content no
	// longer holds the matches either.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Redact []RedactPattern `json:"redact,omitempty"`

	// contexts are messages delivered to the model after the turn commits
	// (each non-empty, as a call's result holds them).
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:MinLength=1
	// +kubebuilder:validation:items:MaxLength=4096
	Contexts []string `json:"contexts,omitempty"`

	// message is the failure text when the rule blocks.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	Message string `json:"message,omitempty"`
}

// RedactPattern is one pattern a post-execute rule redacts.
type RedactPattern struct {
	// pattern is an RE2 regular expression.
	// +required
	// +kubebuilder:validation:MinLength=1
	// +kubebuilder:validation:MaxLength=1024
	Pattern string `json:"pattern"`

	// replacement replaces each match; $1 or ${name} insert a group.
	// +optional
	// +kubebuilder:default="[redacted]"
	// +kubebuilder:validation:MaxLength=256
	Replacement *string `json:"replacement,omitempty"`
}

// PostAction is a post-execute decision.
type PostAction string

// Post-execute decisions.
const (
	PostAccept PostAction = "Accept"
	PostBlock  PostAction = "Block"
)

// SandboxPolicy confines execution.
// +kubebuilder:validation:XValidation:rule="!has(self.mode) || self.mode != 'FullAccess' || (has(self.allowFullAccess) && self.allowFullAccess)",message="mode FullAccess requires allowFullAccess: true",fieldPath=".mode"
type SandboxPolicy struct {
	// mode is ReadOnly (workspace mounted read-only), WorkspaceWrite
	// (workspace read-write) or FullAccess (no workspace confinement).
	// +optional
	// +kubebuilder:default=ReadOnly
	// +kubebuilder:validation:Enum=ReadOnly;WorkspaceWrite;FullAccess
	Mode SandboxMode `json:"mode,omitempty"`

	// allowFullAccess must be true for mode FullAccess, so that full access is
	// never the result of a typo.
	// +optional
	AllowFullAccess bool `json:"allowFullAccess,omitempty"`

	// workspaceRoot is the absolute path where the workspace is mounted.
	// +optional
	// +kubebuilder:default="/workspace"
	// +kubebuilder:validation:MaxLength=256
	// +kubebuilder:validation:Pattern=`^(/[A-Za-z0-9._-]+)+$`
	// +kubebuilder:validation:XValidation:rule="!self.split('/').exists(s, s == '..' || s == '.')",message="workspaceRoot must be canonical (no . or .. segments)"
	WorkspaceRoot string `json:"workspaceRoot,omitempty"`

	// provider is the enforcing sandbox provider: Pod (a constrained pod per
	// call) or Process (a local subprocess; for development, not isolating).
	// +optional
	// +kubebuilder:default=Pod
	// +kubebuilder:validation:Enum=Pod;Process
	Provider SandboxProvider `json:"provider,omitempty"`

	// allowEgress lets tool pods open network connections; by default a
	// NetworkPolicy denies all traffic.
	// +optional
	AllowEgress bool `json:"allowEgress,omitempty"`

	// runtimeClassName selects a RuntimeClass (gVisor, Kata) for tool pods.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	// +kubebuilder:validation:Pattern=`^[a-z0-9]([-a-z0-9.]*[a-z0-9])?$`
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`

	// resources are the limits (and requests) of a tool container.
	// +optional
	Resources SandboxResources `json:"resources,omitempty"`

	// nodeSelector places tool pods on a sandbox node pool.
	// +optional
	// +kubebuilder:validation:MaxProperties=16
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`

	// tolerations let tool pods run on a tainted sandbox node pool.
	// +optional
	// +listType=atomic
	// +kubebuilder:validation:MaxItems=16
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`

	// workspace bounds the claims toolgate creates for the sessions of this
	// profile from their volumeClaimTemplate; unset, any class and size
	// their creator may request.
	// +optional
	Workspace *WorkspaceBounds `json:"workspace,omitempty"`
}

// WorkspaceBounds bounds a session's workspace claim template.
type WorkspaceBounds struct {
	// storageClassNames are the classes a template may name; unset, any.
	// A template that names none uses the cluster's default class, which
	// is allowed only when "" is listed.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=16
	// +kubebuilder:validation:items:MaxLength=253
	StorageClassNames []string `json:"storageClassNames,omitempty"`

	// maxSize is the largest claim a template may request.
	// +optional
	MaxSize *resource.Quantity `json:"maxSize,omitempty"`
}

// SandboxMode is the workspace access a call gets.
type SandboxMode string

// Sandbox modes.
const (
	SandboxReadOnly       SandboxMode = "ReadOnly"
	SandboxWorkspaceWrite SandboxMode = "WorkspaceWrite"
	SandboxFullAccess     SandboxMode = "FullAccess"
)

// SandboxProvider names an enforcing provider.
type SandboxProvider string

// Sandbox providers.
const (
	SandboxProviderPod     SandboxProvider = "Pod"
	SandboxProviderProcess SandboxProvider = "Process"
)

// SandboxResources are a tool container's limits; requests equal limits.
type SandboxResources struct {
	// cpu limit of the tool container.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`

	// memory limit of the tool container.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`

	// ephemeralStorage limit of the tool container (its /tmp included).
	// +optional
	EphemeralStorage *resource.Quantity `json:"ephemeralStorage,omitempty"`
}

// ApprovalSettings configure the approval of Ask decisions.
type ApprovalSettings struct {
	// provider is APIServer (an ApprovalRequest a person decides with
	// kubectl) or None (every Ask fails closed).
	// +optional
	// +kubebuilder:default=APIServer
	// +kubebuilder:validation:Enum=APIServer;None
	Provider ApprovalProvider `json:"provider,omitempty"`

	// timeoutSeconds is how long a person has to decide; an undecided
	// request then fails closed.
	// +optional
	// +kubebuilder:default=900
	// +kubebuilder:validation:Minimum=10
	// +kubebuilder:validation:Maximum=604800
	TimeoutSeconds int32 `json:"timeoutSeconds,omitempty"`

	// approvers say who may approve and how many must, for every rule
	// that asks and names none of its own (default: one approval from
	// anyone allowed the verb approve).
	// +optional
	Approvers *Approvers `json:"approvers,omitempty"`

	// notify names the install's notification sinks (the manager's
	// --notifications-config) told when a question of this profile opens
	// and ends, beside the install's default sinks. A name the install
	// does not define is ignored.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=8
	// +kubebuilder:validation:items:Pattern=`^[a-z0-9]([a-z0-9-]{0,61}[a-z0-9])?$`
	Notify []string `json:"notify,omitempty"`

	// relayApprovalMessages sends the approvers' messages on an approved
	// call to the model, as a context of the call's result (after the
	// tool's deferred contexts, before post-execute rules' contexts). The
	// question says so, so an approver writes knowing it. A denial's
	// message always reaches the model, in the failure's content.
	// +optional
	RelayApprovalMessages bool `json:"relayApprovalMessages,omitempty"`

	// redactArguments are top-level argument names whose values are replaced
	// by "[redacted]" in the approver's preview.
	// +optional
	// +listType=set
	// +kubebuilder:validation:MaxItems=32
	// +kubebuilder:validation:items:MaxLength=128
	RedactArguments []string `json:"redactArguments,omitempty"`
}

// ApprovalProvider names an approval provider.
type ApprovalProvider string

// Approval providers.
const (
	ApprovalProviderAPIServer ApprovalProvider = "APIServer"
	ApprovalProviderNone      ApprovalProvider = "None"
)

// ToolProfileStatus is the resolved profile.
type ToolProfileStatus struct {
	// observedGeneration is the generation the controller last reconciled,
	// whatever the outcome: with Ready=False it tells a rejected generation
	// from one not yet seen.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`

	// conditions: Ready says whether every schema, expression and template
	// compiled and the selected sandbox and approval providers are mounted.
	// +optional
	// +listType=map
	// +listMapKey=type
	// +kubebuilder:validation:MaxItems=8
	Conditions []metav1.Condition `json:"conditions,omitempty"`

	// tools are the compiled, visible tools.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=64
	Tools []ResolvedTool `json:"tools,omitempty"`

	// toolCount is the number of visible tools.
	// +optional
	ToolCount int32 `json:"toolCount,omitempty"`

	// permissionPreset is the resolved default decision.
	// +optional
	PermissionPreset PermissionPreset `json:"permissionPreset,omitempty"`

	// sandbox is the resolved sandbox policy.
	// +optional
	Sandbox *ResolvedSandbox `json:"sandbox,omitempty"`

	// approval is the resolved approval provider.
	// +optional
	Approval *ResolvedApproval `json:"approval,omitempty"`

	// mcpServers are the tools each of spec.mcpServers listed when the
	// controller last started it, in a sandbox of its own (discovery),
	// with the digest a tool's mcp.schemaDigest pins.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=16
	MCPServers []DiscoveredMCPServer `json:"mcpServers,omitempty"`
}

// DiscoveredMCPServer is what an MCP server listed.
type DiscoveredMCPServer struct {
	// name is the server's, in spec.mcpServers.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// specDigest is the digest of the server's spec the listing is of: a
	// changed spec is listed again.
	// +required
	// +kubebuilder:validation:MaxLength=80
	SpecDigest string `json:"specDigest"`

	// listedTime is when the listing ended.
	// +optional
	ListedTime *metav1.Time `json:"listedTime,omitempty"`

	// error says why the server could not be listed ("" when it was).
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	Error string `json:"error,omitempty"`

	// lastAttemptTime is when the server was last listed again, and
	// lastError why that failed ("" when it did not): a listing again that
	// fails keeps the listing before it (its tools stay as they were).
	// +optional
	LastAttemptTime *metav1.Time `json:"lastAttemptTime,omitempty"`
	// +optional
	// +kubebuilder:validation:MaxLength=4096
	LastError string `json:"lastError,omitempty"`

	// tools are the server's tools, as it listed them.
	// +optional
	// +listType=map
	// +listMapKey=name
	// +kubebuilder:validation:MaxItems=1000
	Tools []DiscoveredMCPTool `json:"tools,omitempty"`

	// schemasOmitted says the listing did not fit the status whole: the
	// schemas (then the descriptions) of tools no tool imports were left
	// out first, then the imported tools' (which must then declare them);
	// every tool is named with its digest.
	// +optional
	SchemasOmitted bool `json:"schemasOmitted,omitempty"`
}

// DiscoveredMCPTool is one tool an MCP server listed.
type DiscoveredMCPTool struct {
	// name is the server's name for the tool.
	// +required
	// +kubebuilder:validation:MaxLength=256
	Name string `json:"name"`

	// schemaDigest is the digest of its description and input and output
	// schemas (the value a tool's mcp.schemaDigest pins).
	// +required
	// +kubebuilder:validation:MaxLength=80
	SchemaDigest string `json:"schemaDigest"`

	// description is the server's, as listed.
	// +optional
	// +kubebuilder:validation:MaxLength=16384
	Description string `json:"description,omitempty"`

	// inputSchema and outputSchema are the server's, as listed.
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	InputSchema *apiextensionsv1.JSON `json:"inputSchema,omitempty"`
	// +optional
	// +kubebuilder:pruning:PreserveUnknownFields
	// +kubebuilder:validation:Schemaless
	OutputSchema *apiextensionsv1.JSON `json:"outputSchema,omitempty"`

	// hints are the server's annotations of the tool that it set, as
	// name=value (readOnlyHint=true, destructiveHint=false, ...): hints a
	// profile may adopt explicitly (isConcurrencySafe, idempotent), never
	// a classification by themselves.
	// +optional
	// +kubebuilder:validation:MaxItems=4
	// +kubebuilder:validation:items:MaxLength=32
	// +listType=set
	Hints []string `json:"hints,omitempty"`
}

// ResolvedTool is a compiled tool.
type ResolvedTool struct {
	// name of the tool.
	// +required
	// +kubebuilder:validation:MaxLength=63
	Name string `json:"name"`

	// runtime is "container" or "builtin:<name>".
	// +optional
	// +kubebuilder:validation:MaxLength=64
	Runtime string `json:"runtime,omitempty"`

	// concurrencyClassified is true when the tool declares isConcurrencySafe.
	// +optional
	ConcurrencyClassified bool `json:"concurrencyClassified,omitempty"`

	// idempotent repeats the definition's declaration.
	// +optional
	Idempotent bool `json:"idempotent,omitempty"`

	// network is what the tool's body may reach, as enforced: "none",
	// "egress" (every public address: the profile's allowEgress),
	// "hosts" (only egressHosts, through the egress proxy).
	// +optional
	// +kubebuilder:validation:Enum=none;egress;hosts
	Network string `json:"network,omitempty"`

	// egressHosts are the host:port pairs the body may reach (network
	// hosts), a credential's host marked " (credential)".
	// +optional
	// +kubebuilder:validation:MaxItems=512
	// +kubebuilder:validation:items:MaxLength=280
	// +listType=atomic
	EgressHosts []string `json:"egressHosts,omitempty"`
}

// ResolvedSandbox is the sandbox policy as enforced.
type ResolvedSandbox struct {
	// mode is the resolved sandbox mode.
	// +optional
	Mode SandboxMode `json:"mode,omitempty"`

	// workspaceRoot is the canonical workspace root.
	// +optional
	// +kubebuilder:validation:MaxLength=256
	WorkspaceRoot string `json:"workspaceRoot,omitempty"`

	// provider is the enforcing provider.
	// +optional
	Provider SandboxProvider `json:"provider,omitempty"`

	// enforcement is Full when every restriction is enforced, Partial
	// otherwise (see enforcementReason).
	// +optional
	// +kubebuilder:validation:Enum=Full;Partial
	Enforcement string `json:"enforcement,omitempty"`

	// enforcementReason says which restriction is not enforced and why.
	// +optional
	// +kubebuilder:validation:MaxLength=1024
	EnforcementReason string `json:"enforcementReason,omitempty"`

	// runtimeClassName is the RuntimeClass every tool pod of the profile
	// runs under (gVisor, Kata), as the provider applies it; empty: the
	// cluster's default runtime, sharing the node's kernel.
	// +optional
	// +kubebuilder:validation:MaxLength=253
	RuntimeClassName string `json:"runtimeClassName,omitempty"`
}

// Enforcement levels.
const (
	EnforcementFull    = "Full"
	EnforcementPartial = "Partial"
)

// ResolvedApproval is the approval provider as mounted.
type ResolvedApproval struct {
	// provider is the mounted approval provider.
	// +optional
	Provider ApprovalProvider `json:"provider,omitempty"`

	// available is false when Ask decisions will fail closed.
	// +optional
	Available bool `json:"available,omitempty"`
}

// ToolProfile reasons for the Ready condition.
const (
	// ToolProfileReasonResolved: every schema, expression and template
	// compiled and the selected providers are mounted.
	ToolProfileReasonResolved = "Resolved"
	// ToolProfileReasonSchemaInvalid: a parameters or output schema does
	// not compile; the message names the tool.
	ToolProfileReasonSchemaInvalid = "SchemaInvalid"
	// ToolProfileReasonExpressionInvalid: a CEL expression does not compile
	// or exceeds its cost limit; the message names the tool or rule.
	ToolProfileReasonExpressionInvalid = "ExpressionInvalid"
	// ToolProfileReasonTemplateInvalid: a render or replaceContent template
	// does not parse; the message names the tool or rule.
	ToolProfileReasonTemplateInvalid = "TemplateInvalid"
	// ToolProfileReasonProviderNotMounted: the profile compiled, but its
	// sandbox or approval provider is not mounted in this manager (calls
	// would fail); the message names the provider.
	ToolProfileReasonProviderNotMounted = "ProviderNotMounted"
	// ToolProfileReasonSandboxPolicyRefused: the mounted sandbox provider
	// cannot run the profile's sandbox policy at all (for example resources
	// above its caps); the message says what and why.
	ToolProfileReasonSandboxPolicyRefused = "SandboxPolicyRefused"
	// ToolProfileReasonMCPListing: an MCP server's tools are being listed
	// (its spec is new or changed); the profile is resolved again once
	// they are.
	ToolProfileReasonMCPListing = "MCPListing"
	// ToolProfileReasonMCPServerUnlisted: an MCP server could not be
	// listed (its pod failed, or it did not answer as an MCP server); the
	// message names the server and says why.
	ToolProfileReasonMCPServerUnlisted = "MCPServerUnlisted"
	// ToolProfileReasonMCPToolMissing: a tool names a server's tool the
	// server does not list; the message names both.
	ToolProfileReasonMCPToolMissing = "MCPToolMissing"
	// ToolProfileReasonMCPSchemaChanged: a server lists a tool with other
	// schemas than the tool's mcp.schemaDigest pins; the message names the
	// tool and what the server now declares. Its calls fail
	// schema_changed, the tool not called, until the pin is updated.
	ToolProfileReasonMCPSchemaChanged = "MCPSchemaChanged"
	// ToolProfileReasonMCPToolUnpinned: a tool leaves its description or
	// schemas to its server without pinning them (mcp.schemaDigest); the
	// message gives the digest its server lists, to review and pin.
	ToolProfileReasonMCPToolUnpinned = "MCPToolUnpinned"
)

// ToolProfile is a GitOps-managed tool catalog with its policies.
// +kubebuilder:object:root=true
// +kubebuilder:subresource:status
// +kubebuilder:resource:shortName=tp;tprof,categories=toolgate
// +kubebuilder:printcolumn:name="Ready",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].status`
// +kubebuilder:printcolumn:name="Reason",type=string,JSONPath=`.status.conditions[?(@.type=="Ready")].reason`
// +kubebuilder:printcolumn:name="Tools",type=integer,JSONPath=`.status.toolCount`
// +kubebuilder:printcolumn:name="Preset",type=string,JSONPath=`.spec.permissionPreset`
// +kubebuilder:printcolumn:name="Sandbox",type=string,JSONPath=`.spec.sandbox.mode`,priority=1
// +kubebuilder:printcolumn:name="Enforcement",type=string,JSONPath=`.status.sandbox.enforcement`,priority=1
// +kubebuilder:printcolumn:name="Age",type=date,JSONPath=`.metadata.creationTimestamp`
type ToolProfile struct {
	metav1.TypeMeta `json:",inline"`
	// metadata is the object's metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the desired catalog and policy.
	// +required
	Spec ToolProfileSpec `json:"spec"`

	// status is the resolved profile.
	// +optional
	Status ToolProfileStatus `json:"status,omitempty"`
}

// ToolProfileList is a list of ToolProfiles.
// +kubebuilder:object:root=true
type ToolProfileList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []ToolProfile `json:"items"`
}

func init() {
	register(&ToolProfile{}, &ToolProfileList{})
}

// RunnableTools is spec.tools as a sandbox runs them: each MCP tool with
// its server's container as its own (a tool naming no server of the
// profile has none, and the profile is not Ready).
func (s *ToolProfileSpec) RunnableTools() []ToolDefinition {
	out := make([]ToolDefinition, len(s.Tools))
	for i := range s.Tools {
		out[i] = s.Tools[i]
		m := out[i].MCP
		if m == nil {
			continue
		}
		for j := range s.MCPServers {
			if s.MCPServers[j].Name == m.Server {
				out[i].Container = s.MCPServers[j].Container.DeepCopy()
			}
		}
	}
	return out
}

// ToolName is the server's name for the tool whose definition is named
// def.
func (m *MCPToolRuntime) ToolName(def string) string {
	if m.Tool != "" {
		return m.Tool
	}
	return def
}
