// A model turn whose first call waits for a person, run by the TypeScript
// SDK's client v2 (@modelcontextprotocol/client) over Node's HTTP client
// (undici), whose defaults end a response that sends no headers, or no body
// byte, for 300 s.
//
// Index 0 is a write a person approves; the client asked for progress and
// lets each notification restart its own request timeout
// (resetTimeoutOnProgress). Index 1 runs at once but commits after index 0;
// it asked for no progress, so only the stream's keep-alives reach it.
//
// Options (environment): HTTP_TIMEOUT_MS, when set, is undici's
// headersTimeout and bodyTimeout and the SDK's request timeout, scaled down
// from 300 s so that a spec can show in seconds what a person's minutes do;
// unset, the client runs with undici's defaults (Node's fetch) and the SDK's
// 60 s request timeout.
import { Client, StreamableHTTPClientTransport } from "@modelcontextprotocol/client";
import { Agent, fetch as undiciFetch } from "undici";
import { headers, place, report, summary, turn, url } from "./common.mjs";

const scaled = Number(process.env.HTTP_TIMEOUT_MS ?? 0);
const options = { requestInit: { headers } };
if (scaled > 0) {
  const dispatcher = new Agent({ headersTimeout: scaled, bodyTimeout: scaled });
  options.fetch = (input, init) => undiciFetch(input, { ...init, dispatcher });
}
const client = new Client({ name: "toolgate-test-wait-for-person", version: "1.0.0" });
await client.connect(new StreamableHTTPClientTransport(new URL(url), options));
report("connected");

const progress = [];
const started = Date.now();
const [write, echo] = await Promise.all([
  client.callTool(
    { name: "write", arguments: { text: "x" }, _meta: place(turn, 0, 2) },
    {
      onprogress: (p) => progress.push(p.message ?? ""),
      resetTimeoutOnProgress: true,
      ...(scaled > 0 ? { timeout: scaled } : {}),
    },
  ),
  // No progress asked: the SDK's own timeout is the caller's to set, as
  // long as the wait it accepts.
  client.callTool({ name: "echo", arguments: { text: "after" }, _meta: place(turn, 1, 2) }, { timeout: 30 * 60 * 1000 }),
]);
report("turn", { results: [summary(write), summary(echo)], progress, seconds: (Date.now() - started) / 1000 });
await client.close();
