// toolgate for the OpenAI Agents SDK (@openai/agents): the MCP server an
// agent lists, and a wrapper for its model that places each call in model
// order. The SDK's toolMetaResolver sees a call's tool and arguments, not
// the model's call, so the wrapper notes where each call of a response
// stands and the resolver hands on the place noted for the same tool and
// arguments.
import { MCPServerStreamableHttp } from "@openai/agents";

// toolgate returns the server and the model wrapper for one session; turn is
// the session's status.currentTurn + 1.
export function toolgate({ url, token, turn }) {
  let next = turn;
  const places = new Map();
  const key = (name, args) => name + "\u0000" + JSON.stringify(args ?? {});
  const note = (output) => {
    const calls = (output ?? []).filter((item) => item.type === "function_call");
    if (calls.length === 0) return;
    const t = next++;
    calls.forEach((c, index) => {
      const k = key(c.name, JSON.parse(c.arguments || "{}"));
      places.set(k, [...(places.get(k) ?? []), {
        "toolgate.dev/turn": t, "toolgate.dev/index": index, "toolgate.dev/turnSize": calls.length, "toolgate.dev/callID": c.callId,
      }]);
    });
  };
  const server = new MCPServerStreamableHttp({
    url,
    name: "toolgate",
    requestInit: { headers: { Authorization: `Bearer ${token}` } },
    cacheToolsList: false, // the list follows the profile: list it again each run
    timeout: 60 * 60 * 1000, // an approval may take a person minutes: as long as the gateway waits
    toolMetaResolver: ({ toolName, arguments: args }) => places.get(key(toolName, args))?.shift() ?? null,
  });
  const model = (inner) => ({
    async getResponse(request) {
      const res = await inner.getResponse(request);
      note(res.output);
      return res;
    },
    async *getStreamedResponse(request) {
      for await (const event of inner.getStreamedResponse(request)) {
        if (event.type === "response_done") note(event.response?.output);
        yield event;
      }
    },
  });
  return { server, model };
}
