-- Neovim's own LSP client (0.7+: vim.lsp.start_client, buf_attach_client, omnifunc) attached to
-- `ctxpress lsp`, used the way a user does: typing in insert mode and asking with <C-x><C-o>, then <C-y>
-- to take the item. Started by tests/e2e/test_neovim.py as `nvim --headless --clean -u <this file>`;
-- its plan comes as JSON in $CTXPRESS_NVIM_PLAN and the results go as JSON to plan.result.
--
-- Keys go through nvim_feedkeys and are processed when Neovim waits for input, so each step runs from a
-- timer once the previous one has been seen through (no UI is attached: the completion menu is never
-- drawn, but complete_info() shows its items and the first one is inserted, as on screen).

local uv = vim.loop
local plan = vim.json.decode(io.open(os.getenv("CTXPRESS_NVIM_PLAN"), "r"):read("*a"))
-- vim.lsp.inline_completion (LSP 3.18 ghost text) came with Neovim 0.12
local has_inline, inline = pcall(function() return vim.lsp.inline_completion end)
local results = { nvim = vim.version(), errors = {}, replay = {}, has_inline_completion = has_inline and inline ~= nil }
local started = uv.hrtime()

local function ms_since(t) return (uv.hrtime() - t) / 1e6 end

local function finish()
  results.total_ms = ms_since(started)
  local out = assert(io.open(plan.result, "w"))
  -- a NUL in a buffer line (a newline a completion inserted) comes out as "\u0000"
  out:write(vim.json.encode(results))
  out:close()
  vim.cmd("qall!")
end

local function fail(message)
  table.insert(results.errors, message)
  finish()
end

local function keys(text)
  vim.api.nvim_feedkeys(vim.api.nvim_replace_termcodes(text, true, false, true), "n", false)
end

-- Runs `step` every `period_ms` until it returns true; gives up (and ends the run) after `limit_ms`.
local function poll(what, period_ms, limit_ms, step)
  local since = uv.hrtime()
  local function tick()
    local ok, done = pcall(step)
    if not ok then return fail(what .. ": " .. tostring(done)) end
    if done then return end
    if ms_since(since) > limit_ms then return fail("timed out: " .. what) end
    vim.defer_fn(tick, period_ms)
  end
  vim.defer_fn(tick, period_ms)
end

-- Typed one key at a time, as a typist's keystrokes (each a buffer change the client tracks).
local function type_text(text, then_do)
  local i = 0
  local function next_key()
    i = i + 1
    if i > #text then return then_do() end
    vim.api.nvim_feedkeys(text:sub(i, i), "n", false)
    vim.defer_fn(next_key, plan.keystroke_ms)
  end
  next_key()
end

-- Every textDocument/completion the client sends, timed from the request to the response in hand
-- (instrumentation only: the handler omnifunc gave is called unchanged).
local exchanges = {}
local function instrument(client)
  local request = client.request
  client.request = function(method, params, handler, bufnr)
    if method ~= "textDocument/completion" then return request(method, params, handler, bufnr) end
    local exchange = { sent = uv.hrtime(), position = params.position }
    table.insert(exchanges, exchange)
    return request(method, params, function(err, result, ctx, config)
      exchange.ms = ms_since(exchange.sent)
      exchange.err = err and tostring(err.message or err) or nil
      local items = result and (result.items or result) or {}
      exchange.items = {}
      for _, item in ipairs(items) do
        table.insert(exchange.items, { label = item.label, filterText = item.filterText,
                                       newText = item.textEdit and item.textEdit.newText or item.insertText,
                                       command = item.command and item.command.command or nil,
                                       arguments = item.command and item.command.arguments or nil })
      end
      return handler(err, result, ctx, config)
    end, bufnr)
  end
end

-- In insert mode at the cursor: <C-x><C-o>, then `decide(exchange, words)` once the answer is in and
-- omnifunc has had its turn (words: what the completion menu holds).
local function ask(decide)
  local before = #exchanges
  keys("<C-x><C-o>")
  poll("textDocument/completion answered", 10, plan.answer_ms, function()
    local exchange = exchanges[before + 1]
    if exchange == nil or exchange.ms == nil then return false end
    -- omnifunc's handler ran in the same callback: the menu (if any) is there now
    local words = {}
    for _, item in ipairs(vim.fn.complete_info({ "items" }).items) do table.insert(words, item.word) end
    exchange.menu = words
    exchange.menu_visible = vim.fn.pumvisible() == 1
    decide(exchange, words)
    return true
  end)
end

local function attach(client_id)
  vim.bo.omnifunc = "v:lua.vim.lsp.omnifunc"
  -- the typist's text goes in as typed: no indent of Neovim's own is added to it
  vim.bo.autoindent, vim.bo.smartindent, vim.bo.cindent, vim.bo.indentexpr = false, false, false, ""
  vim.lsp.buf_attach_client(0, client_id)
