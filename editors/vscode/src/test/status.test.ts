import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { parseStatus, startingView, statusView, stoppedView, type StatusParams } from '../status';

const READY: StatusParams = { state: 'ready', message: '', lastLatencyMs: 312, requests: 10, cacheHits: 4 };

function parsed(params: unknown): StatusParams {
  const result = parseStatus(params);
  assert.ok(result.ok, result.ok ? '' : result.error);
  return result.status;
}

function rejected(params: unknown): string {
  const result = parseStatus(params);
  assert.ok(!result.ok, `accepted ${JSON.stringify(params)}`);
  return result.error;
}

describe('parseStatus', () => {
  it('accepts every state of the contract', () => {
    assert.deepEqual(parsed(READY), READY);
    const unreachable = { state: 'unreachable', message: 'nats://x:4222: connection refused', lastLatencyMs: null, requests: 0, cacheHits: 0 };
    assert.deepEqual(parsed(unreachable), unreachable);
    assert.equal(parsed({ ...READY, state: 'error', message: 'boom' }).state, 'error');
  });

  it('keeps only the contract fields', () => {
    assert.deepEqual(parsed({ ...READY, extra: 1 }), READY);
  });

  it('rejects what is not an object', () => {
    for (const params of [null, undefined, 'ready', 3, [READY]]) {
      assert.match(rejected(params), /not an object/);
    }
  });

  it('rejects an unknown or missing state', () => {
    assert.match(rejected({ ...READY, state: 'starting' }), /state "starting"/);
    assert.match(rejected({ ...READY, state: undefined }), /state/);
  });

  it('rejects a missing or non-string message', () => {
    assert.match(rejected({ ...READY, message: undefined }), /message/);
    assert.match(rejected({ ...READY, message: 5 }), /message/);
  });

  it('rejects a latency that is neither null nor a number >= 0', () => {
    for (const lastLatencyMs of [undefined, -1, Number.NaN, '312']) {
      assert.match(rejected({ ...READY, lastLatencyMs }), /lastLatencyMs/);
    }
    assert.equal(parsed({ ...READY, lastLatencyMs: 0 }).lastLatencyMs, 0);
    assert.equal(parsed({ ...READY, lastLatencyMs: 12.5 }).lastLatencyMs, 12.5);
  });

  it('rejects counts that are not whole numbers >= 0', () => {
    for (const value of [undefined, null, -1, 1.5, '4']) {
      assert.match(rejected({ ...READY, requests: value }), /requests/);
      assert.match(rejected({ ...READY, cacheHits: value }), /cacheHits/);
    }
  });
});

describe('statusView', () => {
  it('ready: latency and cached count', () => {
    const view = statusView(READY);
    assert.equal(view.text, '$(sparkle) ctxpress 312 ms · 4 cached');
    assert.equal(view.severity, 'normal');
    assert.match(view.tooltip, /ready/);
    assert.match(view.tooltip, /Last completion: 312 ms/);
    assert.match(view.tooltip, /10 completions, 4 served from cache/);
    assert.match(view.tooltip, /show the ctxpress log/);
  });

  it('ready: rounds the latency', () => {
    assert.equal(statusView({ ...READY, lastLatencyMs: 311.6 }).text, '$(sparkle) ctxpress 312 ms · 4 cached');
  });

  it('ready: no latency before the first completion, no cache part without hits', () => {
    const view = statusView({ ...READY, lastLatencyMs: null, requests: 0, cacheHits: 0 });
    assert.equal(view.text, '$(sparkle) ctxpress');
    assert.match(view.tooltip, /No completions yet/);
    assert.doesNotMatch(view.tooltip, /Last completion/);
    assert.equal(statusView({ ...READY, cacheHits: 0 }).text, '$(sparkle) ctxpress 312 ms');
    assert.match(statusView({ ...READY, requests: 1, cacheHits: 0 }).tooltip, /1 completion, 0 served/);
  });

  it('ready: the server message goes into the tooltip, never the text', () => {
    const view = statusView({ ...READY, message: 'model qwen2.5-coder-1.5b $(bug)' });
    assert.equal(view.text, '$(sparkle) ctxpress 312 ms · 4 cached');
    assert.match(view.tooltip, /model qwen2\.5-coder-1\.5b/);
  });

  it('unreachable: a warning whose tooltip is the message', () => {
    const view = statusView({ state: 'unreachable', message: 'nats://x:4222: connection refused', lastLatencyMs: 312, requests: 3, cacheHits: 1 });
    assert.equal(view.text, '$(warning) ctxpress unreachable');
    assert.equal(view.severity, 'warning');
    assert.equal(view.tooltip.split('\n')[0], 'nats://x:4222: connection refused');
  });

  it('unreachable or error without a message still explain themselves', () => {
    assert.match(statusView({ ...READY, state: 'unreachable', message: '' }).tooltip, /cannot be reached/);
    const error = statusView({ ...READY, state: 'error', message: '' });
    assert.equal(error.text, '$(error) ctxpress error');
    assert.equal(error.severity, 'error');
    assert.match(error.tooltip, /reported an error/);
  });

  it('error: the tooltip is the message', () => {
    assert.equal(statusView({ ...READY, state: 'error', message: 'engine failed' }).tooltip.split('\n')[0], 'engine failed');
  });
});

describe('client-side views', () => {
  it('starting and stopped', () => {
    assert.match(startingView().text, /ctxpress/);
    const stopped = stoppedView('spawn ctxpress ENOENT');
    assert.equal(stopped.text, '$(error) ctxpress stopped');
    assert.equal(stopped.severity, 'error');
    assert.match(stopped.tooltip, /spawn ctxpress ENOENT/);
    assert.match(stopped.tooltip, /Restart Server/);
    assert.doesNotMatch(stoppedView().tooltip, /undefined|serverPath/);
  });

  it('stopped: a server that is not found gets a hint about ctxpress.serverPath', () => {
    const reason = 'Launching server using command ctxpress failed. Error: spawn ctxpress ENOENT';
    assert.match(stoppedView(reason).tooltip, /Set ctxpress\.serverPath/);
    assert.doesNotMatch(stoppedView('Connection to server got closed.').tooltip, /serverPath/);
  });
});
