-- tether for Neovim: a chat buffer on the workspace daemon's session, through `tether bridge`.
--
-- One bridge job per Neovim, started by the first command. The session in view is attached as
-- a controller; its state (and cursor) is kept after `:TetherDetach`, so attaching again asks
-- only for what was missed. After the connection is lost (`bridge/disconnected`) nothing is
-- retried by itself: the next command reconnects, initializes and re-attaches with the cursor.

local approvals = require("tether.approvals")
local bridge = require("tether.bridge")
local chat = require("tether.chat")
local editor = require("tether.editor")
local render = require("tether.render")
local State = require("tether.state")

local M = {}

M.config = {
  cmd = { "tether" }, -- the tether command (a string or a list); a venv's: { "/path/.venv/bin/tether" }
  workspace = nil, -- default: the git root above the current directory, as the CLI finds it
  split = "vsplit", -- how the chat buffer opens: "vsplit", "split", "tab" or "none"
  prompt_approvals = true, -- ask with vim.ui.select as soon as an approval is pending
  client_name = "tether.nvim",
}

local PROVIDER_VARIABLES = {
  provider = "TETHER_PROVIDER",
  baseUrl = "TETHER_BASE_URL",
  model = "TETHER_MODEL",
  apiKey = "TETHER_API_KEY",
  openaiApiKey = "OPENAI_API_KEY",
  anthropicApiKey = "ANTHROPIC_API_KEY",
}

