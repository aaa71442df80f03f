package gateway

import (
	"encoding/json"
	"fmt"
	"regexp"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/codes"
	"github.com/toolgate/toolgate/pkg/agent"
)

// toolName is the API's pattern for a tool name (ToolCallSpec.tool).
var toolName = regexp.MustCompile(`^[a-z]([a-z0-9_-]{0,61}[a-z0-9])?$`)

func validToolName(name string) bool { return toolName.MatchString(name) }

// unknownTool is the one answer for a tool the session does not list,
// whether it does not exist or the caller may not use it: a denial never
// reveals which.
func unknownTool(name string) string {
	return fmt.Sprintf("no tool named %q is available in this session", name)
}

// refusal is the gateway's own isError answer, given without a result.
func refusal(code, message string) *mcp.CallToolResult {
	return &mcp.CallToolResult{
		IsError: true,
		Content: []mcp.Content{&mcp.TextContent{Text: code + ": " + message}},
		Meta:    mcp.Meta{agent.MetaCode: code},
	}
}

// toResult maps a final ToolCall onto an MCP result. A success carries its
// content as text and, when the tool's output schema is an object, its
// value (already validated against that schema by the pipeline) as
// structuredContent. Every other outcome is isError with the stable code
// and message, never a protocol error. _meta names the ToolCall, its outcome
// and commit sequence, and the contexts it deferred.
func toResult(tc *toolgatev1alpha1.ToolCall, l listed) *mcp.CallToolResult {
	r := tc.Status.Result
	m := mcp.Meta{agent.MetaToolCall: tc.Name, agent.MetaOutcome: string(r.Outcome)}
	if seq := tc.Status.Schedule.CommitSequence; seq != nil {
		m[agent.MetaCommitSequence] = *seq
	}
	if len(r.Contexts) > 0 {
		m[agent.MetaContexts] = r.Contexts
	}
	if r.Outcome == toolgatev1alpha1.OutcomeSucceeded {
		res := &mcp.CallToolResult{Meta: m, Content: []mcp.Content{&mcp.TextContent{Text: r.Content}}}
		if l.structured[tc.Spec.Tool] && r.Value != "" {
			res.StructuredContent = json.RawMessage(r.Value)
		}
		return res
	}
	code, message := r.ErrorCode, r.Message
	if !l.has(tc.Spec.Tool) {
		code, message = codes.UnknownTool, unknownTool(tc.Spec.Tool)
		delete(m, agent.MetaContexts)
	}
	m[agent.MetaCode] = code
	content := []mcp.Content{&mcp.TextContent{Text: code + ": " + message}}
	// The pipeline renders a failure as "error: CODE: MESSAGE"; content
	// that says no more than that is not repeated.
	rendered := r.Content == message || r.Content == "error: "+code || r.Content == "error: "+code+": "+message
	if r.Content != "" && !rendered && l.has(tc.Spec.Tool) {
		content = append(content, &mcp.TextContent{Text: r.Content})
	}
	return &mcp.CallToolResult{IsError: true, Meta: m, Content: content}
}

// revisionResultType is the first protocol revision whose results carry
// resultType.
const revisionResultType = "2026-07-28"

// completeResult is a tools/call result for a client speaking a revision
// that requires resultType on every result. The SDK sets it only on the
// results of tools registered with it; the gateway answers tools/call
// itself (the tool list depends on the caller), so it sets it here.
// Embedding keeps the value an mcp.Result.
type completeResult struct{ *mcp.CallToolResult }

// MarshalJSON is the result's JSON with "resultType": "complete".
func (c completeResult) MarshalJSON() ([]byte, error) {
	raw, err := json.Marshal(c.CallToolResult)
	if err != nil {
		return nil, err
	}
	var fields map[string]json.RawMessage
	if err := json.Unmarshal(raw, &fields); err != nil {
		return nil, err
	}
	fields["resultType"] = json.RawMessage(`"complete"`)
	return json.Marshal(fields)
}

// forRevision returns res as the session's revision expects it. As in the
// SDK, a session that negotiated nothing speaks the newest revision.
func forRevision(ss *mcp.ServerSession, res *mcp.CallToolResult) mcp.Result {
	if ss == nil {
		return res
	}
	if p := ss.InitializeParams(); p != nil && p.ProtocolVersion < revisionResultType {
		return res
	}
	return completeResult{res}
}
