// What every client script shares: its inputs, its report, and the scenario
// run by the clients that call tools directly (the TypeScript clients).
//
// Inputs (environment): MCP_URL (the session's endpoint), MCP_TOKEN (a
// bearer token for the gateway's audience), TOOLGATE_TURN (the first model
// turn the script may use). The script reports one JSON object per line on
// stdout, {"step": ..., ...}; the Go test that runs it asserts on them and on
// the ToolCalls in the cluster.

export const url = need("MCP_URL");
export const token = need("MCP_TOKEN");
export const turn = Number(need("TOOLGATE_TURN"));
export const headers = { Authorization: `Bearer ${token}` };

function need(name) {
  const v = process.env[name];
  if (!v) {
    console.error(`${name} is not set`);
    process.exit(2);
  }
  return v;
}

export function report(step, data = {}) {
  process.stdout.write(JSON.stringify({ step, ...data }) + "\n");
}

// place is toolgate's _meta for the call at index of a model turn of size.
export function place(t, index, size) {
  return { "toolgate.dev/turn": t, "toolgate.dev/index": index, "toolgate.dev/turnSize": size };
}

// summary is what the test checks of an MCP tool result.
export function summary(res) {
  return {
    isError: res.isError === true,
    text: (res.content ?? []).filter((c) => c.type === "text").map((c) => c.text).join("\n"),
    meta: res._meta ?? {},
    structured: res.structuredContent ?? null,
  };
}

// failure is what the test checks of a thrown error.
export function failure(err) {
  return { name: err?.name ?? "", message: String(err?.message ?? err), code: err?.code ?? null };
}

// scenario runs the common turn through call(name, args, meta, options),
// options being {signal, onprogress}: list the tools; one model turn of a
// parallel pair of reads and a write a person approves; a call the policy
// denies; a call the client cancels once it runs.
export async function scenario(list, call) {
  const tools = await list();
  report("list", { tools: tools.map((t) => t.name).sort() });

  const progress = [];
  const [a, b, w] = await Promise.all([
    call("echo", { text: "a" }, place(turn, 0, 3), {}),
    call("echo", { text: "b" }, place(turn, 1, 3), {}),
    call("write", { text: "x" }, place(turn, 2, 3), { onprogress: (p) => progress.push(p.message ?? "") }),
  ]);
  report("turn", { results: [summary(a), summary(b), summary(w)], progress });

  report("denied", summary(await call("danger", { text: "rm" }, place(turn + 1, 0, 1), {})));

  const abort = new AbortController();
  const slow = call("slow", { text: "z" }, place(turn + 2, 0, 1), { signal: abort.signal });
  await cancelSignal();
  abort.abort();
  try {
    report("cancelled", { resolved: summary(await slow) });
  } catch (err) {
    report("cancelled", { error: failure(err) });
  }
}

// cancelSignal resolves once the test writes "cancel" on stdin: it does so
// when the call to cancel runs in the cluster.
export function cancelSignal() {
  return new Promise((resolve) => {
    let seen = "";
    const onData = (chunk) => {
      seen += chunk;
      if (seen.includes("cancel")) {
        process.stdin.off("data", onData);
        process.stdin.destroy();
        resolve();
      }
    };
    process.stdin.setEncoding("utf8");
    process.stdin.on("data", onData);
  });
}
