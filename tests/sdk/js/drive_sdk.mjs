// Drives a Python oracle with the published client SDK, @ixo/oracles-client-sdk 1.4.0: its
// React hooks (OraclesProvider, useOracleSessions, useChat, useModels) rendered with
// react-test-renderer 18.3.1 on a concurrent root in Node, no DOM, as a QiForge front end
// uses them.
//
// Usage: node drive_sdk.mjs, with the config JSON as the first line of stdin (tokens stay
// out of the process list):
//   config: {
//     oracleDid, baseUrl, wsUrl, graphqlUrl,        // overrides.baseUrl / overrides.wsUrl
//     userDid, delegation, delegationExpiresAt,      // what createDelegation hands over (ms)
//     prompts: [string],                             // one turn each, in one session
//     historyPageSize,                               // for the reopened session
//     timeoutMs,                                     // for each wait
//     browserTools: [{toolName, description, result}] // optional: declared through
//                    useChat({browserTools}), each with a zod schema {url: string};
//                    the SDK runs `fn` when the oracle calls the tool
//   }
//
// Scenario: list the models; create a session; open it (history, run check, socket); send
// each prompt and wait for the history to replace the streamed turn; reopen the session in
// a fresh provider (a page reload) with a small history page size and load every older
// page; delete the session.
//
// Output: one JSON object per line on stdout, `{"step": <name>, ...}`:
//   console   {level, text}          a console.warn / console.error of the SDK
//   delegation {oracleDid}           createDelegation was called
//   models    {models, defaultModelId, error}
//   sessions  {when, sessions, total}
//   created   {session}              what createSession() resolved with
//   opened    {messages, connected}
//   turn      {index, prompt, states, streamed, run, history}
//             states: every change of (status, run) while the turn ran; streamed: the
//             messages when `run.ended` was first set, before the history replaced them
//   page      {messages, hasEarlier} the reopened session, then after each loadEarlier()
//   browser_tool {toolName, args}    the SDK ran a declared browser tool's `fn`
//   deleted   {response}             what deleteSession() resolved with
//   end       {}
//   failed    {error}                then exit status 1

import { createInterface } from "node:readline";

const out = (record) => process.stdout.write(`${JSON.stringify(record)}\n`);
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));
const lines = createInterface({ input: process.stdin })[Symbol.asyncIterator]();
const config = JSON.parse((await lines.next()).value);

// What the SDK needs from its environment, set before it is imported: the chain client
// reads the GraphQL URL at import time; `window.crypto.randomUUID()` names each message;
// the UCAN caches live in `localStorage`.
process.env.BLOCKSYNC_GRAPHQL_URL = config.graphqlUrl;
globalThis.window ??= globalThis;
globalThis.localStorage ??= memoryStorage();

function memoryStorage() {
  const items = new Map();
  return {
    getItem: (key) => (items.has(key) ? items.get(key) : null),
    setItem: (key, value) => void items.set(key, String(value)),
    removeItem: (key) => void items.delete(key),
    clear: () => items.clear(),
  };
}

function describe(value) {
  if (value instanceof Error) return `${value.name}: ${value.message}`;
  if (typeof value === "string") return value;
  try {
    return JSON.stringify(value);
  } catch {
    return String(value);
  }
}

for (const level of ["warn", "error"]) {
  const original = console[level].bind(console);
  console[level] = (...args) => {
    out({ step: "console", level, text: args.map(describe).join(" ") });
    original(...args);
  };
}

const { createElement, useEffect } = (await import("react")).default;
const TestRenderer = (await import("react-test-renderer")).default;
const { OraclesProvider, useChat, useModels, useOracleSessions } = await import(
  "@ixo/oracles-client-sdk"
);
const { z } = await import("zod");

// -- the host application ---------------------------------------------------------------

const oracleDid = config.oracleDid;
const overrides = { baseUrl: config.baseUrl, wsUrl: config.wsUrl };
// Only `did` matters for the oracle routes; an empty `address` keeps the chain Authz
// lookup off, and the Matrix fields serve only the Matrix hooks.
const wallet = {
  address: "",
  did: config.userDid,
  matrix: { accessToken: "", homeServer: "" },
};
const transactSignX = async () => {
  throw new Error("this test signs no chain transaction");
};
const createDelegation = async (audience) => {
  out({ step: "delegation", oracleDid: audience });
  return { serialized: config.delegation, expiresAt: config.delegationExpiresAt };
};
// With `uiComponents`, tool calls become messages of their own (and history tool calls
// become component content), as in a front end that renders them.
const uiComponents = { ToolCall: () => null };
const onPaymentRequiredError = (claims) => out({ step: "payment_required", claims });

// The browser tools the front end offers, as an application declares them to useChat.
const browserTools = Object.fromEntries(
  (config.browserTools ?? []).map(({ toolName, description, result }) => [
    toolName,
    {
      toolName,
      description,
      schema: z.object({ url: z.string().describe("The page to open") }),
      fn: async (args) => {
        out({ step: "browser_tool", toolName, args });
        return result;
      },
    },
  ]),
);

