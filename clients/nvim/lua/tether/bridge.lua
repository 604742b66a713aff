-- The connection to the daemon: a `tether bridge` job whose stdin and stdout carry one
-- JSON-RPC message a line (docs/bridge.md).
--
-- Rules:
--   * every request gets exactly one callback, `cb(err, result)`: the daemon's answer, the
--     bridge's (-32040 when it has no connection, or lost it before the answer), or, when the
--     bridge process itself ends, a local error with code `M.EXITED`;
--   * messages are handled on the main loop (stdout chunks are scheduled in order), so a
--     handler may call any Neovim API;
--   * the bridge never reconnects by itself: after `bridge/disconnected` the owner calls
--     `reconnect`, then initializes again.

local M = {}

M.EXITED = -32099 -- the bridge process ended; not a code the bridge or the daemon sends
M.DISCONNECTED = -32040

local Conn = {}
Conn.__index = Conn

---@param opts { cmd: string[], cwd: string?, workspace: string?, on_notification: fun(method: string, params: table), on_exit: fun(code: integer, stderr: string) }
function M.new(opts)
  return setmetatable({ opts = opts, next_id = 0, callbacks = {}, pending = "", proc = nil }, Conn)
end

--- Start the bridge; returns nil, or a message saying why it could not be started.
function Conn:start()
  local cmd = vim.list_extend(vim.deepcopy(self.opts.cmd), { "bridge" })
  if self.opts.workspace then
    vim.list_extend(cmd, { "--workspace", self.opts.workspace })
  end
  local stderr = {}
  local ok, proc = pcall(vim.system, cmd, {
    cwd = self.opts.cwd,
    stdin = true,
    stdout = function(_, data)
      if data then
        vim.schedule(function()
          self:_feed(data)
        end)
      end
    end,
    stderr = function(_, data)
      if data then
        table.insert(stderr, data)
      end
    end,
  }, function(out)
    vim.schedule(function()
      self:_exited(out.code, table.concat(stderr))
    end)
  end)
  if not ok then
    return ("cannot run %s: %s"):format(table.concat(cmd, " "), proc)
  end
  self.proc = proc
  return nil
end

function Conn:running()
  return self.proc ~= nil
end

--- Send a request; `cb(err, result)` is called once, on the main loop.
function Conn:request(method, params, cb)
  if self.proc == nil then
    vim.schedule(function()
      cb({ code = M.EXITED, message = "tether bridge is not running" }, nil)
    end)
    return
  end
  self.next_id = self.next_id + 1
  local id = "n" .. self.next_id
  self.callbacks[id] = cb
  local message = { jsonrpc = "2.0", id = id, method = method, params = params or vim.empty_dict() }
  self.proc:write(vim.json.encode(message) .. "\n")
end

--- Close stdin: the bridge relays the answers still due, closes the websocket and exits.
function Conn:stop()
  if self.proc ~= nil then
    self.proc:write(nil)
  end
end

function Conn:_feed(data)
  local text = self.pending .. data
  local start = 1
  while true do
    local stop = text:find("\n", start, true)
    if stop == nil then
      break
    end
    local line = text:sub(start, stop - 1)
    start = stop + 1
    if line ~= "" then
      self:_handle(line)
    end
  end
  self.pending = text:sub(start)
end

function Conn:_handle(line)
  local ok, message = pcall(vim.json.decode, line, { luanil = { object = true, array = true } })
  if not ok or type(message) ~= "table" then
    return -- the bridge writes only JSON; anything else is not ours to read
  end
  if message.method ~= nil then
    if message.id == nil then
      self.opts.on_notification(message.method, message.params or {})
    end
    return
  end
  local cb = message.id ~= nil and self.callbacks[message.id] or nil
  if cb == nil then
    if message.error ~= nil then
      vim.notify("tether: " .. tostring(message.error.message), vim.log.levels.WARN)
    end
    return
  end
  self.callbacks[message.id] = nil
  cb(message.error, message.result)
end

function Conn:_exited(code, stderr)
  self.proc = nil
  local callbacks = self.callbacks
  self.callbacks = {}
  for _, cb in pairs(callbacks) do
    cb({ code = M.EXITED, message = "tether bridge exited" }, nil)
  end
  self.opts.on_exit(code, stderr)
end

return M
