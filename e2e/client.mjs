// End-to-end test of `memsnap serve` with the official MCP TypeScript SDK client.
// Usage: node e2e/client.mjs MEMSNAP_BINARY FIXTURES_DIR
// Lists tools, calls each on fixtures and checks structuredContent against outputSchema (the
// SDK validates too), checks isError answers, a FIFO, an over-long message and a cancelled
// call (the server still answers), runs 20 concurrent calls on different files within a 1 MiB
// cache budget, and drives the streamable HTTP transport (token from MEMSNAP_TOKEN, lower-case
// "bearer", 413 and Origin 403). Exits non-zero on any failure.
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StdioClientTransport } from "@modelcontextprotocol/sdk/client/stdio.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";
import { AjvJsonSchemaValidator } from "@modelcontextprotocol/sdk/validation/ajv";
import { execFileSync, spawn } from "node:child_process";
import fs from "node:fs";
import os from "node:os";
import path from "node:path";

const [bin, fixturesArg] = process.argv.slice(2);
if (!bin || !fixturesArg) {
  console.error("usage: node client.mjs MEMSNAP_BINARY FIXTURES_DIR");
  process.exit(2);
}
const fixtures = path.resolve(fixturesArg);
const scratch = fs.mkdtempSync(path.join(os.tmpdir(), "memsnap-e2e-"));
const fx = (name) => path.join(fixtures, name);

let failures = 0;
let checks = 0;
function check(cond, what) {
  checks++;
  if (!cond) {
    failures++;
    console.error("FAIL: " + what);
  }
}
const text = (res) => (res.content || []).filter((c) => c.type === "text").map((c) => c.text).join("");

async function connect(extra = []) {
  const transport = new StdioClientTransport({
    command: path.resolve(bin),
    args: ["serve", "--root", fixtures, "--root", scratch, ...extra],
    stderr: "inherit",
  });
  const client = new Client({ name: "memsnap-e2e", version: "1.0.0" });
  await client.connect(transport);
  return client;
}

const ajv = new AjvJsonSchemaValidator();

// cli runs the memsnap binary and parses its JSON output.
const cli = (...args) => JSON.parse(execFileSync(path.resolve(bin), args, { encoding: "utf8" }));
// same compares two JSON values deeply, ignoring key order.
const canon = (v) => Array.isArray(v) ? v.map(canon) : v && typeof v === "object" ?
  Object.fromEntries(Object.keys(v).sort().map((k) => [k, canon(v[k])])) : v;
const same = (a, b) => JSON.stringify(canon(a)) === JSON.stringify(canon(b));

