package gateway

import (
	"encoding/json"
	"slices"

	"github.com/modelcontextprotocol/go-sdk/mcp"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
)

// listed is what the gateway shows of a profile: the tools a caller may
// use, each with its MCP description, and whether its results carry
// structured content.
type listed struct {
	tools      []*mcp.Tool
	structured map[string]bool
}

// has reports whether name is a listed tool.
func (l listed) has(name string) bool {
	_, ok := l.structured[name]
	return ok
}

// listTools maps the tools of a session's profile onto MCP tools. A tool the
// profile denies to every call without looking at it is not listed (see
// usable), nor a built-in tool when the session has no workspace for it to
// work on (its call would settle workspace_unavailable). The input
// schema is the tool's parameters; the output schema is given only when it
// describes an object, the shape every protocol revision accepts for
// structuredContent; other values reach the model as text content.
func listTools(p *toolgatev1alpha1.ToolProfile, s *toolgatev1alpha1.AgentSession) listed {
	l := listed{structured: map[string]bool{}}
	tools, problems := p.DeclaredTools()
	for i := range tools {
		t := &tools[i]
		if !usable(p, t.Name) || (t.Builtin != nil && s.Spec.Workspace == nil) ||
			slices.ContainsFunc(problems, func(pr toolgatev1alpha1.ToolProblem) bool { return pr.Tool == t.Name }) {
			continue // a tool whose declaration its server was to complete, and did not, cannot be called
		}
		tool := &mcp.Tool{Name: t.Name, Description: t.Description, InputSchema: json.RawMessage(t.Parameters.Raw)}
		if objectSchema(t.Output.Schema.Raw) {
			tool.OutputSchema = json.RawMessage(t.Output.Schema.Raw)
			l.structured[t.Name] = true
		} else {
			l.structured[t.Name] = false
		}
		l.tools = append(l.tools, tool)
	}
	return l
}

// usable reports whether some call of the tool could be allowed: false when
// the first pre-execute rule applying to it matches every call and denies
// (or none applies and the preset is Restricted), or a guard denies it
// unconditionally. A rule with a condition might not match, so the tool
// stays listed; the pipeline still decides each call.
func usable(p *toolgatev1alpha1.ToolProfile, tool string) bool {
	applies := func(tools []string) bool { return len(tools) == 0 || slices.Contains(tools, tool) }
	for _, g := range p.Spec.Guards {
		if applies(g.Tools) && g.Deny == "true" {
			return false
		}
	}
	for _, r := range p.Spec.PreExecute {
		if !applies(r.Tools) {
			continue
		}
		if r.When != "" {
			return true
		}
		return r.Action != toolgatev1alpha1.ActionDeny
	}
	// An unset preset is the API's default, Restricted.
	preset := p.Spec.PermissionPreset
	return preset != "" && preset != toolgatev1alpha1.PresetRestricted
}

// objectSchema reports whether a JSON Schema declares type "object".
func objectSchema(raw []byte) bool {
	var s struct {
		Type any `json:"type"`
	}
	if json.Unmarshal(raw, &s) != nil {
		return false
	}
	return s.Type == "object"
}
