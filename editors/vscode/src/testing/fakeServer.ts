// A stand-in for `ctxpress lsp` in the extension tests: speaks LSP over stdio, appends every
// message it gets to $FAKE_SERVER_LOG (one JSON object a line) and, once initialized, sends the
// `ctxpress/status` notifications listed (a JSON array) in $FAKE_SERVER_STATUS.

import * as fs from 'node:fs';

const logPath = process.env.FAKE_SERVER_LOG ?? '/dev/null';
const statuses: unknown[] = JSON.parse(process.env.FAKE_SERVER_STATUS ?? '[]');

interface Message {
  id?: number | string;
  method?: string;
  params?: { initializationOptions?: unknown; capabilities?: { textDocument?: { inlineCompletion?: unknown } } };
}

function send(message: object): void {
  const body = Buffer.from(JSON.stringify({ jsonrpc: '2.0', ...message }), 'utf8');
  process.stdout.write(`Content-Length: ${body.length}\r\n\r\n`);
  process.stdout.write(body);
}

function handle(message: Message): void {
  fs.appendFileSync(
    logPath,
    JSON.stringify({
      method: message.method,
      argv: process.argv.slice(2),
      initializationOptions: message.params?.initializationOptions,
      inlineCompletionCapability: message.params?.capabilities?.textDocument?.inlineCompletion,
    }) + '\n',
  );
  switch (message.method) {
    case 'initialize':
      send({
        id: message.id,
        result: {
          capabilities: {
            textDocumentSync: 1,
            inlineCompletionProvider: true,
            executeCommandProvider: { commands: ['ctxpress.accept'] },
          },
        },
      });
      break;
    case 'initialized':
      for (const params of statuses) {
        send({ method: 'ctxpress/status', params });
      }
      break;
    case 'shutdown':
      send({ id: message.id, result: null });
      break;
    case 'exit':
      process.exit(0);
  }
}

let pending = Buffer.alloc(0);
process.stdin.on('data', (chunk: Buffer) => {
  pending = Buffer.concat([pending, chunk]);
  for (;;) {
    const end = pending.indexOf('\r\n\r\n');
    if (end < 0) {
      return;
    }
    const length = Number(/Content-Length: *(\d+)/i.exec(pending.subarray(0, end).toString('ascii'))?.[1]);
    if (pending.length < end + 4 + length) {
      return;
    }
    const body = pending.subarray(end + 4, end + 4 + length).toString('utf8');
    pending = pending.subarray(end + 4 + length);
    handle(JSON.parse(body) as Message);
  }
});
