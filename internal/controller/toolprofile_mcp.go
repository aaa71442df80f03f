package controller

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	apiextensionsv1 "k8s.io/apiextensions-apiserver/pkg/apis/apiextensions/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"sigs.k8s.io/controller-runtime/pkg/log"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/providers/sandbox"
	"github.com/toolgate/toolgate/internal/runner"
	"github.com/toolgate/toolgate/internal/textutil"
)

// Discovery of a profile's MCP servers: each server is listed in a sandbox
// of the profile's provider (sandbox.Lister) once per spec of the server,
// and what it listed is kept in status.mcpServers, where the next
// reconcile (and a restarted manager) finds it. A tool's mcp.schemaDigest
// is checked against the listing here, for people (Ready), and by the
// runner against the server each call starts, for the call.

// Bounds of discovery.
const (
	// listPoll is how often a listing in progress is asked again.
	listPoll = 2 * time.Second
	// listRetry is how long a server that could not be listed waits
	// before it is listed again.
	listRetry = time.Minute
	// relistEvery is how often a server is listed again with its spec
	// unchanged: an image whose tag moved changes a server without its
	// spec (each call checks its pin against the server it starts, so
	// this is for people: Ready says so without a call failing first).
	relistEvery = 30 * time.Minute
	// maxListingStatus bounds what one profile's listings keep of their
	// schemas and descriptions in status; past it, tools are named with
	// their digests only (schemasOmitted).
	maxListingStatus = 512 << 10
)

// discover lists spec's MCP servers that have no listing of their current
// spec in status (or one that failed a while ago), and returns the
// status's listings; pending says a listing is in progress.
func (r *ToolProfileReconciler) discover(ctx context.Context, obj *toolgatev1alpha1.ToolProfile) (listed []toolgatev1alpha1.DiscoveredMCPServer, pending bool) {
	spec := &obj.Spec
	if len(spec.MCPServers) == 0 {
		return nil, false
	}
	lister := listerOf(r.Sandboxes, spec)
	now := metav1.NewTime(r.Clock.Now())
	for _, server := range spec.MCPServers {
		digest := sandbox.ServerDigest(server, spec.Sandbox)
		prev := findListing(obj.Status.MCPServers, server.Name)
		if prev != nil && (prev.SpecDigest != digest || prev.ListedTime == nil) {
			prev = nil // of another spec, or not listed yet
		}
		if prev != nil && !listingDue(prev, now.Time) {
			listed = append(listed, *prev)
			continue
		}
		entry := toolgatev1alpha1.DiscoveredMCPServer{Name: server.Name, SpecDigest: digest}
		if lister == nil {
			entry.ListedTime, entry.Error = &now, "the "+string(spec.Sandbox.Provider)+" sandbox provider cannot list MCP servers (it is not mounted, or has no listing)"
			listed = append(listed, entry)
			continue
		}
		tools, err := listServer(ctx, lister, sandbox.ListJob{
			Key: sandbox.ListKey(obj.UID, server, spec.Sandbox), Owner: types.NamespacedName{Namespace: obj.Namespace, Name: obj.Name}, OwnerUID: obj.UID,
			Server: server, Policy: spec.Sandbox,
		})
		var why string
		switch {
		case errors.Is(err, sandbox.ErrPending):
			pending = true
		case err != nil:
			log.FromContext(ctx).Info("mcp server not listed", "server", server.Name)
			why = textutil.Truncate(textutil.OneLine(err.Error(), 4096), 4096)
		default:
			entry.Tools, why = discovered(tools)
		}
		switch {
		case prev != nil && (pending || why != "") && prev.Error == "":
			// Listed again: the listing before stands until this one
			// ends, and when this one fails, so its tools run on.
			entry = *prev
			if !pending {
				entry.LastAttemptTime, entry.LastError = &now, why
			}
		case pending:
		default:
			entry.ListedTime, entry.Error = &now, why
		}
		listed = append(listed, entry)
	}
	return boundListings(listed, spec), pending
}

