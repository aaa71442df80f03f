package v1alpha1

import (
	"strings"
	"testing"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/toolgate/toolgate/internal/mcpschema"
)

// TestDeclaredToolsTakeOnlyPinnedListings: a tool that leaves its
// description and schemas to its MCP server gets them from the server's
// listing in status only when its pin names that listing and the listing
// hashes to it; otherwise it stays incomplete and the problem says why
// (a listing in progress, a server not listed, a tool not listed, no pin,
// another pin, a status edited under its digest, schemas omitted).
func TestDeclaredToolsTakeOnlyPinnedListings(t *testing.T) {
	input := `{"type":"object","properties":{"a":{"type":"number"}},"required":["a"]}`
	digest, err := mcpschema.Digest("Adds.", []byte(input), nil)
	if err != nil {
		t.Fatal(err)
	}
	listed := func() []DiscoveredMCPServer {
		return []DiscoveredMCPServer{{Name: "srv", SpecDigest: "sha256:x", ListedTime: &metav1.Time{}, Tools: []DiscoveredMCPTool{
			{Name: "add", SchemaDigest: digest, Description: "Adds.", InputSchema: &apiextensionsv1.JSON{Raw: []byte(input)}},
		}}}
	}
	profile := func(pin string, status []DiscoveredMCPServer) *ToolProfile {
		return &ToolProfile{
			Spec: ToolProfileSpec{Tools: []ToolDefinition{
				{Name: "add", MCP: &MCPToolRuntime{Server: "srv", SchemaDigest: pin}, Output: OutputDeclaration{Render: RenderSpec{Format: RenderText}}},
				{Name: "whole", Description: "Declared.", Parameters: apiextensionsv1.JSON{Raw: []byte(`{"type":"object"}`)},
					MCP: &MCPToolRuntime{Server: "gone"}, Output: OutputDeclaration{Schema: apiextensionsv1.JSON{Raw: []byte(`{"type":"string"}`)}}},
			}},
			Status: ToolProfileStatus{MCPServers: status},
		}
	}

	p := profile(digest, listed())
	tools, problems := p.DeclaredTools()
	if len(problems) != 0 {
		t.Fatalf("problems %+v", problems)
	}
	if add := tools[0]; add.Description != "Adds." || string(add.Parameters.Raw) != input || string(add.Output.Schema.Raw) != `{"type":"string"}` {
		t.Fatalf("add declared as %+v", add)
	}
	if p.Spec.Tools[0].Description != "" {
		t.Fatal("the spec itself was changed")
	}

	tampered := listed()
	tampered[0].Tools[0].InputSchema.Raw = []byte(`{"type":"object"}`)
	omitted := listed()
	omitted[0].SchemasOmitted = true
	omitted[0].Tools[0].InputSchema, omitted[0].Tools[0].Description = nil, ""
	// Another tool's schemas left out, this one's kept: it is completed.
	othersOmitted := listed()
	othersOmitted[0].SchemasOmitted = true
	if _, problems := profile(digest, othersOmitted).DeclaredTools(); len(problems) != 0 {
		t.Errorf("a listing whose other tools' schemas were left out: %+v", problems)
	}
	pending := listed()
	pending[0].ListedTime = nil
	failed := listed()
	failed[0].Error = "its image cannot be pulled"
	other := listed()
	other[0].Tools[0].Name = "sum"
	for _, c := range []struct {
		name, pin   string
		status      []DiscoveredMCPServer
		reason, has string
	}{
		{"no pin", "", listed(), ToolProfileReasonMCPToolUnpinned, "pin mcp.schemaDigest: " + digest},
		{"another pin", "sha256:" + strings.Repeat("1", 64), listed(), ToolProfileReasonMCPSchemaChanged, "listed " + digest},
		{"a status edited under its digest", digest, tampered, ToolProfileReasonMCPSchemaChanged, "does not hash to its digest"},
		{"schemas omitted", digest, omitted, ToolProfileReasonSchemaInvalid, "too large"},
		{"being listed", digest, pending, ToolProfileReasonMCPListing, "being listed"},
		{"not listed", digest, nil, ToolProfileReasonMCPListing, "being listed"},
		{"server failed", digest, failed, ToolProfileReasonMCPServerUnlisted, "cannot be pulled"},
		{"tool not listed", digest, other, ToolProfileReasonMCPToolMissing, `lists no tool "add"`},
	} {
		tools, problems := profile(c.pin, c.status).DeclaredTools()
		if len(problems) != 1 || problems[0].Tool != "add" || problems[0].Reason != c.reason || !strings.Contains(problems[0].Message, c.has) ||
			!strings.HasPrefix(problems[0].Message, "tool add: its description, parameters, output.schema left to server srv") {
			t.Errorf("%s: %+v", c.name, problems)
		}
		if len(tools[0].Parameters.Raw) != 0 || tools[0].Description != "" {
			t.Errorf("%s: completed all the same: %+v", c.name, tools[0])
		}
	}
}