let latest = null;
let turn = null;

function Probe({ sessionId, historyPageSize }) {
  const sessions = useOracleSessions(oracleDid, overrides);
  const models = useModels(oracleDid, overrides);
  const chat = useChat({
    oracleDid,
    sessionId,
    overrides,
    uiComponents,
    historyPageSize,
    model: models.defaultModelId,
    onPaymentRequiredError,
    ...(config.browserTools ? { browserTools } : {}),
  });
  // What the hooks returned in the last committed render.
  useEffect(() => {
    latest = { sessions, models, chat };
    if (turn !== null) watchTurn(chat);
  });
  return null;
}

function watchTurn(chat) {
  const state = { status: chat.status, ...chat.run };
  const last = turn.states.at(-1);
  if (last === undefined || JSON.stringify(last) !== JSON.stringify(state)) {
    turn.states.push(state);
  }
  if (chat.run.ended && turn.streamed === null) {
    turn.streamed = chat.messages;
    turn.run = chat.run;
  }
}

const app = (props) =>
  createElement(
    OraclesProvider,
    { initialWallet: wallet, transactSignX, createDelegation },
    createElement(Probe, props),
  );

// A concurrent root, as `createRoot` gives a React 18 application.
const render = (element) => TestRenderer.create(element, { unstable_isConcurrent: true });

async function waitFor(what, predicate) {
  const deadline = Date.now() + config.timeoutMs;
  for (;;) {
    const value = latest === null ? undefined : predicate(latest);
    if (value) return value;
    if (Date.now() > deadline) throw new Error(`timed out waiting for ${what}`);
    await sleep(10);
  }
}

const sessionsRecord = (when) => ({
  step: "sessions",
  when,
  sessions: latest.sessions.sessions,
  total: latest.sessions.total,
});

// -- the scenario ------------------------------------------------------------------------

async function main() {
  let renderer = render(app({ sessionId: "" }));

  await waitFor("the models", (s) => !s.models.isLoading);
  out({
    step: "models",
    models: latest.models.models,
    defaultModelId: latest.models.defaultModelId ?? null,
    error: latest.models.error ? describe(latest.models.error) : null,
  });
  await waitFor("the session list", (s) => !s.sessions.isLoading);
  out(sessionsRecord("mounted"));

  const session = await latest.sessions.createSession();
  out({ step: "created", session });
  const sessionId = session.sessionId;
  const listed = (s) => s.sessions.sessions.some((item) => item.sessionId === sessionId);
  await waitFor("the new session in the list", listed);
  out(sessionsRecord("created"));

  renderer.update(app({ sessionId }));
  await waitFor(
    "the opened session",
    (s) => !s.chat.isLoading && s.chat.status === "ready" && s.chat.isRealTimeConnected,
  );
  out({ step: "opened", messages: latest.chat.messages, connected: true });

  for (const [index, prompt] of config.prompts.entries()) {
    const shown = new Set(latest.chat.messages.map((message) => message.id));
    turn = { states: [], streamed: null, run: null };
    await latest.chat.sendMessage(prompt);
    const current = turn;
    turn = null;
    if (current.streamed === null) throw new Error(`turn ${index} never ended`);
    const streamedIds = new Set(
      current.streamed.map((message) => message.id).filter((id) => !shown.has(id)),
    );
    await waitFor(
      "the history to replace the streamed turn",
      (s) =>
        s.chat.status === "ready" && !s.chat.messages.some((message) => streamedIds.has(message.id)),
    );
    out({
      step: "turn",
      index,
      prompt,
      states: current.states,
      streamed: current.streamed,
      run: current.run,
      history: latest.chat.messages,
    });
  }

  // A page reload: a fresh provider and query cache, the UCAN caches kept.
  renderer.unmount();
  latest = null;
  renderer = render(app({ sessionId, historyPageSize: config.historyPageSize }));
  await waitFor(
    "the newest history page",
    (s) => !s.chat.isLoading && s.chat.messages.length > 0,
  );
  out({ step: "page", messages: latest.chat.messages, hasEarlier: latest.chat.hasEarlier });
  while (latest.chat.hasEarlier) {
    const shown = latest.chat.messages.length;
    await latest.chat.loadEarlier();
    await waitFor(
      "an older history page",
      (s) => !s.chat.isLoadingEarlier && s.chat.messages.length > shown,
    );
    out({ step: "page", messages: latest.chat.messages, hasEarlier: latest.chat.hasEarlier });
  }

  const response = await latest.sessions.deleteSession(sessionId);
  out({ step: "deleted", response });
  await waitFor("the session gone from the list", (s) => !listed(s) && !s.sessions.isLoading);
  out(sessionsRecord("deleted"));

  renderer.unmount();
  out({ step: "end" });
}

try {
  await main();
  process.exit(0);
} catch (error) {
  out({ step: "failed", error: error instanceof Error ? error.stack : describe(error) });
  process.exit(1);
}
