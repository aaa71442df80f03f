// Package agent is toolgate's Go client for agents: it opens or attaches to
// an AgentSession, submits one model turn of tool calls as ToolCall objects,
// delivers their results in model order as they commit (by watch, never by
// polling), cancels calls, and reads the deferred contexts released once a
// turn commits.
//
// It also names the vocabulary shared with the MCP gateway
// (cmd/toolgate-gateway): the deterministic name of a call, and the _meta
// keys an MCP client uses to place a call in a turn. A call submitted through
// either is the same object, so a client can mix them.
//
// The client acts with its own credentials: the API server's admission
// decides who may open a session, submit a call in it, or cancel one.
package agent
