// Where the cursor comes to rest after a click, a jump or arrow keys: `ctxpress lsp` is told once it has stayed
// put for REST_MS (the `ctxpress/cursorRest` notification), and the appliance prepares the prompt for that place
// before the first keystroke there. Typing moves the cursor too, but its completion request already says where.

export const CURSOR_REST_NOTIFICATION = 'ctxpress/cursorRest';
export const REST_MS = 300;

/** vscode.TextEditorSelectionChangeKind: Keyboard 1, Mouse 2, Command 3; undefined when an edit moved it. */
export function movedByUser(kind: number | undefined): boolean {
  return kind !== undefined;
}

/** Calls `rested` with the last place moved to, once no other move came for `delayMs`. */
export class RestTimer<T> {
  private timer: ReturnType<typeof setTimeout> | undefined;

  constructor(
    private readonly delayMs: number,
    private readonly rested: (place: T) => void,
  ) {}

  moved(kind: number | undefined, place: T): void {
    this.cancel();
    if (!movedByUser(kind)) {
      return; // a keystroke: its own completion request is on its way
    }
    this.timer = setTimeout(() => {
      this.timer = undefined;
      this.rested(place);
    }, this.delayMs);
  }

  cancel(): void {
    if (this.timer !== undefined) {
      clearTimeout(this.timer);
      this.timer = undefined;
    }
  }
}
