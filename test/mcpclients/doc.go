// Package mcpclients runs MCP clients from the npm registry (the
// TypeScript SDK's clients v1 and v2, the OpenAI Agents SDK, LangChain's
// MCP adapters) against a toolgate gateway, for the gateway's specs and the
// e2e suite: each client is a script here, its versions pinned by
// package-lock.json and installed by hack/npm-clients.sh into the cache.
package mcpclients
