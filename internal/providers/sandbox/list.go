package sandbox

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"

	"k8s.io/apimachinery/pkg/types"

	toolgatev1alpha1 "github.com/toolgate/toolgate/api/v1alpha1"
	"github.com/toolgate/toolgate/internal/runner"
)

// Lister is the seam's capability of listing an MCP server's tools in a
// sandbox of the provider's (discovery): the server, started as a call's
// body would be, but with no network, no call, and an empty workspace
// where the provider can give one (a server may refuse to start without
// the directory it serves, as server-filesystem does), is asked its tools
// and stopped.
type Lister interface {
	// List starts the listing job names the first time it sees its key,
	// answers ErrPending while it runs, and returns the server's tools
	// once it has ended (the provider then forgets it); any other error
	// says why the server could not be listed.
	List(ctx context.Context, job ListJob) ([]runner.MCPTool, error)
}

// ListJob is one listing of one MCP server of a profile.
type ListJob struct {
	// Key names the listing: the same key always names the same server's
	// spec, so a provider re-attaches to a listing instead of starting it
	// twice.
	Key string
	// Owner is the ToolProfile the listing is for (its sandbox's owner).
	Owner    types.NamespacedName
	OwnerUID types.UID
	// Server is the server to list.
	Server toolgatev1alpha1.MCPServer
	// Policy is the profile's sandbox policy (defaults applied): the
	// listing runs as confined as a call would, and reaches nothing.
	Policy toolgatev1alpha1.SandboxPolicy
}

// ListTimeoutSeconds bounds a listing from its server's start.
const ListTimeoutSeconds = 60

// ServerDigest is the digest of what starts server under policy (its
// container, and what of the sandbox it starts in may change what it
// lists: the runtime, the workspace's place, the resources): a listing is
// of one such spec, and a changed one is listed again.
func ServerDigest(server toolgatev1alpha1.MCPServer, policy toolgatev1alpha1.SandboxPolicy) string {
	b, _ := json.Marshal(struct {
		Container     toolgatev1alpha1.ContainerRuntime `json:"container"`
		RuntimeClass  *string                           `json:"runtimeClassName,omitempty"`
		WorkspaceRoot string                            `json:"workspaceRoot,omitempty"`
		Resources     toolgatev1alpha1.SandboxResources `json:"resources"`
	}{server.Container, policy.RuntimeClassName, policy.WorkspaceRoot, policy.Resources})
	sum := sha256.Sum256(b)
	return "sha256:" + hex.EncodeToString(sum[:])
}

// ListKey is the key of the listing of server under policy for the
// profile with uid.
func ListKey(uid types.UID, server toolgatev1alpha1.MCPServer, policy toolgatev1alpha1.SandboxPolicy) string {
	return string(uid) + "/" + server.Name + "/" + ServerDigest(server, policy)[len("sha256:"):][:16]
}

// ListTool is the definition a listing runs: the server's container, its
// budget, and no network of its own.
func ListTool(job ListJob) *toolgatev1alpha1.ToolDefinition {
	return &toolgatev1alpha1.ToolDefinition{
		Name:           "mcp-list",
		Container:      job.Server.Container.DeepCopy(),
		TimeoutSeconds: ListTimeoutSeconds,
	}
}

// ListSpec is what the runner runs for a listing; workspace is the root
// of the (empty) workspace the provider gives it, "" for none.
func ListSpec(job ListJob, workspace string) runner.Spec {
	spec := RunnerSpec(Job{Tool: ListTool(job), Policy: job.Policy}, workspace)
	spec.MCPList, spec.MaxOutputBytes, spec.Writable = true, MaxListingBytes, false
	return spec
}

// MaxListingBytes bounds a listing's value.
const MaxListingBytes = 4 << 20
