// The TypeScript SDK's client v2 (@modelcontextprotocol/client), the one
// the OpenAI Agents SDK uses. MODE: legacy (the 2025 handshake), auto
// (server/discover, then 2026-07-28 when offered) or a revision to pin.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { headers, report, scenario, url } from "./common.mjs";

const raw = process.env.MODE ?? "auto";
const mode = raw === "legacy" || raw === "auto" ? raw : { pin: raw };
const client = new Client({ name: "toolgate-test-ts-v2", version: "1.0.0" }, { versionNegotiation: { mode } });
await client.connect(new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers } }));
report("connected", { era: client.getProtocolEra?.() ?? null, protocolVersion: client.getNegotiatedProtocolVersion?.() ?? null });
await scenario(
  async () => (await client.listTools()).tools,
  (name, args, meta, { signal, onprogress }) =>
    client.callTool({ name, arguments: args, _meta: meta }, { signal, onprogress, timeout: 300000 }),
);
await client.close();
