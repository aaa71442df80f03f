// LangChain's MCP adapters (@langchain/mcp-adapters), running a model turn
// as LangChain's tool node does: every tool call of the model's message
// invoked at once, a tool error handed back to the model as the tool's
// message. The adapters cannot set a call's _meta; they can set HTTP
// headers per call, so the turn goes in toolgate's placement headers
// (docs/mcp.md's recipe, recipe-langchain.mjs).
import { cancelSignal, failure, report, token, turn, url } from "./common.mjs";
import { toolgateTools } from "./recipe-langchain.mjs";

const { client, tools, noteTurn } = await toolgateTools({ url, token, turn });
report("connected", {});
report("list", { tools: tools.map((t) => t.name).sort() });
const byName = Object.fromEntries(tools.map((t) => [t.name, t]));

// runTurn invokes a model message's tool calls as the tool node does and
// returns what the model reads back: each call's text, or its error.
async function runTurn(toolCalls, config = {}) {
  noteTurn(toolCalls);
  return Promise.all(
    toolCalls.map(async (c) => {
      try {
        const message = await byName[c.name].invoke({ ...c, type: "tool_call" }, config);
        const content = typeof message.content === "string" ? message.content : message.content.map((b) => b.text ?? "").join("");
        return { id: c.id, isError: false, text: content };
      } catch (err) {
        return { id: c.id, isError: true, text: String(err.message ?? err), error: failure(err) };
      }
    }),
  );
}

report("turn", {
  results: await runTurn([
    { id: "call_a", name: "echo", args: { text: "a" } },
    { id: "call_b", name: "echo", args: { text: "b" } },
    { id: "call_w", name: "write", args: { text: "x" } },
  ]),
});
report("denied", (await runTurn([{ id: "call_d", name: "danger", args: { text: "rm" } }]))[0]);

const abort = new AbortController();
const slow = runTurn([{ id: "call_s", name: "slow", args: { text: "z" } }], { signal: abort.signal });
await cancelSignal();
abort.abort();
report("cancelled", (await slow)[0]);
await client.close();
