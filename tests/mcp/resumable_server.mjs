// An MCP server over streamable HTTP, written with the official TypeScript SDK, whose
// answer streams break: for tether's tests of resuming a broken stream.
//
//     node resumable_server.mjs LOG [--no-store]    prints `port N` once listening on 127.0.0.1
//
// With an event store (the SDK's InMemoryEventStore) every SSE event carries an id, a
// priming event with only an id opens each answer stream, and `retry: 10` asks a client to
// wait 10 ms before it reconnects; with --no-store no event has an id, so nothing can be
// resumed. Each tool {text} sends a progress notification, breaks its answer stream right
// after that event is written, and then returns `NAME: TEXT`:
//
//     cut    destroys the connection (the body cut short)
//     end    ends the response (the body complete, without the answer)
//     poll   the SDK's `closeSSEStream`: a server asking its client to poll (a store only)
//
// LOG gets one line per happening: `ran NAME` when a tool runs, `POST` and
// `GET last-event-id=ID` per request.

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
// For each `cut` or `end` call, by its JSON-RPC id: a promise settled once its answer
// stream was broken.
const breaks = new Map();

function newServer() {
    const server = new McpServer({ name: "resumable", version: "1.0" });
    for (const name of ["cut", "end", "poll"]) {
        server.registerTool(
            name,
            { description: "Answers after its answer stream broke.", inputSchema: { text: z.string() } },
            async ({ text }, extra) => {
                note(`ran ${name}`);
                await server.server.notification(
                    {
                        method: "notifications/progress",
                        params: { progressToken: extra._meta?.progressToken ?? 0, progress: 1, total: 2 },
                    },
                    { relatedRequestId: extra.requestId },
                );
                if (name === "poll") extra.closeSSEStream?.();
                await breaks.get(extra.requestId);
                return { content: [{ type: "text", text: `${name}: ${text}` }] };
            },
        );
    }
    return server;
}

// Break `res` (`cut` or `end`) right after the progress event was written to it.
function armBreak(id, res, how) {
    let broken;
    breaks.set(id, new Promise((resolve) => (broken = resolve)));
    res.on("error", () => {}); // what the SDK writes after the break goes nowhere
    const write = res.write;
    res.write = function (chunk, ...rest) {
        if (!Buffer.from(chunk).toString().includes("notifications/progress")) {
            return write.call(this, chunk, ...rest);
        }
        res.write = () => true;
        return write.call(this, chunk, () => {
            if (how === "cut") res.socket.destroy();
            else res.end();
            broken();
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
    const tool = message?.method === "tools/call" ? message.params?.name : undefined;
    if (tool === "cut" || tool === "end") armBreak(message.id, res, tool);
    await transport.handleRequest(req, res, message);
});

http.listen(0, "127.0.0.1", () => console.log(`port ${http.address().port}`));
