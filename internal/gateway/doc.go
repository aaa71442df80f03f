// Package gateway is toolgate's MCP server: it serves the Model Context
// Protocol over Streamable HTTP (github.com/modelcontextprotocol/go-sdk) and
// turns each tools/call into one ToolCall, so every call an MCP client makes
// passes the whole pipeline and commits in model order.
//
// The gateway holds no state of its own. A caller authenticates with a
// Kubernetes ServiceAccount token, checked by TokenReview against the
// gateway's audience; the gateway then acts as that ServiceAccount
// (impersonation), so the API server's RBAC and admission decide what it may
// do — create a call in a session, read a profile, cancel a call — never the
// gateway alone. A client is bound to one AgentSession by the URL path
// /mcp/{namespace}/{session}. docs/mcp.md is the user's guide.
package gateway
