// The TypeScript SDK's client v1 (@modelcontextprotocol/sdk) as an agent
// framework sees an MCP server's tools imported into a toolgate profile:
// it lists the session's tools, then calls TOOL with ARGS (JSON) as one
// model turn, and reports both.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { headers, place, report, summary, turn, url } from "./common.mjs";

const client = new Client({ name: "toolgate-test-imported", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
const { tools } = await client.listTools();
report("tools", { tools: tools.map((t) => ({ name: t.name, description: t.description, inputSchema: t.inputSchema, outputSchema: t.outputSchema ?? null })) });
const res = await client.callTool({ name: process.env.TOOL, arguments: JSON.parse(process.env.ARGS), _meta: place(turn, 0, 1) }, undefined, { timeout: 120000 });
report("result", summary(res));
await client.close();
