// Package mcpservers holds real MCP servers from the npm registry that
// toolgate's tests run as tools nobody here wrote: versions pinned by
// package-lock.json, installed by hack/npm-clients.sh into the cache and
// linked as node_modules (Install); and one Go server, the Go SDK's
// example, built from the module proxy (GoEverything).
package mcpservers
