// Model order for the OpenAI Agents SDK: toolgate commits a model turn's
// calls in the order the model made them when each call's _meta says its
// turn, index and turn size. The SDK's toolMetaResolver does not see the
// model's call, only the tool and its arguments, so Placed wraps the model:
// it notes where each call of a response stands, and the resolver hands the
// place noted for the same tool and arguments. One Placed serves one
// session; start is the session's status.currentTurn + 1.
export class Placed {
  constructor(start) {
    this.next = start;
    this.places = new Map();
  }

  // model wraps a Model of the SDK.
  model(inner) {
    const note = (output) => {
      const calls = (output ?? []).filter((item) => item.type === "function_call");
      if (calls.length === 0) return;
      const t = this.next++;
      calls.forEach((c, index) => {
        const key = this.key(c.name, JSON.parse(c.arguments || "{}"));
        const queue = this.places.get(key) ?? [];
        queue.push({ "toolgate.dev/turn": t, "toolgate.dev/index": index, "toolgate.dev/turnSize": calls.length, "toolgate.dev/callID": c.callId });
        this.places.set(key, queue);
      });
    };
    return {
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
    };
  }

  // resolver is the MCP server's toolMetaResolver.
  resolver() {
    return ({ toolName, arguments: args }) => this.places.get(this.key(toolName, args ?? {}))?.shift() ?? null;
  }

  key(name, args) {
    return name + "\u0000" + JSON.stringify(args);
  }
}
