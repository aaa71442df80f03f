package testutil

import (
	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// JSON wraps literal JSON text for schema fields.
func JSON(text string) apiextensionsv1.JSON {
	return apiextensionsv1.JSON{Raw: []byte(text)}
}

// ToolWrapper builds a ToolDefinition.
type ToolWrapper struct {
	toolgatev1alpha1.ToolDefinition
}

// MakeTool returns a valid container tool taking {"text": string} and
// returning a string rendered as text.
func MakeTool(name string) *ToolWrapper {
	return &ToolWrapper{toolgatev1alpha1.ToolDefinition{
		Name:        name,
		Description: "Echo the text back.",
		Parameters: JSON(`{"type":"object","properties":{"text":{"type":"string"}},` +
			`"required":["text"],"additionalProperties":false}`),
		Output: toolgatev1alpha1.OutputDeclaration{
			Schema: JSON(`{"type":"string"}`),
			Render: toolgatev1alpha1.RenderSpec{Format: toolgatev1alpha1.RenderText},
		},
		Container: &toolgatev1alpha1.ContainerRuntime{
			Image:   "toolgate.dev/tools:dev",
			Command: []string{"/bin/cat"},
		},
	}}
}

// Obj returns the definition.
func (w *ToolWrapper) Obj() toolgatev1alpha1.ToolDefinition { return w.ToolDefinition }

// Parameters sets the parameters schema.
func (w *ToolWrapper) Parameters(schema string) *ToolWrapper {
	w.ToolDefinition.Parameters = JSON(schema)
	return w
}

// ConcurrencySafe sets the isConcurrencySafe expression.
func (w *ToolWrapper) ConcurrencySafe(expr string) *ToolWrapper {
	w.IsConcurrencySafe = expr
	return w
}

// ToolProfileWrapper builds a ToolProfile.
type ToolProfileWrapper struct{ toolgatev1alpha1.ToolProfile }

// MakeToolProfile returns a valid profile with one tool, "echo".
func MakeToolProfile(namespace, name string) *ToolProfileWrapper {
	return &ToolProfileWrapper{toolgatev1alpha1.ToolProfile{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: toolgatev1alpha1.ToolProfileSpec{
			Tools: []toolgatev1alpha1.ToolDefinition{MakeTool("echo").Obj()},
		},
	}}
}

// Obj returns the profile.
func (w *ToolProfileWrapper) Obj() *toolgatev1alpha1.ToolProfile { return &w.ToolProfile }

// Tools replaces the tool catalog.
func (w *ToolProfileWrapper) Tools(tools ...toolgatev1alpha1.ToolDefinition) *ToolProfileWrapper {
	w.Spec.Tools = tools
	return w
}

// Preset sets the permission preset.
func (w *ToolProfileWrapper) Preset(p toolgatev1alpha1.PermissionPreset) *ToolProfileWrapper {
	w.Spec.PermissionPreset = p
	return w
}

// PreRule appends a pre-execute rule.
func (w *ToolProfileWrapper) PreRule(name string, action toolgatev1alpha1.PolicyAction, when string, tools ...string) *ToolProfileWrapper {
	w.Spec.PreExecute = append(w.Spec.PreExecute, toolgatev1alpha1.PolicyRule{
		Name: name, Action: action, When: when, Tools: tools,
	})
	return w
}

// Guard appends a guard.
func (w *ToolProfileWrapper) Guard(name, deny, message string, tools ...string) *ToolProfileWrapper {
	w.Spec.Guards = append(w.Spec.Guards, toolgatev1alpha1.GuardRule{
		Name: name, Deny: deny, Message: message, Tools: tools,
	})
	return w
}

// PostRule appends a post-execute rule.
func (w *ToolProfileWrapper) PostRule(rule toolgatev1alpha1.PostRule) *ToolProfileWrapper {
	w.Spec.PostExecute = append(w.Spec.PostExecute, rule)
	return w
}

// Sandbox lets the caller edit the sandbox policy.
func (w *ToolProfileWrapper) Sandbox(edit func(*toolgatev1alpha1.SandboxPolicy)) *ToolProfileWrapper {
	edit(&w.Spec.Sandbox)
	return w
}

// Approval lets the caller edit the approval settings.
func (w *ToolProfileWrapper) Approval(edit func(*toolgatev1alpha1.ApprovalSettings)) *ToolProfileWrapper {
	edit(&w.Spec.Approval)
	return w
}

// AgentSessionWrapper builds an AgentSession.
type AgentSessionWrapper struct{ toolgatev1alpha1.AgentSession }

// MakeAgentSession returns a valid session using the named profile, with no
// workspace.
func MakeAgentSession(namespace, name, profile string) *AgentSessionWrapper {
	return &AgentSessionWrapper{toolgatev1alpha1.AgentSession{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: toolgatev1alpha1.AgentSessionSpec{
			Owner:      "agent", // the requester of MakeToolCall's calls
			ProfileRef: toolgatev1alpha1.LocalObjectReference{Name: profile},
		},
	}}
}

// Obj returns the session.
func (w *AgentSessionWrapper) Obj() *toolgatev1alpha1.AgentSession { return &w.AgentSession }

// MaxParallel sets maxParallel.
func (w *AgentSessionWrapper) MaxParallel(n int32) *AgentSessionWrapper {
	w.Spec.MaxParallel = n
	return w
}

// ExistingClaim mounts an existing claim as the workspace.
func (w *AgentSessionWrapper) ExistingClaim(name string) *AgentSessionWrapper {
	if w.Spec.Workspace == nil {
		w.Spec.Workspace = &toolgatev1alpha1.WorkspaceSpec{}
	}
	w.Spec.Workspace.ExistingClaim = name
	return w
}

// ClaimTemplate makes the session create its workspace claim.
func (w *AgentSessionWrapper) ClaimTemplate(size string) *AgentSessionWrapper {
	if w.Spec.Workspace == nil {
		w.Spec.Workspace = &toolgatev1alpha1.WorkspaceSpec{}
	}
	w.Spec.Workspace.VolumeClaimTemplate = &toolgatev1alpha1.WorkspaceClaimTemplate{Size: resource.MustParse(size)}
	return w
}

// ApprovalTimeout sets approvalTimeoutSeconds.
func (w *AgentSessionWrapper) ApprovalTimeout(seconds int32) *AgentSessionWrapper {
	w.Spec.ApprovalTimeoutSeconds = &seconds
	return w
}

// ToolCallWrapper builds a ToolCall.
type ToolCallWrapper struct{ toolgatev1alpha1.ToolCall }

// MakeToolCall returns a valid call of "echo" at turn 0, index 0.
func MakeToolCall(namespace, name, session string) *ToolCallWrapper {
	return &ToolCallWrapper{toolgatev1alpha1.ToolCall{
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name},
		Spec: toolgatev1alpha1.ToolCallSpec{
			SessionRef: toolgatev1alpha1.LocalObjectReference{Name: session},
			CallID:     "call_" + name,
			Tool:       "echo",
			Arguments:  `{"text":"hello"}`,
			Requester:  "agent",
		},
	}}
}

