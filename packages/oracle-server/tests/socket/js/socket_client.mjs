// A socket.io client configured the way the client SDK configures its socket
// (@ixo/oracles-client-sdk 1.4.0, src/hooks/use-websocket-events/):
//
//   io(url, { query: { sessionId, userDid }, auth: { ucanDelegation, invocation },
//             transports: ["websocket"] })
//
// and answering `browser_tool_call` / `action_call` the way its handlers do.
//
// Usage: node socket_client.mjs, the config JSON as the first line of stdin (tokens stay
// out of the process list):
//   config: {
//     url, query: {sessionId, userDid?}, auth: {invocation?, ucanDelegation?},
//     browserTools: {<toolName>: {result?, error?, delayMs?, silent?}},
//     actions:      {<toolName>: {result?, error?, delayMs?, silent?}}
//   }
//   A tool missing from `browserTools` is answered with an error, as the SDK does; an
//   action missing from `actions` gets `{success: false, error}`; `silent` never answers.
//
// Output: one JSON object per line on stdout, `{"event": <name>, ...}`, for `connect`,
// `connect_error`, `disconnect`, `connected`, `browser_tool_call`, `action_call`,
// `answered` (what was sent back) and `any` (every other server event with its args).
// Input: after the config, JSON lines on stdin, `{"emit": <event>, "data": <value>}`; end
// of stdin disconnects and exits.

import { createInterface } from "node:readline";
import { io } from "socket.io-client";

const out = (record) => process.stdout.write(`${JSON.stringify(record)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const input = createInterface({ input: process.stdin });
const lines = input[Symbol.asyncIterator]();
const config = JSON.parse((await lines.next()).value);

const socket = io(config.url, {
  query: config.query,
  auth: config.auth,
  transports: ["websocket"],
});

socket.on("connect", () => out({ event: "connect", id: socket.id }));
socket.on("connect_error", (error) => out({ event: "connect_error", message: error.message }));
socket.on("disconnect", (reason) => out({ event: "disconnect", reason }));
socket.on("connected", (data) => out({ event: "connected", data }));

async function answer(spec, reply) {
  if (spec?.silent) return;
  if (spec?.delayMs) await sleep(spec.delayMs);
  reply();
}

socket.on("browser_tool_call", async (data) => {
  out({ event: "browser_tool_call", data });
  const spec = config.browserTools?.[data.toolName];
  await answer(spec, () => {
    const result = { toolCallId: data.toolCallId, sessionId: data.sessionId };
    if (spec === undefined) result.error = `Unknown browser tool: ${data.toolName}`;
    else if (spec.error !== undefined) result.error = spec.error;
    else result.result = spec.result;
    socket.emit("tool_result", result);
    out({ event: "answered", name: "tool_result", data: result });
  });
});

socket.on("action_call", async (data) => {
  out({ event: "action_call", data });
  const spec = config.actions?.[data.toolName];
  await answer(spec, () => {
    let result;
    if (spec === undefined) {
      const error = `Unknown action: ${data.toolName}`;
      result = { toolCallId: data.toolCallId, sessionId: data.sessionId, result: { success: false, error }, error };
    } else {
      result = { toolCallId: data.toolCallId, sessionId: data.sessionId, result: spec.result };
      if (spec.error !== undefined) result.error = spec.error;
    }
    socket.emit("action_call_result", result);
    out({ event: "answered", name: "action_call_result", data: result });
  });
});

socket.onAny((name, ...args) => {
  if (!["connected", "browser_tool_call", "action_call"].includes(name)) {
    out({ event: "any", name, args });
  }
});

for await (const line of lines) {
  if (!line.trim()) continue;
  const command = JSON.parse(line);
  socket.emit(command.emit, command.data);
}
socket.disconnect();
// Let the close frame go out before the process ends.
setTimeout(() => process.exit(0), 50);
