// Settings → how to start `ctxpress lsp` and the `initializationOptions` it gets.
// Pure: no `vscode` import, so node's test runner can check it directly.

export const DEFAULT_SERVER_PATH = 'ctxpress';
export const DEFAULT_MAX_TOKENS = 64;
export const MODES = ['optimized', 'baseline'] as const;
export type Mode = (typeof MODES)[number];

/** The `ctxpress.*` settings as read from the configuration, values not yet trusted. */
export interface RawSettings {
  serverPath?: unknown;
  natsUrl?: unknown;
  credentials?: unknown;
  repository?: unknown;
  debounceMs?: unknown;
  maxTokens?: unknown;
  mode?: unknown;
}

/** The keys the server reads from `initializationOptions`; a key is present only when it has a value. */
export interface InitializationOptions {
  natsUrl?: string;
  credentials?: string;
  repository?: string;
  debounceMs?: number;
  maxTokens?: number;
  mode?: Mode;
}

export interface ServerLaunch {
  command: string;
  args: string[];
  initializationOptions: InitializationOptions;
  /** One line per setting whose value was ignored, for the log. */
  warnings: string[];
}

/** The setting names `readSettings` reads under the `ctxpress` section. */
export const SETTING_KEYS: readonly (keyof RawSettings)[] = [
  'serverPath',
  'natsUrl',
  'credentials',
  'repository',
  'debounceMs',
  'maxTokens',
  'mode',
];

/** `~` or `~/…` → the home directory; anything else unchanged. */
export function expandHome(path: string, home: string | undefined): string {
  if (!home) {
    return path;
  }
  if (path === '~') {
    return home;
  }
  if (path.startsWith('~/') || path.startsWith('~\\')) {
    return home.replace(/[\\/]+$/, '') + path.slice(1);
  }
  return path;
}

/** A trimmed, non-empty string, or undefined (unset, empty or not a string). */
function text(value: unknown): string | undefined {
  if (typeof value !== 'string') {
    return undefined;
  }
  const trimmed = value.trim();
  return trimmed === '' ? undefined : trimmed;
}

function isUnset(value: unknown): boolean {
  return value === undefined || value === null || (typeof value === 'string' && value.trim() === '');
}

/**
 * Turns the settings into the command line and initialization options of the server.
 * Unset or empty values are left out; a value of the wrong type or out of range is left out
 * too, with a warning.
 */
export function buildLaunch(settings: RawSettings, home?: string): ServerLaunch {
  const warnings: string[] = [];
  const options: InitializationOptions = {};

  const warnIgnored = (key: string, value: unknown, why: string) => {
    warnings.push(`ctxpress.${key}: ignoring ${JSON.stringify(value)} (${why})`);
  };
  const checkText = (key: 'natsUrl' | 'credentials' | 'repository', value: unknown) => {
    if (isUnset(value)) {
      return undefined;
    }
    const result = text(value);
    if (result === undefined) {
      warnIgnored(key, value, 'not a string');
    }
    return result;
  };

  let command = DEFAULT_SERVER_PATH;
  if (!isUnset(settings.serverPath)) {
    const serverPath = text(settings.serverPath);
    if (serverPath === undefined) {
      warnIgnored('serverPath', settings.serverPath, `not a string; using "${DEFAULT_SERVER_PATH}"`);
    } else {
      command = expandHome(serverPath, home);
    }
  }

  const natsUrl = checkText('natsUrl', settings.natsUrl);
  if (natsUrl !== undefined) {
    options.natsUrl = natsUrl;
  }
  const credentials = checkText('credentials', settings.credentials);
  if (credentials !== undefined) {
    options.credentials = expandHome(credentials, home);
  }
  const repository = checkText('repository', settings.repository);
  if (repository !== undefined) {
    options.repository = repository;
  }

  const debounceMs = settings.debounceMs;
  if (!isUnset(debounceMs)) {
    if (typeof debounceMs === 'number' && Number.isFinite(debounceMs) && debounceMs >= 0) {
      options.debounceMs = Math.round(debounceMs);
    } else {
      warnIgnored('debounceMs', debounceMs, 'not a number >= 0');
    }
  }

  const maxTokens = settings.maxTokens;
  if (!isUnset(maxTokens)) {
    if (typeof maxTokens === 'number' && Number.isInteger(maxTokens) && maxTokens >= 1) {
      options.maxTokens = maxTokens;
    } else {
      warnIgnored('maxTokens', maxTokens, 'not a whole number >= 1');
    }
  }

  const mode = settings.mode;
  if (!isUnset(mode)) {
    if (typeof mode === 'string' && (MODES as readonly string[]).includes(mode)) {
      options.mode = mode as Mode;
    } else {
      warnIgnored('mode', mode, `not one of ${MODES.join(', ')}`);
    }
  }

  return { command, args: ['lsp'], initializationOptions: options, warnings };
}

/** Whether two launches start the same server the same way (a settings event may change nothing). */
export function sameLaunch(a: ServerLaunch, b: ServerLaunch): boolean {
  return (
    a.command === b.command &&
    JSON.stringify(a.args) === JSON.stringify(b.args) &&
    JSON.stringify(sortKeys(a.initializationOptions)) === JSON.stringify(sortKeys(b.initializationOptions))
  );
}

function sortKeys(options: InitializationOptions): [string, unknown][] {
  return Object.entries(options).sort(([x], [y]) => (x < y ? -1 : x > y ? 1 : 0));
}
