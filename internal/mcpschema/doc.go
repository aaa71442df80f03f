// Package mcpschema is the digest a ToolProfile pins of an MCP server's
// tool (mcp.schemaDigest): of its description and its input and output
// schemas, each in a canonical form. The runner, which checks the pin on
// the server each call starts, and the controllers, which check it on a
// listing and take a tool's schemas from it, compute it here, once; it
// links the standard library only (the runner's bound).
package mcpschema
