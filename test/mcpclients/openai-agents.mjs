// The OpenAI Agents SDK (@openai/agents) running an agent whose model is
// scripted here: its responses are function calls, so no network and no API
// key. The agent reaches toolgate through docs/mcp.md's recipe
// (recipe-openai-agents.mjs).
import { Agent, Runner, Usage, setTracingDisabled } from "@openai/agents";
import { cancelSignal, failure, report, token, turn, url } from "./common.mjs";
import { toolgate } from "./recipe-openai-agents.mjs";

setTracingDisabled(true);

// scripted answers each model request with the next response of a script;
// it records the tool outputs each request carries.
class Scripted {
  constructor(responses) {
    this.responses = responses;
    this.seen = [];
  }
  async getResponse(request) {
    const input = Array.isArray(request.input) ? request.input : [];
    for (const item of input) {
      if (item.type === "function_call_result") this.seen.push({ callId: item.callId, output: item.output });
    }
    const output = this.responses.shift();
    if (!output) throw new Error("the script has no more responses");
    return { usage: new Usage(), output };
  }
  async *getStreamedResponse() {
    throw new Error("not streamed");
  }
}

const call = (callId, name, args) => ({ type: "function_call", callId, name, arguments: JSON.stringify(args), status: "completed" });
const say = (text) => ({ type: "message", role: "assistant", status: "completed", content: [{ type: "output_text", text }] });

const { server, model: placed } = toolgate({ url, token, turn });
await server.connect();
report("connected", {});
report("list", { tools: (await server.listTools()).map((t) => t.name).sort() });

// One run: a model turn of two reads and a write (in parallel), then a turn
// with a call the policy denies, then the answer.
const model = new Scripted([
  [call("call_a", "echo", { text: "a" }), call("call_b", "echo", { text: "b" }), call("call_w", "write", { text: "x" })],
  [call("call_d", "danger", { text: "rm" })],
  [say("done")],
]);
const agent = new Agent({ name: "toolgate-test", instructions: "Use the tools.", model: placed(model), mcpServers: [server] });
const result = await new Runner({ tracingDisabled: true }).run(agent, "go");
report("run", { final: result.finalOutput, seen: model.seen });

// A second run whose one call the client cancels while it runs.
const slowModel = new Scripted([[call("call_s", "slow", { text: "z" })], [say("never")]]);
const slowAgent = new Agent({ name: "toolgate-test-cancel", instructions: "Use the tools.", model: placed(slowModel), mcpServers: [server] });
const abort = new AbortController();
const pending = new Runner({ tracingDisabled: true }).run(slowAgent, "go", { signal: abort.signal });
await cancelSignal();
abort.abort();
try {
  const r = await pending;
  report("cancelled", { resolved: { final: r.finalOutput, seen: slowModel.seen } });
} catch (err) {
  report("cancelled", { error: failure(err) });
}
await server.close();
