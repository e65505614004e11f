"""A real VS Code driven by keyboard: code-server (VS Code's workbench over HTTP, installed by
infra/editor-clients/vscode.sh) with the ctxpress extension, in headless Chromium via Playwright.

``CodeServer`` owns the processes (a throw-away user-data and extensions dir, the server's process
group); ``Workbench`` is the page: open a file, put the cursor, type, wait for ghost text, accept it.
``Workbench.type_for_ghost`` is what a latency measurement needs: the suggestion shown and the
milliseconds from the last keystroke to the ghost text on screen, both taken by the page's own clock.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from playwright.sync_api import Page, sync_playwright
from playwright.sync_api import TimeoutError as PlaywrightTimeout

CHROMIUM = "/usr/bin/chromium"
# The extension's status-bar item: VS Code names it <publisher>.<extension>.<item id>.
STATUS_ITEM = ".statusbar-item[id='ctxpress.ctxpress.ctxpress.status']"
SETTLE_MS = 2500

# A clean start: no trust prompt, welcome page, walkthrough, recommendation or update check, so that
# the keyboard reaches the editor; then what typing needs to be replayed faithfully.
BASE_SETTINGS: dict[str, Any] = {
    "security.workspace.trust.enabled": False,
    "workbench.startupEditor": "none",
    "workbench.welcomePage.walkthroughs.openOnInstall": False,
    "workbench.tips.enabled": False,
    "workbench.enableExperiments": False,
    "workbench.secondarySideBar.defaultVisibility": "hidden",
    "telemetry.telemetryLevel": "off",
    "update.mode": "none",
    "extensions.autoUpdate": False,
    "extensions.autoCheckUpdates": False,
    "extensions.ignoreRecommendations": True,
    "chat.disableAIFeatures": True,
    "git.openRepositoryInParentFolders": "never",
    "editor.minimap.enabled": False,
    "editor.inlineSuggest.enabled": True,
    # Keys land exactly as typed: auto-indent and auto-closing would change a replayed text.
    "editor.autoIndent": "none",
    "editor.autoClosingBrackets": "never",
    "editor.autoClosingQuotes": "never",
    "editor.autoSurround": "never",
    # No word list competing with the ghost text: while VS Code's suggest list is open it shows ghost
    # text only when that extends the list's selected word, so a pause after a word would show none.
    "editor.quickSuggestions": {"other": "off", "comments": "off", "strings": "off"},
    "editor.suggestOnTriggerCharacters": False,
    # Desktop VS Code's default. code-server's (afterDelay, 1 s) saves half-typed lines, and each save
    # re-indexes the file: a later prompt then retrieves a body that stops at `return `.
    "files.autoSave": "off",
}

# Set in the page before VS Code loads: the time of the last keydown, and the first time after it that
# non-empty ghost text is in an editor, both by performance.now().
WATCH_GHOST = """
window.__ghost = {lastKey: 0, shownAt: 0};
window.addEventListener('keydown', () => { window.__ghost.lastKey = performance.now(); window.__ghost.shownAt = 0; },
                        true);
const ghostText = () => Array.from(document.querySelectorAll(
    '.monaco-editor .ghost-text-decoration, .monaco-editor .ghost-text-decoration-preview, .monaco-editor .ghost-text'))
  .map((e) => e.textContent).join('').trim();
window.__ghostText = ghostText;
new MutationObserver(() => {
  if (window.__ghost.lastKey && !window.__ghost.shownAt && ghostText()) { window.__ghost.shownAt = performance.now(); }
}).observe(document, {childList: true, subtree: true, characterData: true});
"""

# The ghost text as the user reads it: the rest of the cursor line, then the lines VS Code shows below
# it (a view zone of line divs, each holding `span.ghost-text` pieces; blank lines are empty divs).
READ_GHOST = """
async () => {
  await new Promise((done) => requestAnimationFrame(done));  // the lines below may come a frame later
  const editor = document.querySelector('.monaco-editor.focused') || document.querySelector('.monaco-editor');
  const inline = Array.from(editor.querySelectorAll('.ghost-text-decoration, .ghost-text-decoration-preview'))
    .map((e) => e.textContent).join('');
  const first = editor.querySelector('span.ghost-text');
  const zone = first && first.closest('div') && first.closest('div').parentElement;
  const below = zone ? Array.from(zone.children)
    .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)
    .map((e) => e.textContent) : [];
  return [inline, ...below].join('\\n');
}
"""

# The editor's visible lines in order (VS Code positions them absolutely, not in DOM order), without
# the ghost text VS Code renders inside them.
READ_LINES = """
() => Array.from((document.querySelector('.monaco-editor.focused') || document.querySelector('.monaco-editor'))
    .querySelectorAll('.view-lines > .view-line'))
  .sort((a, b) => a.getBoundingClientRect().top - b.getBoundingClientRect().top)
  .map((line) => {
    const copy = line.cloneNode(true);
    copy.querySelectorAll('.ghost-text-decoration, .ghost-text-decoration-preview').forEach((e) => e.remove());
    return copy.textContent;
  })
