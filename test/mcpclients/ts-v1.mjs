// The TypeScript SDK's client v1 (@modelcontextprotocol/sdk), negotiating
// the revision it prefers.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { headers, report, scenario, url } from "./common.mjs";

const client = new Client({ name: "toolgate-test-ts-v1", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
report("connected", { protocolVersion: client.transport?.protocolVersion ?? null });
await scenario(
  async () => (await client.listTools()).tools,
  (name, args, meta, { signal, onprogress }) =>
    client.callTool({ name, arguments: args, _meta: meta }, undefined, { signal, onprogress, timeout: 300000 }),
);
await client.close();
