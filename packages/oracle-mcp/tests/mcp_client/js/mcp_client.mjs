// An MCP client built with the official TypeScript SDK, over streamable HTTP.
// Usage: node mcp_client.mjs <url> <plan.json>
// The plan is {"headers": {...}, "calls": [{"name": ..., "arguments": {...}}, ...]}.
// Prints one JSON object: the negotiated revision, the listed tools and each call's
// result (or the error it raised, as {"error": {"code", "message", "data"}}).
import { readFileSync } from "node:fs";
import { Client } from "@modelcontextprotocol/sdk/client/index.js";
import { StreamableHTTPClientTransport } from "@modelcontextprotocol/sdk/client/streamableHttp.js";

const [url, planPath] = process.argv.slice(2);
const plan = JSON.parse(readFileSync(planPath, "utf8"));
const transport = new StreamableHTTPClientTransport(new URL(url), {
  requestInit: { headers: plan.headers ?? {} },
});
const client = new Client({ name: "js-mcp-client", version: "1.0.0" });

try {
  await client.connect(transport);
  const listed = await client.listTools();
  const calls = [];
  for (const call of plan.calls ?? []) {
    try {
      calls.push(await client.callTool({ name: call.name, arguments: call.arguments ?? {} }));
    } catch (error) {
      calls.push({ error: { code: error.code, message: error.message, data: error.data } });
    }
  }
  process.stdout.write(
    JSON.stringify({ protocolVersion: transport.protocolVersion, tools: listed.tools, calls }),
  );
  await client.close();
} catch (error) {
  process.stdout.write(JSON.stringify({ failed: String(error?.message ?? error) }));
  process.exitCode = 1;
}
