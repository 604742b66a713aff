// An MCP server over streamable HTTP, written with the official TypeScript SDK, whose
// answer streams break: for tether's tests of resuming a broken stream.
//
//     node resumable_server.mjs LOG [--no-store]    prints `port N` once listening on 127.0.0.1
//
// With an event store (the SDK's InMemoryEventStore) every SSE event carries an id, a
// priming event with only an id opens each answer stream, and `retry: 10` asks a client to
// wait 10 ms before it reconnects; with --no-store no event has an id, so nothing can be
// resumed. The tool `cut` {text} sends a progress notification, and as soon as that event
// is written the server destroys the connection of that POST's answer; only then does the
// tool return `cut: TEXT`. The tool `poll` {text} sends a progress notification, then ends
// its answer stream cleanly (the SDK's `closeSSEStream`, with a store only: a server asking
// its client to poll) and returns `poll: TEXT`. LOG gets one line per happening: `ran cut`
// or `ran poll` when a tool runs, `POST` and `GET last-event-id=ID` per request.

import { appendFileSync } from "node:fs";
import { createServer } from "node:http";
import { randomUUID } from "node:crypto";
import { McpServer } from "@modelcontextprotocol/sdk/server/mcp.js";
import { StreamableHTTPServerTransport } from "@modelcontextprotocol/sdk/server/streamableHttp.js";
import { isInitializeRequest } from "@modelcontextprotocol/sdk/types.js";
import { InMemoryEventStore } from "@modelcontextprotocol/sdk/examples/shared/inMemoryEventStore.js";
import { z } from "zod";

const log = process.argv[2];
const withStore = !process.argv.includes("--no-store");
const note = (line) => appendFileSync(log, line + "\n");

const transports = new Map();
// The connection of each `cut` call's answer, by the call's JSON-RPC id, and a promise
// each settles once that connection was destroyed.
const cuts = new Map();

function newServer() {
    const server = new McpServer({ name: "resumable", version: "1.0" });
    server.registerTool(
        "cut",
        { description: "Answers after its answer stream was cut.", inputSchema: { text: z.string() } },
        async ({ text }, extra) => {
            note("ran cut");
            const cut = cuts.get(extra.requestId);
            await server.server.notification(
                {
                    method: "notifications/progress",
                    params: { progressToken: extra._meta?.progressToken ?? 0, progress: 1, total: 2 },
                },
                { relatedRequestId: extra.requestId },
            );
            if (cut !== undefined) await cut.done;
            return { content: [{ type: "text", text: `cut: ${text}` }] };
        },
    );
    server.registerTool(
        "poll",
        { description: "Answers after ending its answer stream.", inputSchema: { text: z.string() } },
        async ({ text }, extra) => {
            note("ran poll");
            await server.server.notification(
                {
                    method: "notifications/progress",
                    params: { progressToken: extra._meta?.progressToken ?? 0, progress: 1, total: 2 },
                },
                { relatedRequestId: extra.requestId },
            );
            extra.closeSSEStream?.();
            return { content: [{ type: "text", text: `poll: ${text}` }] };
        },
    );
    return server;
}

// Destroy `res`'s connection right after the progress event was written to it.
function armCut(id, res) {
    let finish;
    const done = new Promise((resolve) => (finish = resolve));
    cuts.set(id, { done });
    const write = res.write;
    res.write = function (chunk, ...rest) {
        if (!Buffer.from(chunk).toString().includes("notifications/progress")) return write.call(this, chunk, ...rest);
        return write.call(this, chunk, () => {
            res.socket.destroy();
            finish();
        });
    };
}

async function body(req) {
    const chunks = [];
    for await (const chunk of req) chunks.push(chunk);
    return chunks.length ? JSON.parse(Buffer.concat(chunks).toString()) : undefined;
}

function refuse(res, status, message) {
    res.writeHead(status, { "content-type": "application/json" });
    res.end(JSON.stringify({ jsonrpc: "2.0", error: { code: -32000, message }, id: null }));
}

const http = createServer(async (req, res) => {
    const sid = req.headers["mcp-session-id"];
    const message = req.method === "POST" ? await body(req) : undefined;
    note(req.method === "GET" ? `GET last-event-id=${req.headers["last-event-id"] ?? ""}` : req.method);
    let transport = sid ? transports.get(sid) : undefined;
    if (transport === undefined) {
        if (sid || req.method !== "POST" || !isInitializeRequest(message)) {
            return refuse(res, sid ? 404 : 400, sid ? "Session not found" : "No valid session ID provided");
        }
        transport = new StreamableHTTPServerTransport({
            sessionIdGenerator: () => randomUUID(),
            eventStore: withStore ? new InMemoryEventStore() : undefined,
            retryInterval: withStore ? 10 : undefined,
            onsessioninitialized: (id) => transports.set(id, transport),
        });
        await newServer().connect(transport);
    }
    if (message?.method === "tools/call" && message.params?.name === "cut") armCut(message.id, res);
    await transport.handleRequest(req, res, message);
});

http.listen(0, "127.0.0.1", () => console.log(`port ${http.address().port}`));
