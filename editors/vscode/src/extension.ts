// Starts `ctxpress lsp` over stdio and shows its status. The logic lives in config.ts and
// status.ts; this file only wires them to VS Code.
//
// Inline completions (LSP 3.18 textDocument/inlineCompletion) and the server's commands
// (`ctxpress.accept`, run when a completion is accepted) are registered by
// vscode-languageclient itself from the server's capabilities.

import * as os from 'node:os';
import * as vscode from 'vscode';
import {
  LanguageClient,
  type LanguageClientOptions,
  RevealOutputChannelOn,
  type ServerOptions,
  State,
} from 'vscode-languageclient/node';
import { buildLaunch, type RawSettings, SETTING_KEYS, type ServerLaunch, sameLaunch } from './config';
import { CURSOR_REST_NOTIFICATION, REST_MS, RestTimer } from './cursorRest';
import { STATUS_NOTIFICATION, parseStatus, startingView, statusView, stoppedView, type StatusView } from './status';

const STOP_TIMEOUT_MS = 2000;

function readLaunch(): ServerLaunch {
  const config = vscode.workspace.getConfiguration('ctxpress');
  const settings: RawSettings = {};
  for (const key of SETTING_KEYS) {
    settings[key] = config.get(key);
  }
  return buildLaunch(settings, os.homedir());
}

function errorText(error: unknown): string {
  return error instanceof Error ? error.message : String(error);
}

class Controller {
  private client: LanguageClient | undefined;
  private launch: ServerLaunch | undefined;
  /** Starts and stops run one after another, never interleaved. */
  private queue: Promise<void> = Promise.resolve();

  constructor(
    private readonly log: vscode.LogOutputChannel,
    private readonly item: vscode.StatusBarItem,
  ) {}

  start(): Promise<void> {
    return this.enqueue(() => this.doStart());
  }

  stop(): Promise<void> {
    return this.enqueue(() => this.doStop());
  }

  restart(why: string): Promise<void> {
    return this.enqueue(async () => {
      this.log.info(`restarting the language server (${why})`);
      await this.doStop();
      await this.doStart();
    });
  }

  /** A `ctxpress.*` setting changed: restart unless the server would start exactly as it runs now. */
  settingsChanged(): Promise<void> {
    if (this.launch && this.client?.isRunning() && sameLaunch(readLaunch(), this.launch)) {
      return Promise.resolve();
    }
    return this.restart('settings changed');
  }

  /** The cursor rests in `editor` where a click or a jump put it: the server prepares the prompt there. */
  cursorRested(editor: vscode.TextEditor): void {
    const client = this.client;
    if (!client?.isRunning() || editor.document.isClosed) {
      return;
    }
    const converter = client.code2ProtocolConverter;
    client
      .sendNotification(CURSOR_REST_NOTIFICATION, {
        textDocument: converter.asTextDocumentIdentifier(editor.document),
        position: converter.asPosition(editor.selection.active),
      })
      .catch((error: unknown) => this.log.warn(`${CURSOR_REST_NOTIFICATION}: ${errorText(error)}`));
  }

  /** Runs `step` after the steps before it; a step that fails is logged, the queue goes on. */
  private enqueue(step: () => Promise<void>): Promise<void> {
    const next = this.queue.then(step).catch((error: unknown) => {
      this.log.error(`ctxpress: ${errorText(error)}`);
      this.show(stoppedView(errorText(error)));
    });
    this.queue = next;
    return next;
  }

  private show(view: StatusView): void {
    this.item.text = view.text;
    this.item.tooltip = view.tooltip;
    this.item.backgroundColor =
      view.severity === 'normal'
        ? undefined
        : new vscode.ThemeColor(view.severity === 'warning' ? 'statusBarItem.warningBackground' : 'statusBarItem.errorBackground');
    this.item.show();
  }