"""


def plain(text: str) -> str:
    """DOM text → source text: VS Code renders spaces as no-break spaces."""
    return text.replace("\u00a0", " ")


@dataclass
class Ghost:
    text: str
    latency_ms: float


class CodeServer:
    """code-server with a throw-away user-data and extensions dir, stopped with its whole process group."""

    def __init__(self, install_dir: Path, work: Path, env: dict[str, str], settings: dict[str, Any]) -> None:
        self.entry = install_dir / "node_modules" / "code-server" / "out" / "node" / "entry.js"
        self.user_data = work / "user-data"
        self.extensions = work / "extensions"
        self.config = work / "code-server.yaml"
        self.log_path = work / "code-server.log"
        self.env = {**env, "HOME": str(work / "home")}  # nothing lands in the real home's config
        self.process: subprocess.Popen[bytes] | None = None
        (work / "home").mkdir(parents=True, exist_ok=True)
        (self.user_data / "User").mkdir(parents=True, exist_ok=True)
        self.extensions.mkdir(parents=True, exist_ok=True)
        self.config.write_text("auth: none\ncert: false\n")
        (self.user_data / "User" / "settings.json").write_text(json.dumps({**BASE_SETTINGS, **settings}, indent=2))

    def _argv(self, *args: str) -> list[str]:
        return ["node", str(self.entry), "--config", str(self.config), "--user-data-dir", str(self.user_data),
                "--extensions-dir", str(self.extensions), *args]

    def install_extension(self, vsix: Path, timeout_s: float = 120) -> str:
        done = subprocess.run(self._argv("--install-extension", str(vsix), "--force"), env=self.env,
                              capture_output=True, text=True, timeout=timeout_s)
        output = done.stdout + done.stderr
        if done.returncode != 0 or "successfully installed" not in output.lower():
            raise RuntimeError(f"installing {vsix.name} failed ({done.returncode}):\n{output}")
        return output

    def start(self, port: int, timeout_s: float = 90) -> str:
        """Starts code-server on ``port``; its URL once it answers. The page picks the folder (``?folder=``)."""
        with self.log_path.open("wb") as log:  # the child keeps its own copy of the descriptor
            self.process = subprocess.Popen(
                self._argv("--auth", "none", "--bind-addr", f"127.0.0.1:{port}", "--disable-telemetry",
                           "--disable-update-check", "--disable-workspace-trust", "--disable-getting-started-override",
                           "--ignore-last-opened"),
                env=self.env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"code-server exited ({self.process.returncode}):\n{self.log()}")
            try:
                with urllib.request.urlopen(f"{url}/healthz", timeout=2) as reply:
                    if reply.status == 200:
                        return url
            except OSError:
                time.sleep(0.3)
        raise TimeoutError(f"code-server did not answer on {url} within {timeout_s:.0f} s:\n{self.log()}")

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")[-4000:] if self.log_path.exists() else ""

    def extension_log(self) -> str:
        """The ctxpress output channel (the extension's and the language server's log)."""
        logs = sorted(self.user_data.glob("logs/**/*ctxpress*.log"), key=lambda p: p.stat().st_mtime)
        return "\n".join(f"--- {p}\n{p.read_text(errors='replace')[-6000:]}" for p in logs)

    def group(self) -> list[int]:
        """The live processes of code-server's process group (extension host, `ctxpress lsp`, ...)."""
        if self.process is None:
            return []
        members = []
        for entry in Path("/proc").iterdir():
            if entry.name.isdigit():
                try:
                    if os.getpgid(int(entry.name)) == self.process.pid and not _zombie(entry):
                        members.append(int(entry.name))
                except (ProcessLookupError, PermissionError):
                    continue
        return members

    def stop(self, timeout_s: float = 10) -> list[int]:
        """Stops the whole group (TERM, then KILL); the processes still there after that, if any."""
        if self.process is None:
            return []
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(self.process.pid, sig)
            except ProcessLookupError:
                break
            deadline = time.monotonic() + timeout_s
            while time.monotonic() < deadline and self.group():
                time.sleep(0.2)
            if not self.group():
                break
        try:
            self.process.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            pass
        return self.group()


