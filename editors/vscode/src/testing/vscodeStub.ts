// Just enough of the `vscode` module to run the extension and vscode-languageclient in plain node,
// for the extension tests: settings are a plain object, and the test can see the status-bar item,
// the log, the registered commands and the inline completion providers. Whatever else either asks
// for is an inert stand-in (a callable, constructible proxy).

import Module from 'node:module';

type Listener = (event: any) => void;

export interface StatusItem {
  text?: string;
  tooltip?: string;
  command?: string;
  backgroundColor?: { id: string };
  name?: string;
  visible: boolean;
  show(): void;
  hide(): void;
  dispose(): void;
}

export interface VscodeStub {
  module: any;
  settings: Record<string, unknown>;
  item: StatusItem;
  log: string[];
  commands: Map<string, (...args: any[]) => unknown>;
  inlineProviders: number;
  errorPopups: string[];
  /** Tells every onDidChangeConfiguration listener that the `ctxpress` settings changed. */
  changeSettings(changes: Record<string, unknown>): void;
}

const disposable = { dispose() {} };
const event = () => disposable;

function isEvent(prop: PropertyKey): boolean {
  return typeof prop === 'string' && /^on(Did|Will)/.test(prop);
}

/** A stand-in that can be called, constructed and read from, never a thenable. */
function inert(): any {
  const target = function () {};
  return new Proxy(target, {
    get(_t, prop) {
      if (prop === 'then') {
        return undefined;
      }
      if (prop === Symbol.iterator) {
        return [][Symbol.iterator];
      }
      if (prop === Symbol.toPrimitive) {
        return () => '';
      }
      return isEvent(prop) ? event : inert();
    },
    apply: () => inert(),
    construct: () => inert(),
  });
}

/** A namespace (workspace, window, …): the given members, events, and inert stand-ins for the rest. */
function namespace(members: Record<string, unknown>): any {
  return new Proxy(members, {
    get(target, prop) {
      if (typeof prop === 'string' && prop in target) {
        return target[prop];
      }
      if (prop === 'then') {
        return undefined;
      }
      return isEvent(prop) ? event : inert();
    },
  });
}

class Plain {
  args: unknown[];
  constructor(...args: unknown[]) {
    this.args = args;
  }
}

// Classes the language client extends or instantiates at load time or while starting.
const CLASSES = [
  'CallHierarchyItem', 'CancellationError', 'CancellationTokenSource', 'CodeAction', 'CodeLens',
  'CompletionItem', 'CompletionList', 'Diagnostic', 'DocumentLink', 'Hover', 'InlayHint',
  'InlineCompletionItem', 'InlineCompletionList', 'Location', 'MarkdownString', 'Position', 'Range',
  'RelativePattern', 'SnippetString', 'SymbolInformation', 'TextEdit', 'TypeHierarchyItem', 'Uri',
  'WorkspaceEdit', 'WorkspaceSymbol',
];

export function createVscodeStub(settings: Record<string, unknown>): VscodeStub {
  const configListeners: Listener[] = [];
  const stub: VscodeStub = {
    module: undefined,
    settings,
    item: {
      visible: false,
      show() {
        this.visible = true;
      },
      hide() {
        this.visible = false;
      },
      dispose() {
        this.visible = false;
      },
    },
    log: [],
    commands: new Map(),
    inlineProviders: 0,
    errorPopups: [],
    changeSettings(changes) {
      Object.assign(settings, changes);
      const change = { affectsConfiguration: (section: string) => section === 'ctxpress' || section.startsWith('ctxpress.') };
      for (const listener of configListeners) {
        listener(change);
      }
    },
  };

  const channel: Record<string, unknown> = {
    name: 'ctxpress',
    logLevel: 3, // Info
    onDidChangeLogLevel: event,
    show() {},
    hide() {},
    clear() {},
    replace() {},
    dispose() {},
  };
  for (const level of ['trace', 'debug', 'info', 'warn', 'error', 'append', 'appendLine']) {
    channel[level] = (message: unknown) => stub.log.push(`${level}: ${String(message)}`);
  }

  const members: Record<string, unknown> = {
    version: '1.91.0',
    env: namespace({ machineId: 'test', sessionId: 'test', appName: 'Visual Studio Code', language: 'en' }),
    workspace: namespace({
      getConfiguration: () => ({ get: (key: string) => settings[key], has: (key: string) => key in settings, inspect: () => undefined }),
      onDidChangeConfiguration: (listener: Listener) => {
        configListeners.push(listener);
        return { dispose: () => configListeners.splice(configListeners.indexOf(listener), 1) };
      },
      textDocuments: [],
      notebookDocuments: [],
      workspaceFolders: undefined,
    }),
    window: namespace({
      createOutputChannel: () => channel,
      createStatusBarItem: () => stub.item,
      visibleTextEditors: [],
      visibleNotebookEditors: [],
      activeTextEditor: undefined,
      showErrorMessage: async (message: string) => {
        stub.errorPopups.push(message);
        return undefined;
      },
    }),
    commands: namespace({
      registerCommand: (id: string, handler: (...args: any[]) => unknown) => {
        if (stub.commands.has(id)) {
          throw new Error(`command '${id}' already exists`);
        }
        stub.commands.set(id, handler);
        return { dispose: () => stub.commands.delete(id) };
      },
      executeCommand: async () => undefined,
    }),
    languages: namespace({
      registerInlineCompletionItemProvider: () => {
        stub.inlineProviders++;
        let disposed = false;
        return {
          dispose: () => {
            if (!disposed) {
              disposed = true;
              stub.inlineProviders--;
            }
          },
        };
      },
    }),
    StatusBarAlignment: { Left: 1, Right: 2 },
    LogLevel: { Off: 0, Trace: 1, Debug: 2, Info: 3, Warning: 4, Error: 5 },
    ThemeColor: class {
      constructor(readonly id: string) {}
    },
    Disposable: class {
      constructor(private readonly onDispose?: () => void) {}
      static from(...items: { dispose(): void }[]) {
        return { dispose: () => items.forEach((item) => item.dispose()) };
      }
      dispose() {
        this.onDispose?.();
      }
    },
    EventEmitter: class {
      private listeners: Listener[] = [];
      event = (listener: Listener) => {
        this.listeners.push(listener);
        return disposable;
      };
      fire(value: unknown) {
        this.listeners.forEach((listener) => listener(value));
      }
      dispose() {
        this.listeners = [];
      }
    },
  };
  for (const name of CLASSES) {
    members[name] = class extends Plain {};
  }
  // __esModule: TypeScript's import helpers then read members through the proxy.
  members.__esModule = true;
  stub.module = namespace(members);
  return stub;
}

/** Makes `require('vscode')` return the stub (for modules loaded after this call). */
export function installVscodeStub(stub: VscodeStub): void {
  const loader = Module as any;
  const resolve = loader._resolveFilename;
  loader._resolveFilename = function (request: string, ...rest: unknown[]) {
    return request === 'vscode' ? 'vscode' : resolve.call(this, request, ...rest);
  };
  require.cache['vscode'] = { id: 'vscode', filename: 'vscode', loaded: true, exports: stub.module } as any;
}