// boundListings bounds what status keeps of the listings, measured as the
// API server stores it (JSON, escaped): the schemas of tools no tool of
// spec imports go first, then their descriptions, then the imported tools'
// schemas (schemasOmitted: such a tool must declare them). Names, digests
// and hints always stay: pins are checked against them.
func boundListings(listed []toolgatev1alpha1.DiscoveredMCPServer, spec *toolgatev1alpha1.ToolProfileSpec) []toolgatev1alpha1.DiscoveredMCPServer {
	size := func() int {
		b, _ := json.Marshal(listed)
		return len(b)
	}
	imported := func(server, tool string) bool {
		return slices.ContainsFunc(spec.Tools, func(t toolgatev1alpha1.ToolDefinition) bool {
			return t.MCP != nil && t.MCP.Server == server && t.MCP.ToolName(t.Name) == tool
		})
	}
	for stage := 0; stage < 3 && size() > maxListingStatus; stage++ {
		for i := range listed {
			for j := range listed[i].Tools {
				t := &listed[i].Tools[j]
				switch in := imported(listed[i].Name, t.Name); {
				case stage == 0 && !in:
					t.InputSchema, t.OutputSchema = nil, nil
				case stage == 1 && !in:
					t.Description = ""
				case stage == 2 && in:
					t.InputSchema, t.OutputSchema, t.Description = nil, nil, ""
					listed[i].SchemasOmitted = true
				}
			}
			if stage < 2 && slices.ContainsFunc(listed[i].Tools, func(t toolgatev1alpha1.DiscoveredMCPTool) bool { return !imported(listed[i].Name, t.Name) }) {
				listed[i].SchemasOmitted = true
			}
		}
	}
	// Names and digests alone too large (a thousand long names on each
	// of many servers): the last servers' listings give way to an error.
	for i := len(listed) - 1; i >= 0 && size() > maxListingStatus; i-- {
		n := len(listed[i].Tools)
		listed[i].Tools, listed[i].SchemasOmitted = nil, false
		listed[i].Error = fmt.Sprintf("the server lists %d tools, more than the profile's status can hold beside its other servers' (%d bytes)", n, maxListingStatus)
	}
	return listed
}

// listingDue reports whether a server listed before (of its current spec)
// is listed again now.
func listingDue(prev *toolgatev1alpha1.DiscoveredMCPServer, now time.Time) bool {
	last := prev.ListedTime.Time
	if t := prev.LastAttemptTime; t != nil && t.After(last) {
		last = t.Time
	}
	if prev.Error != "" || prev.LastError != "" {
		return now.Sub(last) >= listRetry
	}
	return now.Sub(last) >= relistEvery
}

func findListing(listed []toolgatev1alpha1.DiscoveredMCPServer, name string) *toolgatev1alpha1.DiscoveredMCPServer {
	for i := range listed {
		if listed[i].Name == name {
			return &listed[i]
		}
	}
	return nil
}

