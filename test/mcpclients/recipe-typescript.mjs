// A plain TypeScript client (@modelcontextprotocol/client) running one model
// turn of two calls through toolgate.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";

const url = process.env.MCP_URL; // https://GATEWAY/mcp/NAMESPACE/SESSION
const token = process.env.MCP_TOKEN; // a ServiceAccount token for the gateway's audience
const turn = Number(process.env.TOOLGATE_TURN); // the session's status.currentTurn + 1

// "auto" speaks 2026-07-28 (server/discover) with toolgate; drop it for the
// 2025 handshake, which toolgate speaks too.
const client = new Client({ name: "my-agent", version: "1.0.0" }, { versionNegotiation: { mode: "auto" } });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: `Bearer ${token}` } } }));
const { tools } = await client.listTools();
console.log("tools:", tools.map((t) => t.name).join(" "));

// The model's turn: its calls in its order. _meta places each; they run in
// parallel where the profile allows and commit in this order.
const calls = [
  { name: "echo", arguments: { text: "a" } },
  { name: "echo", arguments: { text: "b" } },
];
const results = await Promise.all(
  calls.map((call, index) =>
    client.callTool(
      { ...call, _meta: { "toolgate.dev/turn": turn, "toolgate.dev/index": index, "toolgate.dev/turnSize": calls.length } },
      // An approval may take a person minutes: the gateway repeats the
      // call's progress every 15 s while it waits, and each notification
      // restarts the SDK's request timeout (60 s by default).
      { onprogress: (p) => console.error(p.message), resetTimeoutOnProgress: true },
    ),
  ),
);
for (const r of results) {
  // A denial or a failure is a result with isError, its first text "CODE: message".
  console.log(r.isError ? "error:" : "result:", r.content.map((c) => c.text).join(" "));
}
await client.close();
