package v1alpha1

import (
	"fmt"
	"slices"
	"strings"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"

	"github.com/toolgate/toolgate/internal/mcpschema"
)

// ToolProblem says why a tool's declaration is not complete: a Ready
// condition reason and a message naming the tool.
type ToolProblem struct {
	Tool    string
	Reason  string
	Message string
}

// DeclaredTools is spec.tools with what each MCP server's tool leaves to
// its server (description, parameters, output schema) taken from the
// server's listing in status, and a problem for each tool whose
// declaration cannot be completed (left as it is in tools). A tool's
// schemas are taken only from a listing its mcp.schemaDigest pins, whose
// description and schemas hash to that digest: never from a server the
// profile did not review, nor from a status written by another hand.
func (p *ToolProfile) DeclaredTools() (tools []ToolDefinition, problems []ToolProblem) {
	tools = make([]ToolDefinition, len(p.Spec.Tools))
	for i := range p.Spec.Tools {
		p.Spec.Tools[i].DeepCopyInto(&tools[i])
		t := &tools[i]
		if t.MCP == nil || !t.leavesToServer() {
			continue
		}
		if reason, message := fromListing(t, p.Status.MCPServers); reason != "" {
			problems = append(problems, ToolProblem{Tool: t.Name, Reason: reason, Message: "tool " + t.Name + ": " + message})
		}
	}
	return tools, problems
}

// leavesToServer reports whether the tool leaves part of its declaration
// to its MCP server.
func (t *ToolDefinition) leavesToServer() bool {
	return t.Description == "" || len(t.Parameters.Raw) == 0 || len(t.Output.Schema.Raw) == 0
}

// fromListing completes t from its server's listing, or says why not.
func fromListing(t *ToolDefinition, listed []DiscoveredMCPServer) (reason, message string) {
	m := t.MCP
	name := m.ToolName(t.Name)
	i := slices.IndexFunc(listed, func(s DiscoveredMCPServer) bool { return s.Name == m.Server })
	var left []string
	for _, f := range []struct {
		name  string
		empty bool
	}{{"description", t.Description == ""}, {"parameters", len(t.Parameters.Raw) == 0}, {"output.schema", len(t.Output.Schema.Raw) == 0}} {
		if f.empty {
			left = append(left, f.name)
		}
	}
	what := "its " + strings.Join(left, ", ") + " left to server " + m.Server
	switch {
	case i < 0 || listed[i].ListedTime == nil:
		return ToolProfileReasonMCPListing, what + ", which is being listed"
	case listed[i].Error != "":
		return ToolProfileReasonMCPServerUnlisted, what + ", which could not be listed: " + listed[i].Error
	}
	srv := &listed[i]
	j := slices.IndexFunc(srv.Tools, func(d DiscoveredMCPTool) bool { return d.Name == name })
	if j < 0 {
		return ToolProfileReasonMCPToolMissing, fmt.Sprintf("%s, which lists no tool %q", what, name)
	}
	d := &srv.Tools[j]
	switch {
	case m.SchemaDigest == "":
		return ToolProfileReasonMCPToolUnpinned, fmt.Sprintf("%s: they are taken only from a listing the profile pins; review %q in status.mcpServers and pin mcp.schemaDigest: %s", what, name, d.SchemaDigest)
	case d.SchemaDigest != m.SchemaDigest:
		return ToolProfileReasonMCPSchemaChanged, fmt.Sprintf("%s, which lists %q with other schemas than mcp.schemaDigest pins (pinned %s, listed %s)", what, name, m.SchemaDigest, d.SchemaDigest)
	case srv.SchemasOmitted && d.InputSchema == nil && d.OutputSchema == nil && d.Description == "":
		return ToolProfileReasonSchemaInvalid, what + ", whose listing was too large for the status to keep its schemas: declare them"
	}
	digest, err := mcpschema.Digest(d.Description, rawOf(d.InputSchema), rawOf(d.OutputSchema))
	if err != nil || digest != m.SchemaDigest {
		return ToolProfileReasonMCPSchemaChanged, what + ": its listing in status does not hash to its digest (cut to fit, or written by another hand): declare them"
	}
	if t.Description == "" {
		if d.Description == "" || len(d.Description) > 4096 {
			return ToolProfileReasonSchemaInvalid, what + ": the server's description is empty or longer than 4096 bytes: write one"
		}
		t.Description = d.Description
	}
	if len(t.Parameters.Raw) == 0 {
		t.Parameters.Raw = slices.Clone(rawOf(d.InputSchema))
		if len(t.Parameters.Raw) == 0 {
			t.Parameters.Raw = []byte(`{"type":"object"}`)
		}
	}
	if len(t.Output.Schema.Raw) == 0 {
		// A server that declares no output schema answers with text.
		t.Output.Schema.Raw = slices.Clone(rawOf(d.OutputSchema))
		if len(t.Output.Schema.Raw) == 0 {
			t.Output.Schema.Raw = []byte(`{"type":"string"}`)
		}
	}
	return "", ""
}

func rawOf(j *apiextensionsv1.JSON) []byte {
	if j == nil {
		return nil
	}
	return j.Raw
}
