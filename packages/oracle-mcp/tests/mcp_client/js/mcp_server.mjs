// An MCP server built with the official TypeScript SDK, stateless over streamable HTTP.
// This SDK negotiates the 2025-11-25 revision: the "older server" of the client tests.
// Prints "listening <port>" once it accepts connections; stops on SIGTERM.
import http from "node:http";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { z } from "zod";

function build() {
  const server = new McpServer({ name: "js-peer", version: "1.0.0" });
  server.registerTool(
    "whoami",
    {
      description: "The x-user header of the request.",
      inputSchema: {},
      annotations: { readOnlyHint: true },
    },
    async (_args, extra) => ({
      content: [{ type: "text", text: String(extra.requestInfo?.headers?.["x-user"] ?? "") }],
    }),
  );
  server.registerTool(
    "add",
    {
      description: "Add two numbers.",
      inputSchema: { a: z.number(), b: z.number() },
    },
    async ({ a, b }) => ({ content: [{ type: "text", text: String(a + b) }] }),
  );
  server.registerTool(
    "wipe",
    {
      description: "Erase everything.",
      inputSchema: { confirm: z.boolean() },
      annotations: { destructiveHint: true, readOnlyHint: false },
    },
    async () => ({ content: [{ type: "text", text: "wiped" }] }),
  );
  server.registerTool(
    "slow",
    {
      description: "Answer after a delay.",
      inputSchema: { seconds: z.number() },
      annotations: { readOnlyHint: true },
    },
    async ({ seconds }) => {
      await new Promise((resolve) => setTimeout(resolve, seconds * 1000));
      return { content: [{ type: "text", text: `slept ${seconds}` }] };
    },
  );
  return server;
}

const httpServer = http.createServer(async (req, res) => {
  if (req.url !== "/mcp") {
    res.writeHead(404).end();
    return;
  }
  const chunks = [];
  for await (const chunk of req) chunks.push(chunk);
  const raw = Buffer.concat(chunks).toString("utf8");
  const server = build();
  const transport = new StreamableHTTPServerTransport({
    sessionIdGenerator: undefined,
    enableJsonResponse: true,
  });
  res.on("close", () => {
    transport.close();
    server.close();
  });
  await server.connect(transport);
  await transport.handleRequest(req, res, raw ? JSON.parse(raw) : undefined);
});

httpServer.listen(0, "127.0.0.1", () => {
  process.stdout.write(`listening ${httpServer.address().port}\n`);
});
process.on("SIGTERM", () => httpServer.close(() => process.exit(0)));
