package controller

import (
	"fmt"
	"slices"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/pipeline"
	"github.com/toolgate/toolgate/internal/profile"
)

// neverRuns says why a call of tc's tool could never run, with the code it
// settles with ("" when it could): a built-in tool in a session without a
// workspace (the gateway does not list it either), or an MCP server's tool
// its server's listing was to complete and cannot (the profile left it
// out). Such a call is settled before anybody is asked about it.
func neverRuns(tc *toolgatev1alpha1.ToolCall, session *toolgatev1alpha1.AgentSession, spec *toolgatev1alpha1.ToolProfileSpec,
	compiled *profile.Compiled, profileName string) (pipeline.Code, string) {
	if i := slices.IndexFunc(spec.Tools, func(t toolgatev1alpha1.ToolDefinition) bool { return t.Name == tc.Spec.Tool }); i >= 0 &&
		spec.Tools[i].Builtin != nil && session.Spec.Workspace == nil {
		return pipeline.CodeWorkspaceUnavailable, fmt.Sprintf(
			"tool %s is built in and works on the session's workspace; AgentSession %s declares none (spec.workspace)", tc.Spec.Tool, session.Name)
	}
	if i := slices.IndexFunc(compiled.Unavailable, func(pr toolgatev1alpha1.ToolProblem) bool { return pr.Tool == tc.Spec.Tool }); i >= 0 {
		pr := compiled.Unavailable[i]
		code := pipeline.CodeProfileUnavailable
		if pr.Reason == toolgatev1alpha1.ToolProfileReasonMCPSchemaChanged {
			code = pipeline.CodeSchemaChanged
		}
		return code, fmt.Sprintf("ToolProfile %s cannot run %s: %s", profileName, pr.Tool, pr.Message)
	}
	return "", ""
}