// Obj returns the call.
func (w *ToolCallWrapper) Obj() *toolgatev1alpha1.ToolCall { return &w.ToolCall }

// At places the call at (turn, index).
func (w *ToolCallWrapper) At(turn int64, index int32) *ToolCallWrapper {
	w.Spec.Turn, w.Spec.Index = turn, index
	return w
}

// Of declares the size of the call's turn.
func (w *ToolCallWrapper) Of(size int32) *ToolCallWrapper {
	w.Spec.TurnSize = size
	return w
}

// Tool sets the tool and its arguments.
func (w *ToolCallWrapper) Tool(tool, arguments string) *ToolCallWrapper {
	w.Spec.Tool, w.Spec.Arguments = tool, arguments
	return w
}

// Requester sets the requester.
func (w *ToolCallWrapper) Requester(user string) *ToolCallWrapper {
	w.Spec.Requester = user
	return w
}

// Parent makes the call a nested call of parent.
func (w *ToolCallWrapper) Parent(parent string) *ToolCallWrapper {
	w.Spec.ParentRef = &toolgatev1alpha1.LocalObjectReference{Name: parent}
	return w
}

// Status builders: a call at each point of its path, as the controllers
// write it. The session's part (status.schedule) and the call's part are
// set by separate builders, as separate controllers write them.