  private async doStart(): Promise<void> {
    const launch = readLaunch();
    for (const warning of launch.warnings) {
      this.log.warn(warning);
    }
    this.launch = launch;
    this.log.info(
      `starting ${[launch.command, ...launch.args].join(' ')} with initializationOptions ` +
        JSON.stringify(launch.initializationOptions),
    );

    const serverOptions: ServerOptions = { command: launch.command, args: launch.args };
    const clientOptions: LanguageClientOptions = {
      documentSelector: [{ scheme: 'file' }, { scheme: 'untitled' }],
      initializationOptions: launch.initializationOptions,
      outputChannel: this.log,
      revealOutputChannelOn: RevealOutputChannelOn.Never,
      middleware: {
        // The server's textDocument/completion is for editors without inline completion (Helix). VS Code
        // would ask it on every quick-suggest keystroke besides the inline request: the server keeps one
        // request per document, so each cancels the other (the ghost text's request is answered
        // "cancelled" when the completion request comes after it), each runs the model, and the
        // suggestion would show twice.
        provideCompletionItem: () => undefined,
      },
    };
    const client = new LanguageClient('ctxpress', 'ctxpress', serverOptions, clientOptions);
    this.client = client;

    let statusSeen = false;
    client.onNotification(STATUS_NOTIFICATION, (params: unknown) => {
      statusSeen = true;
      const parsed = parseStatus(params);
      if (parsed.ok) {
        this.show(statusView(parsed.status));
      } else {
        this.log.warn(`ignoring a ${STATUS_NOTIFICATION} notification: ${parsed.error}`);
      }
    });
    client.onDidChangeState((event) => {
      if (this.client !== client) {
        return; // a deliberate stop: the client was replaced first
      }
      if (event.newState === State.Starting) {
        this.show(startingView()); // also when the client restarts a crashed server
      } else if (event.newState === State.Stopped) {
        this.show(stoppedView()); // the client gave up (the server crashed too often)
      }
    });

    this.show(startingView());
    try {
      await client.start();
      // `ctxpress lsp` sends its first status with its first completion: until then the item would
      // keep saying "starting the language server" (and spinning) although the server is running.
      if (!statusSeen && this.client === client) {
        this.show(statusView({ state: 'ready', message: '', lastLatencyMs: null, requests: 0, cacheHits: 0 }));
      }
    } catch (error) {
      const reason = errorText(error);
      this.log.error(`the language server did not start: ${reason}`);
      // vscode-languageclient has already shown the error; the status item keeps it (and a hint).
      this.show(stoppedView(reason));
    }
  }

  private async doStop(): Promise<void> {
    const client = this.client;
    this.client = undefined;
    if (!client?.needsStop()) {
      return; // never started, failed to start, or already stopped
    }
    try {
      await client.dispose(STOP_TIMEOUT_MS);
    } catch (error) {
      this.log.warn(`stopping the language server: ${errorText(error)}`);
    }
  }
}

let controller: Controller | undefined;

export function activate(context: vscode.ExtensionContext): void {
  const log = vscode.window.createOutputChannel('ctxpress', { log: true });
  const item = vscode.window.createStatusBarItem('ctxpress.status', vscode.StatusBarAlignment.Right, 100);
  item.name = 'ctxpress';
  item.command = 'ctxpress.showLog';
  const current = new Controller(log, item);
  controller = current;
  const rest = new RestTimer<vscode.TextEditor>(REST_MS, (editor) => current.cursorRested(editor));

  context.subscriptions.push(
    log,
    item,
    vscode.commands.registerCommand('ctxpress.showLog', () => log.show(true)),
    vscode.commands.registerCommand('ctxpress.restart', () => current.restart('ctxpress.restart')),
    vscode.workspace.onDidChangeConfiguration((event) => {
      if (event.affectsConfiguration('ctxpress')) {
        void current.settingsChanged();
      }
    }),
    vscode.window.onDidChangeTextEditorSelection((event) => rest.moved(event.kind, event.textEditor)),
    { dispose: () => rest.cancel() },
  );
  void current.start();
}

export function deactivate(): Promise<void> | undefined {
  const current = controller;
  controller = undefined;
  return current?.stop();
}
