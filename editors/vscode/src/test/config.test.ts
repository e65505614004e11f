import assert from 'node:assert/strict';
import { describe, it } from 'node:test';
import { buildLaunch, DEFAULT_SERVER_PATH, expandHome, sameLaunch, SETTING_KEYS } from '../config';

// The defaults package.json declares, as VS Code hands them over when nothing is set.
const DEFAULTS = {
  serverPath: 'ctxpress',
  natsUrl: '',
  credentials: '',
  repository: '',
  debounceMs: 0,
  maxTokens: 64,
  mode: 'optimized',
};

describe('buildLaunch', () => {
  it('runs `<serverPath> lsp` and leaves empty settings out', () => {
    const launch = buildLaunch(DEFAULTS, '/home/me');
    assert.equal(launch.command, 'ctxpress');
    assert.deepEqual(launch.args, ['lsp']);
    assert.deepEqual(launch.initializationOptions, { debounceMs: 0, maxTokens: 64, mode: 'optimized' });
    assert.deepEqual(launch.warnings, []);
  });

  it('maps every setting to its initializationOptions key', () => {
    const launch = buildLaunch(
      {
        serverPath: '/opt/ctxpress/.venv/bin/ctxpress',
        natsUrl: 'nats://ctxpress.internal:4222',
        credentials: '/etc/ctxpress/ide.creds',
        repository: 'payments',
        debounceMs: 75,
        maxTokens: 128,
        mode: 'baseline',
      },
      '/home/me',
    );
    assert.equal(launch.command, '/opt/ctxpress/.venv/bin/ctxpress');
    assert.deepEqual(launch.initializationOptions, {
      natsUrl: 'nats://ctxpress.internal:4222',
      credentials: '/etc/ctxpress/ide.creds',
      repository: 'payments',
      debounceMs: 75,
      maxTokens: 128,
      mode: 'baseline',
    });
    assert.deepEqual(launch.warnings, []);
  });

  it('leaves out unset, null and blank values without a warning', () => {
    const launch = buildLaunch({ serverPath: '  ', natsUrl: '   ', credentials: null, repository: undefined });
    assert.equal(launch.command, DEFAULT_SERVER_PATH);
    assert.deepEqual(launch.initializationOptions, {});
    assert.deepEqual(launch.warnings, []);
    assert.deepEqual(buildLaunch({}).initializationOptions, {});
  });

  it('trims strings', () => {
    const launch = buildLaunch({ serverPath: ' ctxpress ', natsUrl: ' nats://a:4222\n', repository: ' r ' });
    assert.equal(launch.command, 'ctxpress');
    assert.deepEqual(launch.initializationOptions, { natsUrl: 'nats://a:4222', repository: 'r' });
  });

  it('expands ~ in serverPath and credentials, not in other settings', () => {
    const launch = buildLaunch(
      { serverPath: '~/src/ctxpress/.venv/bin/ctxpress', credentials: '~/.nats/ide.creds', repository: '~x' },
      '/home/me',
    );
    assert.equal(launch.command, '/home/me/src/ctxpress/.venv/bin/ctxpress');
    assert.equal(launch.initializationOptions.credentials, '/home/me/.nats/ide.creds');
    assert.equal(launch.initializationOptions.repository, '~x');
  });

  it('keeps debounceMs 0 (adaptive) and rounds fractions', () => {
    assert.equal(buildLaunch({ debounceMs: 0 }).initializationOptions.debounceMs, 0);
    assert.equal(buildLaunch({ debounceMs: 12.6 }).initializationOptions.debounceMs, 13);
  });

  it('ignores values of the wrong type or range, with one warning each', () => {
    const launch = buildLaunch({
      serverPath: 42,
      natsUrl: ['nats://a'],
      credentials: {},
      repository: true,
      debounceMs: -5,
      maxTokens: 0,
      mode: 'fast',
    });
    assert.equal(launch.command, DEFAULT_SERVER_PATH);
    assert.deepEqual(launch.initializationOptions, {});
    assert.equal(launch.warnings.length, 7);
    for (const key of SETTING_KEYS) {
      assert.ok(
        launch.warnings.some((w) => w.startsWith(`ctxpress.${key}:`)),
        `a warning for ${key}: ${launch.warnings.join(' | ')}`,
      );
    }
  });

  it('rejects non-finite and non-integer numbers', () => {
    for (const debounceMs of [Number.NaN, Number.POSITIVE_INFINITY, '50']) {
      const launch = buildLaunch({ debounceMs });
      assert.equal(launch.initializationOptions.debounceMs, undefined, String(debounceMs));
      assert.equal(launch.warnings.length, 1);
    }
    for (const maxTokens of [1.5, -1, Number.NaN, '64']) {
      const launch = buildLaunch({ maxTokens });
      assert.equal(launch.initializationOptions.maxTokens, undefined, String(maxTokens));
      assert.equal(launch.warnings.length, 1);
    }
  });

  it('produces JSON-serializable options with only the server keys', () => {
    const options = buildLaunch({ ...DEFAULTS, natsUrl: 'nats://x:4222' }).initializationOptions;
    assert.deepEqual(JSON.parse(JSON.stringify(options)), options);
    for (const key of Object.keys(options)) {
      assert.ok(['natsUrl', 'credentials', 'repository', 'debounceMs', 'maxTokens', 'mode'].includes(key), key);
    }
  });
});

describe('expandHome', () => {
  it('expands only a leading ~ or ~/', () => {
    assert.equal(expandHome('~', '/home/me'), '/home/me');
    assert.equal(expandHome('~/a', '/home/me/'), '/home/me/a');
    assert.equal(expandHome('~\\a', 'C:\\Users\\me'), 'C:\\Users\\me\\a');
    assert.equal(expandHome('~other/a', '/home/me'), '~other/a');
    assert.equal(expandHome('/a/~/b', '/home/me'), '/a/~/b');
    assert.equal(expandHome('~/a', undefined), '~/a');
  });
});

describe('sameLaunch', () => {
  it('ignores the order of keys and the warnings', () => {
    const a = buildLaunch({ natsUrl: 'nats://a:4222', mode: 'baseline' });
    const b = buildLaunch({ mode: 'baseline', natsUrl: 'nats://a:4222', maxTokens: 'x' });
    assert.ok(sameLaunch(a, b));
  });

  it('tells a changed setting or server path', () => {
    const base = buildLaunch(DEFAULTS);
    assert.ok(sameLaunch(base, buildLaunch({ ...DEFAULTS })));
    assert.ok(!sameLaunch(base, buildLaunch({ ...DEFAULTS, maxTokens: 32 })));
    assert.ok(!sameLaunch(base, buildLaunch({ ...DEFAULTS, serverPath: '/usr/local/bin/ctxpress' })));
    assert.ok(!sameLaunch(base, buildLaunch({ ...DEFAULTS, repository: 'r' })));
  });
});