async function main() {
  const client = await connect();
  check(/summarize/.test(client.getInstructions() || ""), "server instructions mention summarize");

  // 1. tools/list: names, schemas, annotations.
  const { tools } = await client.listTools();
  const byName = Object.fromEntries(tools.map((t) => [t.name, t]));
  // The tools the binary's own catalog names (serve --help's "Tools:" line), no more, no fewer.
  const toolsLine = execFileSync(bin, ["serve", "--help"], { encoding: "utf8" }).match(/^Tools: (.*)\.$/m);
  const want = toolsLine ? toolsLine[1].split(", ").sort() : [];
  check(want.length >= 10 && want.join(",") === Object.keys(byName).sort().join(","),
    "tool names: " + Object.keys(byName).sort() + "; serve --help: " + want);
  for (const n of want) {
    check((client.getInstructions() || "").includes("`" + n + "`"), `server instructions name ${n}`);
  }
  for (const t of tools) {
    check(t.inputSchema?.type === "object" && t.outputSchema?.type === "object", `${t.name}: object schemas`);
    check(t.annotations?.readOnlyHint === true && t.annotations?.destructiveHint === false, `${t.name}: read-only annotations`);
    check(t.title && t.title !== t.name && t.annotations?.title === t.title, `${t.name}: human title (${t.title})`);
  }

  // 2. Call each tool on fixtures; validate structuredContent against outputSchema.
  const calls = [
    ["summarize", { path: fx("activation_oom.pickle") }, (s) => s.totals.reserved_bytes === 924844032 && s.ooms === 1],
    ["summarize", { path: fx("multirank") }, (s) => s.ranks.length === 4],
    ["top-stacks", { path: fx("activation_oom.pickle"), limit: 2 }, (s) => s.sites.length === 2 && s.sites[0].site === "train.py:112" && s.groups === 6],
    ["diff", { before: fx("growing_container_step5.pickle"), after: fx("growing_container_step50.pickle") },
      (s) => s.delta_bytes === 180 * 1048576 && s.sites[0].site === "train.py:97"],
    ["oom-report", { path: fx("fragmentation_oom.pickle") }, (s) => s.ooms.length === 1 && s.ooms[0].verdict === "fragmentation"],
    ["fragmentation", { path: fx("fragmentation_oom.pickle") }, (s) => s.reserved_bytes === 1048576000 && s.groups[0].largest_free_block_bytes === 9961472],
    // replay: ground truth of testdata/scenarios/README.md (4 delayed frees of 2 MiB, 2 pending at
    // the end, train.py:64) plus the exact peak; the answer must equal `memsnap replay --json`.
    ["replay", { path: fx("cross_stream_pending.pickle") }, (s) => s.devices.length === 1 && s.devices[0].device === 0 &&
      s.devices[0].peak_allocated_bytes === 2621440 && s.devices[0].peak_allocated_event === 3 &&
      s.devices[0].delayed_frees.count === 4 && s.devices[0].delayed_frees.bytes === 8388608 &&
      s.devices[0].delayed_frees.pending_at_end === 2 && s.devices[0].delayed_frees.sites[0]?.site === "train.py:64" &&
      same(s, cli("replay", fx("cross_stream_pending.pickle"), "--json"))],
    ["replay", { path: fx("activation_oom.pickle"), device: 0, limit: 3 }, (s) => s.devices.length === 1 &&
      s.devices[0].peak_allocated_bytes === 939556864 && s.devices[0].peak_allocated_event === 72 && s.devices[0].oom_events === 1 &&
      s.devices[0].peak_sites.length === 3 && same(s, cli("replay", fx("activation_oom.pickle"), "--device", "0", "-n", "3", "--json"))],
    ["read-raw-section", { path: fx("activation_oom.pickle"), section: "segments", limit: 5 },
      (s) => s.kind === "segments" && s.total === 31 && s.returned === 5 && s.more === true && s.next_offset === 5],
    ["read-raw-section", { path: fx("activation_oom.pickle"), section: "device_traces[0][76]" },
      (s) => s.events.length === 1 && s.events[0].action === "oom" && s.stacks.length === 1],
    // check: the no-growth fixture peaks at 111,675,416 B (its replay), so 100 MiB fails.
    ["check", { path: fx("no_growth_step50.pickle"), max_peak: "100MiB" },
      (s) => s.pass === false && s.budgets.length === 1 && s.budgets[0].value_bytes === 111675416 && s.budgets[0].top_site === "train.py:91"],
    ["timeline", { path: fx("activation_oom.pickle") }, (s) => s.timeline.ooms.length === 1],
  ];
  for (const [name, args, ok] of calls) {
    let res;
    try {
      res = await client.callTool({ name, arguments: args }); // the SDK validates against outputSchema
    } catch (e) {
      check(false, `${name} ${JSON.stringify(args)}: ${e}`);
      continue;
    }
    check(!res.isError, `${name}: not an error (${text(res).slice(0, 200)})`);
    const v = ajv.getValidator(byName[name].outputSchema)(res.structuredContent);
    check(v.valid, `${name}: structuredContent matches outputSchema: ${v.errorMessage}`);
    check(ok(res.structuredContent), `${name} ${JSON.stringify(args)}: expected values; got ${JSON.stringify(res.structuredContent).slice(0, 300)}`);
    check(text(res).length > 0 && text(res).length <= 8192, `${name}: text of ${text(res).length} bytes`);
  }

  // The timeline tool also returns the picture: one PNG image item of at most ~200 KB.
  const tl = await client.callTool({ name: "timeline", arguments: { path: fx("activation_oom.pickle") } });
  const img = (tl.content || []).find((c) => c.type === "image");
  check(img && img.mimeType === "image/png" && Buffer.from(img.data, "base64").subarray(1, 4).toString() === "PNG" &&
    Buffer.from(img.data, "base64").length <= 200 * 1024, `timeline: a PNG image item (${img ? img.mimeType + " " + img.data.length : "none"})`);

  // 3. Errors are isError results with an actionable message, never protocol errors.
  fs.writeFileSync(path.join(scratch, "corrupt.pickle"), Buffer.from("\x80\x04\x95 not a snapshot"));
  const bad = [
    ["summarize", { path: fx("no_such_file.pickle") }, /no such file/],
    ["summarize", { path: "/etc/hostname" }, /outside the directories/],
    ["top-stacks", { path: path.join(scratch, "corrupt.pickle") }, /cannot read the snapshot/],
    ["top-stacks", { path: fx("activation_oom.pickle"), group_by: "bogus" }, /^invalid arguments for top-stacks: group_by must be one of site, stack, file, function(, [a-z_]+)*; got bogus\. top-stacks takes path \(required\), group_by, /],
    ["read-raw-section", { path: fx("activation_oom.pickle"), section: "segments[999]" }, /31 segments/],
    ["replay", { path: fx("activation_oom.pickle"), device: 5 }, /no device 5 \(the file has devices \[0\]\)/],
    ["replay", { path: fx("no_such_file.pickle") }, /no such file/],
  ];
  for (const [name, args, re] of bad) {
    try {
      const res = await client.callTool({ name, arguments: args });
      check(res.isError === true && re.test(text(res)), `${name} ${JSON.stringify(args)}: isError with ${re}; got ${text(res)}`);
    } catch (e) {
      check(false, `${name} ${JSON.stringify(args)}: protocol error ${e}`);
    }
  }

  // 4. A FIFO nobody writes is refused at once; an over-long message gets a JSON-RPC error; a
  // cancelled call is abandoned; after each the server answers.
  const fifo = path.join(scratch, "stuck.pickle");
  execFileSync("mkfifo", [fifo]);
  const fifoRes = await Promise.race([
    client.callTool({ name: "summarize", arguments: { path: fifo } }),
    new Promise((resolve) => setTimeout(() => resolve({ timedOut: true }), 10000)),
  ]);
  check(fifoRes.isError === true && /is not a regular file/.test(text(fifoRes)), `FIFO answered with isError: ${JSON.stringify(fifoRes).slice(0, 300)}`);
  let overlong = "";
  try {
    await client.callTool({ name: "summarize", arguments: { path: "x".repeat(2 << 20) } });
  } catch (e) {
    overlong = String(e);
  }
  check(/over memsnap's limit of 1048576 bytes/.test(overlong), `over-long message answered with a JSON-RPC error: ${overlong.slice(0, 300)}`);
  const ac = new AbortController();
  const pending = client.callTool({ name: "summarize", arguments: { path: fx("retained_graph_step50.pickle") } }, undefined, { signal: ac.signal });
  ac.abort("test cancel");
  let aborted = false;
  try {
    await pending;
  } catch (e) {
    aborted = true;
  }
  check(aborted, "the cancelled call was aborted");
  const after = await client.callTool({ name: "summarize", arguments: { path: fx("no_growth_step5.pickle") } });
  check(!after.isError && after.structuredContent.totals.segments > 0, "server answers after a FIFO, an over-long message and a cancelled call");

  // Resources and prompts.
  const guide = await client.readResource({ uri: "memsnap://guide" });
  check(/read-raw-section/.test(guide.contents[0].text), "guide resource");
  const sec = await client.readResource({
    uri: "memsnap://snapshot/segments%5B0%5D?path=" + encodeURIComponent(fx("activation_oom.pickle")),
  });
  check(JSON.parse(sec.contents[0].text).segment.total_size === 16777216, "section resource");
  const { prompts } = await client.listPrompts();
  check(prompts.map((p) => p.name).sort().join(",") === "diagnose-oom,explain-memory,find-leak", "prompts");
  const p = await client.getPrompt({ name: "diagnose-oom", arguments: { path: "x.pickle" } });
  check(/oom-report/.test(p.messages[0].content.text) && /x\.pickle/.test(p.messages[0].content.text), "diagnose-oom prompt");
  await client.close();

  // 5. 20 concurrent calls on different files: same answers as one-by-one calls on a fresh server.
  const files = [];
  const walk = (d) => {
    for (const e of fs.readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const f = path.join(d, e.name);
      if (e.isDirectory()) walk(f);
      else if (!f.endsWith(".md")) files.push(f);
    }
  };
  walk(fixtures);
  check(files.length >= 20, `at least 20 fixture files (${files.length})`);
  const twenty = files.slice(0, 20);
  const seq = await connect();
  const expected = {};
  for (const f of twenty) {
    const r = await seq.callTool({ name: "summarize", arguments: { path: f } });
    expected[f] = r.structuredContent;
  }
  await seq.close();
  const par = await connect(["--cache-mb", "1"]); // one load at a time: each is admitted alone
  await par.listTools();
  const results = await Promise.all(twenty.map((f) => par.callTool({ name: "summarize", arguments: { path: f } })));
  results.forEach((r, i) => {
    const f = twenty[i];
    check(!r.isError, `concurrent ${path.basename(f)}: ${text(r).slice(0, 200)}`);
    check(JSON.stringify(r.structuredContent) === JSON.stringify(expected[f]), `concurrent ${path.basename(f)}: same answer as alone`);
  });
  await par.close();

  // 6. Streamable HTTP: the token from MEMSNAP_TOKEN, accepted with a lower-case scheme.
  await httpChecks();
}

// startHTTP runs `memsnap serve --http 127.0.0.1:0` and resolves with its endpoint URL.
function startHTTP(env) {
  const proc = spawn(path.resolve(bin), ["serve", "--http", "127.0.0.1:0", "--root", fixtures], { env: { ...process.env, ...env } });
  return new Promise((resolve, reject) => {
    let err = "";
    const timer = setTimeout(() => reject(new Error("serve --http did not start: " + err)), 20000);
    proc.stderr.on("data", (d) => {
      err += d;
      const m = /at (http:\/\/\S+\/mcp)/.exec(err);
      if (m) {
        clearTimeout(timer);
        resolve({ proc, url: m[1], log: () => err });
      }
    });
    proc.on("exit", (code) => reject(new Error(`serve --http exited ${code}: ${err}`)));
  });
}

async function httpChecks() {
  const { proc, url, log } = await startHTTP({ MEMSNAP_TOKEN: "e2e-token" });
  try {
    const transport = new StreamableHTTPClientTransport(new URL(url), { requestInit: { headers: { Authorization: "bearer e2e-token" } } });
    const client = new Client({ name: "memsnap-e2e-http", version: "1.0.0" });
    await client.connect(transport);
    const res = await client.callTool({ name: "summarize", arguments: { path: fx("activation_oom.pickle") } });
    check(!res.isError && res.structuredContent.totals.reserved_bytes === 924844032, `HTTP summarize: ${text(res).slice(0, 200)}`);
    await client.close();
    const init = JSON.stringify({ jsonrpc: "2.0", id: 1, method: "initialize", params: { protocolVersion: "2025-06-18", capabilities: {}, clientInfo: { name: "t", version: "0" } } });
    const headers = { "Content-Type": "application/json", Accept: "application/json, text/event-stream", Authorization: "Bearer e2e-token" };
    const noToken = await fetch(url, { method: "POST", body: init, headers: { ...headers, Authorization: "" } });
    check(noToken.status === 401, `HTTP without the token: ${noToken.status}`);
    const big = await fetch(url, { method: "POST", body: "x".repeat(2 << 20), headers });
    check(big.status === 413, `HTTP over-long body: ${big.status}`);
    const evil = await fetch(url, { method: "POST", body: init, headers: { ...headers, Origin: "https://evil.example" } });
    check(evil.status === 403, `HTTP foreign Origin: ${evil.status}`);
    const local = await fetch(url, { method: "POST", body: init, headers: { ...headers, Origin: "http://localhost:6274" } });
    check(local.status === 200, `HTTP loopback Origin: ${local.status}`);
    check(!/level=INFO|Delivered sampling response/.test(log()), "HTTP log has no info lines: " + log());
  } finally {
    proc.kill();
  }
}

try {
  await main();
} catch (e) {
  failures++;
  console.error("FAIL: " + (e.stack || e));
} finally {
  fs.rmSync(scratch, { recursive: true, force: true });
}
console.log(`e2e: ${checks} checks, ${failures} failures`);
process.exit(failures ? 1 : 0);
