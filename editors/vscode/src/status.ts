// The server's `ctxpress/status` notification → the status-bar item's text and tooltip.
// Pure: no `vscode` import, so node's test runner can check it directly.

export const STATUS_NOTIFICATION = 'ctxpress/status';
export const STATES = ['ready', 'unreachable', 'error'] as const;
export type ServerState = (typeof STATES)[number];

/** The params of `ctxpress/status`, as the server sends them. */
export interface StatusParams {
  state: ServerState;
  message: string;
  /** Latency of the last completion, or null before the first one. */
  lastLatencyMs: number | null;
  /** Completions asked for since the server started. */
  requests: number;
  /** Of those, how many were served from the server's cache. */
  cacheHits: number;
}

export type ParseResult = { ok: true; status: StatusParams } | { ok: false; error: string };

/** What the status-bar item shows; `severity` picks its background colour. */
export interface StatusView {
  text: string;
  tooltip: string;
  severity: 'normal' | 'warning' | 'error';
}

const CLICK_HINT = 'Click to show the ctxpress log.';

function isCount(value: unknown): value is number {
  return typeof value === 'number' && Number.isInteger(value) && value >= 0;
}

/** Checks a `ctxpress/status` notification's params; a bad one is reported, never shown. */
export function parseStatus(params: unknown): ParseResult {
  if (typeof params !== 'object' || params === null || Array.isArray(params)) {
    return { ok: false, error: 'params is not an object' };
  }
  const p = params as Record<string, unknown>;
  if (typeof p.state !== 'string' || !(STATES as readonly string[]).includes(p.state)) {
    return { ok: false, error: `state ${JSON.stringify(p.state)} is not one of ${STATES.join(', ')}` };
  }
  if (typeof p.message !== 'string') {
    return { ok: false, error: 'message is not a string' };
  }
  const latency = p.lastLatencyMs;
  if (latency !== null && !(typeof latency === 'number' && Number.isFinite(latency) && latency >= 0)) {
    return { ok: false, error: 'lastLatencyMs is neither null nor a number >= 0' };
  }
  if (!isCount(p.requests)) {
    return { ok: false, error: 'requests is not a whole number >= 0' };
  }
  if (!isCount(p.cacheHits)) {
    return { ok: false, error: 'cacheHits is not a whole number >= 0' };
  }
  return {
    ok: true,
    status: {
      state: p.state as ServerState,
      message: p.message,
      lastLatencyMs: latency,
      requests: p.requests,
      cacheHits: p.cacheHits,
    },
  };
}

/** "312 ms"; latencies are shown to the millisecond. */
export function formatLatency(ms: number): string {
  return `${Math.round(ms)} ms`;
}

function tooltip(...lines: (string | undefined)[]): string {
  return [...lines.filter((line): line is string => line !== undefined && line.trim() !== ''), CLICK_HINT].join('\n');
}

/**
 * ready:       "$(sparkle) ctxpress 312 ms · 4 cached" (the latency once there is one, the cache
 *              part once something was served from it)
 * unreachable: "$(warning) ctxpress unreachable", the tooltip is the server's message
 * error:       "$(error) ctxpress error", the tooltip is the server's message
 */
export function statusView(status: StatusParams): StatusView {
  switch (status.state) {
    case 'ready': {
      let text = '$(sparkle) ctxpress';
      if (status.lastLatencyMs !== null) {
        text += ` ${formatLatency(status.lastLatencyMs)}`;
      }
      if (status.cacheHits > 0) {
        text += ` · ${status.cacheHits} cached`;
      }
      const counts =
        status.requests === 0
          ? 'No completions yet'
          : `${status.requests} ${status.requests === 1 ? 'completion' : 'completions'}, ` +
            `${status.cacheHits} served from cache`;
      const latency =
        status.lastLatencyMs === null ? undefined : `Last completion: ${formatLatency(status.lastLatencyMs)}`;
      return { text, tooltip: tooltip('ctxpress: ready', status.message, latency, counts), severity: 'normal' };
    }
    case 'unreachable':
      return {
        text: '$(warning) ctxpress unreachable',
        tooltip: tooltip(status.message || 'The ctxpress service cannot be reached.'),
        severity: 'warning',
      };
    case 'error':
      return {
        text: '$(error) ctxpress error',
        tooltip: tooltip(status.message || 'The ctxpress server reported an error.'),
        severity: 'error',
      };
  }
}

/** Before the server's first status: the process is starting. */
export function startingView(): StatusView {
  return { text: '$(sync~spin) ctxpress', tooltip: tooltip('ctxpress: starting the language server'), severity: 'normal' };
}

/** The language server is not running (failed to start, or gave up after crashes). */
export function stoppedView(reason?: string): StatusView {
  const notFound =
    reason !== undefined && /\bENOENT\b/.test(reason)
      ? 'Is ctxpress installed? Set ctxpress.serverPath to the ctxpress executable.'
      : undefined;
  return {
    text: '$(error) ctxpress stopped',
    tooltip: tooltip(
      'ctxpress: the language server is not running',
      reason,
      notFound,
      'Run "ctxpress: Restart Server" to try again.',
    ),
    severity: 'error',
  };
}