// Admitted records the session's admission with mode.
func (w *ToolCallWrapper) Admitted(mode toolgatev1alpha1.ExecutionMode) *ToolCallWrapper {
	w.Status.Schedule.ExecutionMode = mode
	return w
}

// Released records the session's release with the call's place in the log.
func (w *ToolCallWrapper) Released(seq int64) *ToolCallWrapper {
	w.Status.Schedule.Released, w.Status.Schedule.CommitSequence = true, &seq
	return w
}

// Refused records the session's refusal with code.
func (w *ToolCallWrapper) Refused(code string) *ToolCallWrapper {
	w.Status.Schedule.Refusal = code
	return w
}

// NextStage records where the call stands: its checkpoint's next stage.
func (w *ToolCallWrapper) NextStage(stage string) *ToolCallWrapper {
	if w.Status.Checkpoint == nil {
		w.Status.Checkpoint = &toolgatev1alpha1.PipelineCheckpoint{}
	}
	w.Status.Checkpoint.Next = stage
	w.Status.Phase = toolgatev1alpha1.PhaseRunning
	return w
}

// Settled records the call's result with outcome (and code for a
// failure); the call is committed if it was released.
func (w *ToolCallWrapper) Settled(outcome toolgatev1alpha1.Outcome, code string) *ToolCallWrapper {
	w.Status.Checkpoint = nil
	w.Status.Result = &toolgatev1alpha1.ToolCallResult{Outcome: outcome, ErrorCode: code, SettledAt: metav1.Now()}
	w.Status.Phase = toolgatev1alpha1.PhaseSettled
	if w.Status.Schedule.Released {
		w.Status.Phase = toolgatev1alpha1.PhaseCommitted
	}
	return w
}

// Committed records the call admitted, released at seq and settled as a
// success.
func (w *ToolCallWrapper) Committed(seq int64) *ToolCallWrapper {
	if w.Status.Schedule.ExecutionMode == "" {
		w.Admitted(toolgatev1alpha1.ModeExclusive)
	}
	return w.Released(seq).Settled(toolgatev1alpha1.OutcomeSucceeded, "")
}

// ApprovalRequestWrapper builds an ApprovalRequest.
type ApprovalRequestWrapper struct {
	toolgatev1alpha1.ApprovalRequest
}

// MakeApprovalRequest returns a valid, undecided request about call.
func MakeApprovalRequest(namespace, name, call string, deadline metav1.Time) *ApprovalRequestWrapper {
	return &ApprovalRequestWrapper{toolgatev1alpha1.ApprovalRequest{
		// A seal of the test's own: admission lets an answer name it; the
		// manager, whose key made none of it, counts no answer to it.
		ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name,
			Annotations: map[string]string{toolgatev1alpha1.AnnotationQuestionSeal: "test-seal-" + name}},
		Spec: toolgatev1alpha1.ApprovalRequestSpec{
			ToolCallRef:      toolgatev1alpha1.LocalObjectReference{Name: call},
			Tool:             "echo",
			ArgumentsPreview: `{"text":"hello"}`,
			Reason:           "ask-writes: writes need a human",
			Requester:        "agent",
			Deadline:         metav1.NewMicroTime(deadline.Time),
		},
	}}
}

// Session names the call's session.
func (w *ApprovalRequestWrapper) Session(name string) *ApprovalRequestWrapper {
	w.Spec.SessionRef = &toolgatev1alpha1.LocalObjectReference{Name: name}
	return w
}

// Approvers sets who may answer and how many approvals decide.
func (w *ApprovalRequestWrapper) Approvers(required int32, users, groups []string) *ApprovalRequestWrapper {
	w.Spec.Approvers = &toolgatev1alpha1.Approvers{Required: required, Users: users, Groups: groups}
	return w
}

// Obj returns the request.
func (w *ApprovalRequestWrapper) Obj() *toolgatev1alpha1.ApprovalRequest { return &w.ApprovalRequest }