// discovered is a server's tools as status keeps them, sorted by name; an
// error when the listing cannot be kept as it is (a tool listed twice, a
// name or schema the status cannot hold).
func discovered(tools []runner.MCPTool) ([]toolgatev1alpha1.DiscoveredMCPTool, string) {
	if len(tools) > 1000 {
		return nil, fmt.Sprintf("the server lists %d tools; toolgate keeps at most 1000", len(tools))
	}
	out := make([]toolgatev1alpha1.DiscoveredMCPTool, 0, len(tools))
	seen := map[string]bool{}
	for _, t := range tools {
		name := textutil.Truncate(t.Name, 64)
		switch {
		case t.Name == "" || len(t.Name) > 256:
			return nil, fmt.Sprintf("the server lists a tool whose name (%q) is empty or longer than 256 bytes", name)
		case seen[t.Name]:
			return nil, fmt.Sprintf("the server lists the tool %q twice", name)
		}
		seen[t.Name] = true
		digest, err := runner.MCPSchemaDigest(t)
		if err != nil {
			return nil, fmt.Sprintf("the server lists the tool %q with schemas that are not JSON: %v", name, err)
		}
		d := toolgatev1alpha1.DiscoveredMCPTool{Name: t.Name, SchemaDigest: digest, Description: t.Description, Hints: hints(t.Annotations)}
		if len(d.Description) > 16384 {
			d.Description = textutil.Truncate(d.Description, 16000)
		}
		if len(t.InputSchema) > 0 {
			d.InputSchema = &apiextensionsv1.JSON{Raw: t.InputSchema}
		}
		if len(t.OutputSchema) > 0 {
			d.OutputSchema = &apiextensionsv1.JSON{Raw: t.OutputSchema}
		}
		out = append(out, d)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, ""
}

// hints are the tool's annotations the server set, as name=value.
func hints(raw json.RawMessage) []string {
	var a struct {
		ReadOnly    *bool `json:"readOnlyHint"`
		Destructive *bool `json:"destructiveHint"`
		Idempotent  *bool `json:"idempotentHint"`
		OpenWorld   *bool `json:"openWorldHint"`
	}
	if len(raw) == 0 || json.Unmarshal(raw, &a) != nil {
		return nil
	}
	var out []string
	for _, h := range []struct {
		name string
		v    *bool
	}{{"readOnlyHint", a.ReadOnly}, {"destructiveHint", a.Destructive}, {"idempotentHint", a.Idempotent}, {"openWorldHint", a.OpenWorld}} {
		if h.v != nil {
			out = append(out, fmt.Sprintf("%s=%t", h.name, *h.v))
		}
	}
	return out
}

// pinsHold checks each MCP tool of spec against its server's listing: the
// Ready condition's reason and message when one does not hold ("" when
// every one does), and a warning for each tool not pinned.
func pinsHold(spec *toolgatev1alpha1.ToolProfileSpec, listed []toolgatev1alpha1.DiscoveredMCPServer) (reason, message string, warnings []string) {
	var listing, unlisted, missing, changed []string
	said := map[string]bool{}
	for _, def := range spec.Tools {
		m := def.MCP
		if m == nil {
			continue
		}
		srv := findListing(listed, m.Server)
		name := m.ToolName(def.Name)
		switch {
		case srv == nil:
			continue // a server the profile does not declare: compile says so
		case srv.ListedTime == nil:
			if !said[m.Server] {
				listing = append(listing, m.Server)
			}
			said[m.Server] = true
			continue
		case srv.Error != "":
			if !said[m.Server] {
				unlisted = append(unlisted, fmt.Sprintf("server %s could not be listed: %s", m.Server, srv.Error))
			}
			said[m.Server] = true
			continue
		}
		i := slices.IndexFunc(srv.Tools, func(t toolgatev1alpha1.DiscoveredMCPTool) bool { return t.Name == name })
		if i < 0 {
			names := make([]string, 0, len(srv.Tools))
			for _, t := range srv.Tools {
				names = append(names, t.Name)
			}
			missing = append(missing, fmt.Sprintf("tool %s: server %s lists no tool %q (it lists: %s)", def.Name, m.Server, name, textutil.Truncate(strings.Join(names, ", "), 512)))
			continue
		}
		t := srv.Tools[i]
		switch {
		case m.SchemaDigest == "":
			warnings = append(warnings, fmt.Sprintf("tool %s: not pinned: server %s may change it unnoticed; after reviewing it in status.mcpServers, pin mcp.schemaDigest: %s", def.Name, m.Server, t.SchemaDigest))
		case m.SchemaDigest != t.SchemaDigest:
			changed = append(changed, fmt.Sprintf("tool %s: server %s lists %q with other schemas than mcp.schemaDigest pins (pinned %s, listed %s; it now takes %s), and its calls fail schema_changed until the pin is updated",
				def.Name, m.Server, name, m.SchemaDigest, t.SchemaDigest, schemaSummary(t)))
		}
	}
	for _, srv := range listed {
		if srv.LastError != "" && srv.Error == "" {
			warnings = append(warnings, fmt.Sprintf("server %s could not be listed again (its listing of %s stands): %s", srv.Name, srv.ListedTime.UTC().Format(time.RFC3339), srv.LastError))
		}
	}
	switch {
	case len(unlisted) > 0:
		return toolgatev1alpha1.ToolProfileReasonMCPServerUnlisted, strings.Join(unlisted, "; "), warnings
	case len(changed) > 0:
		return toolgatev1alpha1.ToolProfileReasonMCPSchemaChanged, strings.Join(changed, "; "), warnings
	case len(missing) > 0:
		return toolgatev1alpha1.ToolProfileReasonMCPToolMissing, strings.Join(missing, "; "), warnings
	case len(listing) > 0:
		return toolgatev1alpha1.ToolProfileReasonMCPListing, "listing the tools of the MCP servers " + strings.Join(listing, ", "), warnings
	}
	return "", "", warnings
}

// schemaSummary says in a few words what a listed tool takes and returns:
// its input's properties (required ones marked *) and its output's.
func schemaSummary(t toolgatev1alpha1.DiscoveredMCPTool) string {
	props := func(j *apiextensionsv1.JSON) string {
		var s struct {
			Properties map[string]json.RawMessage `json:"properties"`
			Required   []string                   `json:"required"`
		}
		if j == nil || json.Unmarshal(j.Raw, &s) != nil {
			return "?"
		}
		names := make([]string, 0, len(s.Properties))
		for n := range s.Properties {
			if slices.Contains(s.Required, n) {
				n += "*"
			}
			names = append(names, n)
		}
		sort.Strings(names)
		return "{" + strings.Join(names, ", ") + "}"
	}
	if t.InputSchema == nil && t.OutputSchema == nil {
		return "schemas omitted from status"
	}
	out := "input " + props(t.InputSchema)
	if t.OutputSchema != nil {
		out += ", output " + props(t.OutputSchema)
	}
	return textutil.Truncate(out, 512)
}
