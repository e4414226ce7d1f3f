// The official TypeScript SDK 2.x client (@modelcontextprotocol/client, pinned in package.json) walking the registry's seed
// catalog, for tests/interop/test_modern_era_ts.py.
//
//   node ts_client_walk.mjs <mode> http <url>
//   node ts_client_walk.mjs <mode> stdio <command> [args...]
//
// <mode>: "2026-07-28" (pinned), "auto" or "legacy". Prints one JSON object per line on stdout:
// {"step": "walk", ...} with what the walk saw, then {"step": "ready"}; it then waits for a
// prompts list change (auto-opened subscriptions/listen on a modern connection) and prints
// {"step": "changed", "prompts": [...]} before closing. Any failure: {"step": "error", ...}, exit 1.
import { Client, StreamableHTTPClientTransport } from '@modelcontextprotocol/client';
import { StdioClientTransport } from '@modelcontextprotocol/client/stdio';

const [mode, transportKind, target, ...rest] = process.argv.slice(2);
const out = (obj) => process.stdout.write(JSON.stringify(obj) + '\n');

let resolveChanged;
const changed = new Promise((resolve) => (resolveChanged = resolve));

const versionNegotiation = mode === 'legacy' ? { mode: 'legacy' } : mode === 'auto' ? { mode: 'auto' } : { mode: { pin: mode } };
const client = new Client(
    { name: 'registry-ts-walk', version: '1.0.0' },
    {
        versionNegotiation,
        listChanged: {
            prompts: {
                onChanged: (error, prompts) => {
                    if (!error) resolveChanged(prompts.map((p) => p.name).sort());
                }
            }
        }
    }
);

const transport =
    transportKind === 'http'
        ? new StreamableHTTPClientTransport(new URL(target))
        : new StdioClientTransport({ command: target, args: rest, env: process.env, stderr: 'ignore' });

const text = (result) => result.content.map((c) => c.text).join('');

try {
    await client.connect(transport);
    const tools = (await client.listTools()).tools.map((t) => t.name).sort();
    const echo = text(await client.callTool({ name: 'echo', arguments: { message: 'Hello from MCP client!' } }));
    const add = text(await client.callTool({ name: 'add', arguments: { a: 42, b: 58 } }));
    const resources = (await client.listResources()).resources.map((r) => r.uri).sort();
    const read = (await client.readResource({ uri: 'info://server-info' })).contents[0];
    const templates = (await client.listResourceTemplates()).resourceTemplates.map((t) => t.uriTemplate);
    const prompts = (await client.listPrompts()).prompts.map((p) => p.name).sort();
    const rendered = await client.getPrompt({ name: 'summarize', arguments: { text: 'Short text.', max_words: '20' } });
    out({
        step: 'walk',
        protocolVersion: client.getNegotiatedProtocolVersion(),
        serverName: client.getServerVersion()?.name,
        tools,
        echo,
        add,
        resources,
        readUri: read.uri,
        readMimeType: read.mimeType,
        templates,
        prompts,
        rendered: rendered.messages[0].content.text
    });
    out({ step: 'ready' });
    const timer = setTimeout(() => resolveChanged(null), 20000);
    const names = await changed;
    clearTimeout(timer);
    out({ step: 'changed', prompts: names });
    await client.close();
    process.exit(0);
} catch (error) {
    out({ step: 'error', message: String(error?.stack ?? error) });
    process.exit(1);
}
