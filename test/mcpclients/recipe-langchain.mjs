// toolgate for LangChain (@langchain/mcp-adapters): the session's tools, and
// noteTurn, called with each model message's tool_calls before they run. The
// adapters cannot set a call's _meta but can set its HTTP headers, so each
// call's place goes in toolgate's placement headers.
import { MultiServerMCPClient } from "@langchain/mcp-adapters";

// toolgateTools returns the client and the tools of one session; turn is the
// session's status.currentTurn + 1.
export async function toolgateTools({ url, token, turn }) {
  const auth = { Authorization: `Bearer ${token}` };
  const places = new Map();
  let next = turn;
  const noteTurn = (toolCalls) => {
    const t = next++;
    toolCalls.forEach((c, index) => places.set(c.id, {
      "Toolgate-Turn": String(t), "Toolgate-Index": String(index), "Toolgate-Turn-Size": String(toolCalls.length), "Toolgate-Call-Id": c.id,
    }));
  };
  const client = new MultiServerMCPClient({
    mcpServers: { toolgate: { transport: "http", url, headers: auth } },
    throwOnLoadError: true,
    // An approval may take a person minutes: as long as the gateway waits
    // (the SDK's request timeout is 60 s by default).
    defaultToolTimeout: 60 * 60 * 1000,
    // The headers returned replace the connection's: the token goes again.
    beforeToolCall: (_call, _state, config) => ({ headers: { ...auth, ...(places.get(config?.toolCall?.id) ?? {}) } }),
  });
  return { client, tools: await client.getTools(), noteTurn };
}
