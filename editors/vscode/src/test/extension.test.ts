// The extension end to end, without VS Code: the real extension.ts and vscode-languageclient
// against a stub `vscode` module and a fake `ctxpress lsp` (src/testing/fakeServer.ts).

import assert from 'node:assert/strict';
import * as fs from 'node:fs';
import * as os from 'node:os';
import * as path from 'node:path';
import { after, before, describe, it } from 'node:test';
import { createVscodeStub, installVscodeStub } from '../testing/vscodeStub';

const READY = { state: 'ready', message: 'model: qwen2.5-coder', lastLatencyMs: 312, requests: 10, cacheHits: 4 };
const MALFORMED = { state: 'bogus' };

interface ServerEvent {
  method?: string;
  argv: string[];
  initializationOptions?: Record<string, unknown>;
  inlineCompletionCapability?: unknown;
}

async function until(what: string, condition: () => boolean, timeoutMs = 10_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  while (!condition()) {
    if (Date.now() > deadline) {
      throw new Error(`timed out waiting for: ${what}`);
    }
    await new Promise((resolve) => setTimeout(resolve, 20));
  }
}

describe('extension', { skip: process.platform === 'win32' ? 'the fake server is started by a shell script' : false }, () => {
  const dir = fs.mkdtempSync(path.join(os.tmpdir(), 'ctxpress-vscode-test-'));
  const serverLog = path.join(dir, 'server.jsonl');
  const fakeCtxpress = path.join(dir, 'ctxpress');
  const stub = createVscodeStub({
    serverPath: fakeCtxpress,
    natsUrl: 'nats://ctxpress.internal:4222',
    credentials: '',
    repository: '',
    debounceMs: 0,
    maxTokens: 64,
    mode: 'optimized',
  });
  let extension: typeof import('../extension');

  const events = (): ServerEvent[] =>
    fs.existsSync(serverLog)
      ? fs.readFileSync(serverLog, 'utf8').trim().split('\n').filter(Boolean).map((line) => JSON.parse(line) as ServerEvent)
      : [];
  const initializations = () => events().filter((e) => e.method === 'initialize');
  const serverMethods = () => events().map((e) => e.method);

  before(() => {
    const server = path.resolve(__dirname, '../testing/fakeServer.js');
    fs.writeFileSync(fakeCtxpress, `#!/bin/sh\nexec "${process.execPath}" "${server}" "$@"\n`, { mode: 0o755 });
    process.env.FAKE_SERVER_LOG = serverLog;
    process.env.FAKE_SERVER_STATUS = JSON.stringify([READY, MALFORMED]);
    installVscodeStub(stub);
    extension = require('../extension');
  });

  after(() => {
    fs.rmSync(dir, { recursive: true, force: true });
  });

  it('starts `<serverPath> lsp` with the settings as initializationOptions', async () => {
    extension.activate({ subscriptions: [] } as never);
    await until('the ready status', () => stub.item.text === '$(sparkle) ctxpress 312 ms · 4 cached');
    const [init] = initializations();
    assert.deepEqual(init.argv, ['lsp']);
    assert.deepEqual(init.initializationOptions, { natsUrl: 'nats://ctxpress.internal:4222', debounceMs: 0, maxTokens: 64, mode: 'optimized' });
    assert.ok(init.inlineCompletionCapability, 'the client announces textDocument/inlineCompletion');
  });

  it('registers inline completions, the server command and its own commands', () => {
    assert.equal(stub.inlineProviders, 1);
    for (const id of ['ctxpress.accept', 'ctxpress.restart', 'ctxpress.showLog']) {
      assert.ok(stub.commands.has(id), id);
    }
    assert.equal(stub.item.command, 'ctxpress.showLog');
    assert.match(stub.item.tooltip ?? '', /model: qwen2\.5-coder/);
  });

  it('logs and ignores a malformed status notification', async () => {
    await until('the warning', () => stub.log.some((line) => /^warn: ignoring a ctxpress\/status notification: state "bogus"/.test(line)));
    assert.equal(stub.item.text, '$(sparkle) ctxpress 312 ms · 4 cached');
  });

  it('restarts the server when a setting changes, with the new options', async () => {
    stub.changeSettings({ maxTokens: 32, mode: 'baseline', repository: 'payments' });
    await until('a second initialize', () => initializations().length === 2);
    assert.deepEqual(initializations()[1].initializationOptions, {
      natsUrl: 'nats://ctxpress.internal:4222',
      repository: 'payments',
      debounceMs: 0,
      maxTokens: 32,
      mode: 'baseline',
    });
    const methods = serverMethods();
    assert.ok(methods.indexOf('shutdown') < methods.lastIndexOf('initialize'), 'the old server is shut down first');
    await until('the ready status again', () => stub.item.text === '$(sparkle) ctxpress 312 ms · 4 cached');
    assert.equal(stub.inlineProviders, 1, 'the old provider is gone');
  });

  it('does not restart when the settings come out the same', async () => {
    stub.changeSettings({ maxTokens: 32 });
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.equal(initializations().length, 2);
  });

  it('shows a stopped server, with a hint, when serverPath is wrong', async () => {
    stub.changeSettings({ serverPath: path.join(dir, 'missing', 'ctxpress') });
    await until('the stopped status', () => stub.item.text === '$(error) ctxpress stopped');
    assert.match(stub.item.tooltip ?? '', /ENOENT/);
    assert.match(stub.item.tooltip ?? '', /Set ctxpress\.serverPath/);
    assert.equal(stub.item.backgroundColor?.id, 'statusBarItem.errorBackground');
    assert.equal(stub.inlineProviders, 0);
  });

  it('recovers when serverPath is fixed, and on ctxpress.restart', async () => {
    stub.changeSettings({ serverPath: fakeCtxpress });
    await until('a third initialize', () => initializations().length === 3);
    await until('the ready status', () => stub.item.text === '$(sparkle) ctxpress 312 ms · 4 cached');
    await stub.commands.get('ctxpress.restart')?.();
    assert.equal(initializations().length, 4);
    await until('the ready status', () => stub.item.text === '$(sparkle) ctxpress 312 ms · 4 cached');
    assert.equal(stub.inlineProviders, 1);
    assert.ok(stub.commands.has('ctxpress.accept'));
  });

  it('shuts the server down on deactivate', async () => {
    await extension.deactivate();
    await until('exit', () => serverMethods().at(-1) === 'exit');
    assert.equal(stub.inlineProviders, 0);
    assert.ok(!stub.commands.has('ctxpress.accept'));
  });
});