end

-- Enters insert mode at (line 0-based, column in characters), as `i`/`A` does.
local function insert_at(line, column)
  local text = vim.api.nvim_buf_get_lines(0, line, line + 1, false)[1] or ""
  local byte = vim.str_byteindex(text, column)
  if byte >= #text then
    vim.api.nvim_win_set_cursor(0, { line + 1, 0 })
    keys("A")
  else
    vim.api.nvim_win_set_cursor(0, { line + 1, byte })
    keys("i")
  end
end

local function run_replay(client_id)
  local replay = plan.replay
  vim.cmd("edit " .. vim.fn.fnameescape(replay.file))
  attach(client_id)
  insert_at(replay.line, replay.column)
  local pause = 0
  local function next_pause()
    pause = pause + 1
    if pause > #replay.chunks then
      keys("<Esc>")
      return vim.defer_fn(finish, 50)
    end
    type_text(replay.chunks[pause], function()
      ask(function(exchange, words)
        table.insert(results.replay, { typed = replay.chunks[pause], ms = exchange.ms, items = exchange.items,
                                       menu = words, err = exchange.err, position = exchange.position,
                                       line = vim.api.nvim_get_current_line() })
        if #words > 0 and pause == #replay.chunks then
          -- the last one is taken, to see what a multi-line item becomes in the buffer
          keys("<C-y>")
          return vim.defer_fn(function()
            local row = vim.api.nvim_win_get_cursor(0)[1]
            results.replay_accepted = vim.api.nvim_buf_get_lines(0, row - 1, row + 1, false)
            next_pause()
          end, 50)
        end
        -- the suggestion is not taken: <C-e> puts back what was typed
        if #words > 0 then keys("<C-e>") end
        vim.defer_fn(next_pause, 20)
      end)
    end)
  end
  next_pause()
end

local function run_main(client_id)
  vim.cmd("edit " .. vim.fn.fnameescape(plan.main.file))
  attach(client_id)
  insert_at(plan.main.line, plan.main.column)
  type_text(plan.main.typed, function()
    ask(function(exchange, words)
      results.main = { ms = exchange.ms, items = exchange.items, menu = words, err = exchange.err,
                       menu_visible = exchange.menu_visible, line_before = vim.api.nvim_get_current_line() }
      if #words == 0 then return fail("no completion item reached the menu") end
      -- <C-y> takes the item the menu holds (the first, already inserted), <Esc> ends the insert
      keys("<C-y>")
      vim.defer_fn(function()
        keys("<Esc>")
        vim.defer_fn(function()
          results.main.lines = vim.api.nvim_buf_get_lines(0, 0, -1, false)
          if plan.replay then run_replay(client_id) else finish() end
        end, 50)
      end, 50)
    end)
  end)
end

-- the replay's file opens over the edited one without saving it (a save would index it)
vim.o.hidden = true
-- The menu even for one item, nothing inserted until <C-y> takes it: the usual setting for LSP
-- completion. With the default ("menu,preview") a single item is inserted at once with no menu, and
-- <C-y> (no menu to confirm) would insert the character above the cursor instead.
vim.o.completeopt = "menu,menuone,noinsert"
vim.defer_fn(function() fail("the whole run took longer than " .. plan.limit_ms .. " ms") end, plan.limit_ms)

local client_id = vim.lsp.start_client({
  name = "ctxpress",
  cmd = plan.cmd,
  root_dir = plan.root,
  workspace_folders = { { uri = vim.uri_from_fname(plan.root), name = vim.fn.fnamemodify(plan.root, ":t") } },
  init_options = plan.init_options,
  on_exit = function(code, signal)
    table.insert(results.errors, ("ctxpress lsp exited (code %s, signal %s)"):format(code, signal))
  end,
})
if not client_id then return fail("vim.lsp.start_client failed") end

poll("the server initialized", 20, plan.answer_ms, function()
  local client = vim.lsp.get_client_by_id(client_id)
  if client == nil or not client.initialized then return false end
  local caps = client.server_capabilities or client.resolved_capabilities
  results.server = { name = client.name, completion = caps.completionProvider ~= nil,
                     inline = caps.inlineCompletionProvider ~= nil,
                     supports_completion = client.supports_method("textDocument/completion"),
                     offset_encoding = client.offset_encoding }
  -- Neovim sends a request only to a server whose capabilities offer it
  if not results.server.supports_completion then
    fail("the server does not offer textDocument/completion (no completionProvider)")
    return true
  end
  instrument(client)
  run_main(client_id)
  return true
end)