def _zombie(proc: Path) -> bool:
    try:
        return (proc / "stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except OSError:
        return True


class Workbench:
    """The VS Code page: everything through the keyboard, as a user works."""

    def __init__(self, page: Page) -> None:
        self.page = page

    def wait_ready(self, timeout_s: float = 120) -> None:
        """The workbench is up and the extension's language server runs (its status item stops
        spinning); RuntimeError when the extension says the server stopped."""
        self.page.wait_for_selector(".monaco-workbench", timeout=timeout_s * 1000)
        self.dismiss_dialogs()
        self.page.wait_for_function(
            f"(() => {{ const e = document.querySelector({json.dumps(STATUS_ITEM)});"
            " return e && !(e.getAttribute('aria-label') || 'sync~spin').startsWith('sync~spin'); })()",
            timeout=timeout_s * 1000, polling=100)
        if "stopped" in (label := self.status()):
            raise RuntimeError(f"the ctxpress language server is not running: {label}")

    def dismiss_dialogs(self) -> None:
        """A modal dialog (trust, an extension's question) would take the keyboard: answer yes."""
        for button in self.page.locator(".monaco-dialog-box .monaco-button").all():
            label = (button.text_content() or "").lower()
            if "trust" in label or label.strip() in ("yes", "ok", "continue"):
                button.click()
                return

    def status(self) -> str:
        item = self.page.locator(STATUS_ITEM)
        return item.get_attribute("aria-label", timeout=5000) or ""

    def quick_input(self, keys: str, text: str, timeout_s: float = 20) -> None:
        self.page.keyboard.press(keys)
        box = self.page.locator(".quick-input-widget .quick-input-box input")
        box.wait_for(state="visible", timeout=timeout_s * 1000)
        self.page.keyboard.type(text)

    def open_file(self, relative: str, timeout_s: float = 30) -> None:
        """Quick Open (Ctrl+P), the file's path, Enter; returns once its editor has the focus."""
        self.quick_input("Control+P", relative, timeout_s)
        name = Path(relative).name
        self.page.locator(f".quick-input-list .monaco-list-row[aria-label*='{name}']").first.wait_for(
            timeout=timeout_s * 1000)
        self.page.keyboard.press("Enter")
        self.page.locator(f".tab.active[aria-label*='{name}']").wait_for(timeout=timeout_s * 1000)
        self.page.locator(".monaco-editor.focused").wait_for(timeout=timeout_s * 1000)
        # VS Code sets up an editor's inline suggestions once the page is idle: keys typed before that
        # ask for none (seen here: no inlineCompletion request at all after typing straight away).
        self.page.wait_for_timeout(SETTLE_MS)

    def go_to(self, line: int, column: int, timeout_s: float = 20) -> None:
        """Go to Line (Ctrl+G) ``line:column``, both 1-based as VS Code shows them."""
        self.quick_input("Control+G", f"{line}:{column}", timeout_s)
        self.page.keyboard.press("Enter")
        self.page.locator(".monaco-editor.focused").wait_for(timeout=timeout_s * 1000)

    def type_for_ghost(self, text: str, timeout_s: float = 120, delay_ms: float = 40) -> Ghost:
        """Types ``text`` key by key and waits for ghost text; its text, and the ms from the last
        keydown to the ghost text on screen. TimeoutError when none shows within ``timeout_s``."""
        self.page.keyboard.type(text, delay=delay_ms)
        try:
            self.page.wait_for_function("window.__ghost.shownAt > 0", timeout=timeout_s * 1000, polling=50)
        except PlaywrightTimeout:
            raise TimeoutError(f"no ghost text within {timeout_s:.0f} s") from None
        shown = self.page.evaluate("window.__ghost")
        return Ghost(plain(self.page.evaluate(READ_GHOST)), shown["shownAt"] - shown["lastKey"])

    def ghost_visible(self) -> bool:
        return bool(self.page.evaluate("window.__ghostText()"))

    def lines(self) -> list[str]:
        """The lines on screen, top to bottom, without ghost text."""
        return [plain(line) for line in self.page.evaluate(READ_LINES)]

    def wait_line(self, number: int, expected: str, timeout_s: float = 10) -> bool:
        """Whether line ``number`` (1-based, of a file that fits the screen) reads ``expected`` within
        ``timeout_s``."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            lines = self.lines()
            if len(lines) >= number and lines[number - 1] == expected:
                return True
            time.sleep(0.1)
        return False

    def save(self) -> None:
        self.page.keyboard.press("Control+S")

    def screenshot(self, path: Path) -> Path:
        self.page.screenshot(path=str(path))
        return path


@contextmanager
def workbench(url: str, folder: Path, timeout_s: float = 120) -> Iterator[Workbench]:
    """Chromium (Debian's) on ``folder`` in the VS Code at ``url``; closed on the way out."""
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True)
        try:
            page = browser.new_page(viewport={"width": 1400, "height": 900})
            page.add_init_script(WATCH_GHOST)
            page.goto(f"{url}/?folder={folder}", timeout=timeout_s * 1000)
            bench = Workbench(page)
            bench.wait_ready(timeout_s)
            yield bench
        finally:
            browser.close()