-- The connection: conn (the bridge job), ready (initialized), workspace (the daemon's root),
-- waiting (callbacks of commands waiting for `ready`).
local link = { conn = nil, ready = false, connecting = false, waiting = {}, workspace = nil, status = "not connected" }
-- Sessions: states by id (kept after a detach), the one in view and whether it is attached.
local sessions = { states = {}, current = nil, attached = false }

local function notify(message, level)
  vim.notify("tether: " .. message, level or vim.log.levels.INFO)
end

local function fail(err)
  notify(err.message or vim.inspect(err), vim.log.levels.ERROR)
end

local function current_state()
  if sessions.current == nil then
    return nil
  end
  return sessions.states[sessions.current], sessions.attached and "attached" or link.status
end

local function redraw()
  chat.schedule(current_state)
end

function M.setup(opts)
  M.config = vim.tbl_deep_extend("force", M.config, opts or {})
  if type(M.config.cmd) == "string" then
    M.config.cmd = { M.config.cmd }
  end
end

local function provider_env()
  local env = vim.empty_dict()
  for field, name in pairs(PROVIDER_VARIABLES) do
    local value = vim.env[name]
    if value ~= nil and value ~= "" then
      env[field] = value
    end
  end
  return env
end

-- ------------------------------------------------------------------ events

local function reload_after(item)
  if item.type == "tool_call" and item.status == "completed" and (item.diff or "") ~= "" then
    local ok, args = pcall(vim.json.decode, item.arguments or "")
    if ok and type(args) == "table" and type(args.path) == "string" then
      editor.reload({ args.path }, link.workspace)
    end
  elseif item.type == "turn_summary" then
    local paths = {}
    for _, change in ipairs(item.filesChanged or {}) do
      table.insert(paths, change.path)
    end
    editor.reload(paths, link.workspace)
  end
end

local function on_session_event(params)
  local st = sessions.states[params.sessionId]
  if st == nil or params.sessionId ~= sessions.current or not sessions.attached then
    return
  end
  local event = State.apply(st, params)
  if event == nil then
    return
  end
  if event.type == "approval_requested" and M.config.prompt_approvals then
    approvals.enqueue(st.id, event.approval)
  elseif event.type == "approval_resolved" then
    approvals.resolved(event.approvalId)
  elseif event.type == "item_completed" then
    reload_after(event.item)
  elseif event.type == "input_dropped" then
    for _, text in ipairs(event.dropped) do
      notify(("not sent, %s: %s"):format(event.reason, render.one_line(text, 80)), vim.log.levels.WARN)
    end
  end
  redraw()
end

local attach_current

local function on_notification(method, params)
  if method == "session/event" then
    on_session_event(params)
  elseif method == "session/resync" and params.sessionId == sessions.current then
    attach_current(function() end)
  elseif method == "session/deleted" and params.sessionId == sessions.current then
    sessions.attached = false
    notify("the session was deleted")
    redraw()
  elseif method == "bridge/disconnected" then
    link.ready = false
    link.status = "disconnected"
    sessions.attached = false
    notify(("disconnected from the daemon (%s); the next :Tether command reconnects"):format(params.reason))
    redraw()
  elseif method == "daemon/event" then
    notify(params.message or params.kind, vim.log.levels.WARN)
  end
end

local function on_exit(code, stderr)
  link.conn, link.ready, link.connecting = nil, false, false
  link.status = "not connected"
  sessions.attached = false
  local waiting = link.waiting
  link.waiting = {}
  local message = ("tether bridge exited (code %d)%s"):format(code, stderr ~= "" and (": " .. vim.trim(stderr)) or "")
  for _, cb in ipairs(waiting) do
    cb({ message = message })
  end
  if code ~= 0 then
    notify(message, vim.log.levels.ERROR)
  end
  redraw()
end

-- ------------------------------------------------------------------ the connection

local function request(method, params, cb)
  link.conn:request(method, params, cb)
end

local function initialized(err, result)
  link.connecting = false
  if err == nil then
    link.ready = true
    link.status = "connected"
    link.workspace = result.workspace
  end
  local waiting = link.waiting
  link.waiting = {}
  for _, cb in ipairs(waiting) do
    cb(err)
  end
end

local function initialize()
  request("initialize", {
    clientName = M.config.client_name,
    clientVersion = "0",
    protocolVersion = 1,
    providerEnv = provider_env(),
  }, initialized)
end

--- Call `cb(err)` once the bridge runs and its connection is initialized: start the bridge
--- (which starts the daemon when none runs), or reconnect after a lost connection and attach
--- the session in view again with its cursor.
local function connected(cb)
  if link.ready then
    return cb(nil)
  end
  table.insert(link.waiting, cb)
  if link.connecting then
    return
  end
  link.connecting = true
  if link.conn == nil then
    link.conn = bridge.new({
      cmd = M.config.cmd,
      workspace = M.config.workspace,
      cwd = vim.fn.getcwd(),
      on_notification = on_notification,
      on_exit = on_exit,
    })
    local problem = link.conn:start()
    if problem ~= nil then
      link.conn = nil
      return initialized({ message = problem })
    end
    return initialize()
  end
  request("bridge/reconnect", nil, function(err)
    if err ~= nil then
      return initialized(err)
    end
    initialize()
  end)
end

--- Run `fn` once the bridge is connected and initialized; a failure to connect goes to `cb`.
local function when_connected(cb, fn)
  connected(function(err)
    if err ~= nil then
      return cb(err)
    end
    fn()
  end)
end

-- ------------------------------------------------------------------ sessions

--- Attach the session in view (again), with its cursor when its state is kept.
function attach_current(cb)
  local id = sessions.current
  local st = sessions.states[id]
  local params = { sessionId = id, role = "controller" }
  if st ~= nil and st.epoch ~= nil then
    params.after = { epoch = st.epoch, seq = st.seq }
  end
  request("session/attach", params, function(err, result)
    if err ~= nil then
      return cb(err)
    end
    if result.mode == "snapshot" then
      st = State.new(id)
      State.load_snapshot(st, result.snapshot)
      sessions.states[id] = st
    end
    st.epoch = result.epoch
    sessions.attached = true
    st.stats.attach_modes = st.stats.attach_modes or {}
    table.insert(st.stats.attach_modes, result.mode)
    if M.config.prompt_approvals then
      for _, approval in ipairs(st.approvals) do
        approvals.enqueue(id, approval)
      end
    end
    redraw()
    cb(nil)
  end)
end

local function show(id, cb)
  when_connected(cb, function()
    if sessions.current ~= id then
      if sessions.current ~= nil and sessions.attached then
        request("session/detach", { sessionId = sessions.current }, function() end)
      end
      approvals.clear()
      sessions.current, sessions.attached = id, false
    end
    chat.show(M.config.split)
    if sessions.attached then
      return cb(nil)
    end
    attach_current(cb)
  end)
end

--- Run `fn(id)` with the session a command acts on, attached; with `create`, a new one when none
--- is in view. A failure (no session, no connection) goes to `cb(err)`.
local function with_session(create, cb, fn)
  local function shown(id)
    show(id, function(err)
      if err ~= nil then
        return cb(err)
      end
      fn(id)
    end)
  end
  when_connected(cb, function()
    if sessions.current ~= nil then
      if sessions.attached then
        return fn(sessions.current)
      end
      return shown(sessions.current)
    end
    if not create then
      return cb({ message = "no session in view: :Tether {prompt}, :TetherSessions or :TetherAttach" })
    end
    request("session/create", vim.empty_dict(), function(err, result)
      if err ~= nil then
        return cb(err)
      end
      shown(result.session.id)
    end)
  end)
end

local function resolve(ref, cb)
  request("session/list", nil, function(err, result)
    if err ~= nil then
      return cb(err)
    end
    local list = result.sessions or {}
    if #list == 0 then
      return cb({ message = "this workspace has no sessions yet; start one with :Tether {prompt}" })
    end
    if ref == nil or ref == "" then
      return cb(nil, list[1].id)
    end
    local matches = {}
    for _, info in ipairs(list) do
      if info.id == ref then
        return cb(nil, info.id)
      end
      if info.id:sub(1, #ref) == ref then
        table.insert(matches, info.id)
      end
    end
    if #matches ~= 1 then
      return cb({ message = ("%s matches %d sessions"):format(ref, #matches) })
    end
    cb(nil, matches[1])
  end)
end

-- ------------------------------------------------------------------ commands

local function done(err)
  if err ~= nil then
    fail(err)
  end
end

--- `:Tether {prompt}`: send `text` to the session in view (a new one when none is), with the
--- current file (or `buf`'s) and cursor, and with `range` ({first, last}) its lines as the
--- selection.
function M.prompt(text, range, cb, buf)
  cb = cb or done
  if text == nil or vim.trim(text) == "" then
    return vim.ui.input({ prompt = "tether: " }, function(input)
      if input ~= nil and vim.trim(input) ~= "" then
        M.prompt(input, range, cb, buf)
      end
    end)
  end
  if buf == nil or not vim.api.nvim_buf_is_valid(buf) then
    buf = vim.api.nvim_get_current_buf()
  end
  with_session(true, cb, function(id)
    local params = { sessionId = id, text = text }
    params.editor = editor.context(buf, range, link.workspace)
    request("turn/start", params, function(e, result)
      if e ~= nil then
        return cb(e)
      end
      for _, problem in ipairs(result.problems or {}) do
        notify(problem, vim.log.levels.WARN)
      end
      if result.queued then
        notify("a turn is running: your message joins it at its next step")
      end
      cb(nil, result)
    end)
  end)
end

function M.attach(ref, cb)
  cb = cb or done
  when_connected(cb, function()
    resolve(ref, function(e, id)
      if e ~= nil then
        return cb(e)
      end
      show(id, cb)
    end)
  end)
end

function M.detach(cb)
  cb = cb or done
  if sessions.current == nil or not sessions.attached then
    return cb({ message = "no session is attached" })
  end
  request("session/detach", { sessionId = sessions.current }, function(err)
    sessions.attached = false
    approvals.clear()
    redraw()
    cb(err)
  end)
end

local RUNNING = { running = true, awaiting_approval = true }

function M.sessions(cb)
  cb = cb or done
  when_connected(cb, function()
    request("session/list", nil, function(e, result)
      if e ~= nil then
        return cb(e)
      end
      vim.ui.select(result.sessions or {}, {
        prompt = "tether sessions (● running)",
        kind = "tether.session",
        format_item = function(info)
          -- The wire omits a field at its default (docs/protocol.md): idle, untitled.
          local state = info.state or "idle"
          local mark = RUNNING[state] and "●" or " "
          local here = info.id == sessions.current and " (in view)" or ""
          local title = (info.title or "") ~= "" and info.title or "untitled"
          return ("%s %s  %s  [%s]%s"):format(mark, info.id, render.one_line(title, 60), state, here)
        end,
      }, function(choice)
        if choice ~= nil then
          vim.schedule(function()
            show(choice.id, cb)
          end)
        else
          cb(nil)
        end
      end)
    end)
  end)
end

function M.cancel(cb)
  cb = cb or done
  with_session(false, cb, function(id)
    request("turn/cancel", { sessionId = id }, cb)
  end)
end

function M.undo(cb)
  cb = cb or done
  with_session(false, cb, function(id)
    local function finish(e, result)
      if e ~= nil then
        return cb(e)
      end
      local changed = vim.list_extend(vim.list_extend({}, result.restored or {}), result.removed or {})
      editor.reload(changed, link.workspace)
      notify(#changed > 0 and ("undone: " .. table.concat(changed, ", ")) or (result.note or "nothing to undo"))
      cb(nil, result)
    end
    request("session/undo", { sessionId = id }, function(e, result)
      if e ~= nil or result.applied or #(result.conflicts or {}) == 0 then
        return finish(e, result)
      end
      vim.ui.select({ "Undo anyway", "Keep them" }, {
        prompt = "tether: changed since the turn: " .. table.concat(result.conflicts, ", "),
      }, function(choice)
        vim.schedule(function()
          if choice ~= "Undo anyway" then
            return cb(nil, result)
          end
          request("session/undo", { sessionId = id, turnId = result.turnId, force = true }, finish)
        end)
      end)
    end)
  end)
end

--- Answer an approval of session `session_id`; says so when another client answered first.
function M.respond(session_id, approval_id, decision, scope, cb)
  cb = cb or done
  request("approval/respond", {
    sessionId = session_id,
    approvalId = approval_id,
    decision = decision,
    scope = scope or "once",
  }, function(err, result)
    if err ~= nil and err.code == approvals.ALREADY_RESOLVED then
      local by = err.data and err.data.by or "another client"
      -- A client names itself: its name is shown as any relayed text is.
      notify(("already answered by %s"):format(render.one_line(by, 80)))
      return cb(nil, result)
    end
    cb(err, result)
  end)
end

approvals.respond = function(session_id, approval_id, decision, scope)
  M.respond(session_id, approval_id, decision, scope)
end

--- `:TetherApprove[!]` / `:TetherDeny`: answer the oldest pending approval (`!`: always).
function M.answer(decision, always, cb)
  cb = cb or done
  with_session(false, cb, function(id)
    local pending = sessions.states[id].approvals[1]
    if pending == nil then
      return cb({ message = "no approval is pending" })
    end
    approvals.resolved(pending.id)
    M.respond(id, pending.id, decision, always and "always" or "once", cb)
  end)
end

--- What the plugin knows, for `:checkhealth tether` and tests: connection, session, counters.
function M.status()
  local st = sessions.current and sessions.states[sessions.current] or nil
  return {
    connection = link.status,
    ready = link.ready,
    workspace = link.workspace,
    session = sessions.current,
    attached = sessions.attached,
    state = st,
  }
end

--- Stop the bridge (on exit): it closes the websocket cleanly; turns go on in the daemon.
function M.stop()
  if link.conn ~= nil then
    link.conn:stop()
  end
end

return M
