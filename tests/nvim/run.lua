-- Runs one scenario of tests/nvim/scenarios.lua in headless Neovim against the real daemon,
-- then writes what it saw, as JSON, to $TETHER_NVIM_RESULT and quits (exit 1 on an error,
-- whose message and traceback are in the result's `error`).
--
-- Waits are `vim.wait` on a condition: the event loop runs (the bridge's output is handled)
-- until the condition holds, never a fixed sleep.

local result_path = assert(os.getenv("TETHER_NVIM_RESULT"), "TETHER_NVIM_RESULT is not set")
vim.cmd("runtime! plugin/tether.lua")
local tether = require("tether")
tether.setup({
  cmd = vim.json.decode(assert(os.getenv("TETHER_NVIM_CMD"))),
  workspace = os.getenv("TETHER_NVIM_WORKSPACE"),
})

local t = { result = { selects = {} }, workspace = os.getenv("TETHER_NVIM_WORKSPACE") }

function t.wait(condition, what, timeout)
  if not vim.wait(timeout or 20000, condition, 5) then
    error("timed out waiting: " .. what, 2)
  end
end

--- Run a plugin function that takes a callback last; wait for it and return its result.
function t.call(fn, ...)
  local finished, failure, value = false, nil, nil
  local args = { ... }
  table.insert(args, function(err, result)
    finished, failure, value = true, err, result
  end)
  fn(unpack(args))
  t.wait(function()
    return finished
  end, "a callback")
  if failure ~= nil then
    error("tether said: " .. vim.inspect(failure), 2)
  end
  return value
end

--- Answer every vim.ui.select with the item `pick(items, opts)` returns, and record each.
function t.answer_selects(pick)
  vim.ui.select = function(items, opts, on_choice)
    local labels = {}
    for _, item in ipairs(items) do
      table.insert(labels, opts.format_item and opts.format_item(item) or tostring(item))
    end
    table.insert(t.result.selects, { prompt = opts.prompt, items = labels })
    on_choice(pick(items, opts))
  end
end

function t.chat()
  return require("tether.chat").lines()
end

function t.state()
  return tether.status().state
end

--- Wait until the session in view has `count` turns, all ended.
function t.wait_turns(count)
  t.wait(function()
    local st = t.state()
    if st == nil or #st.turns < count then
      return false
    end
    for _, turn in ipairs(st.turns) do
      if turn.status == "running" then
        return false
      end
    end
    return true
  end, count .. " ended turns")
end

local scenarios = dofile(vim.fs.dirname(debug.getinfo(1, "S").source:sub(2)) .. "/scenarios.lua")
local name = assert(os.getenv("TETHER_NVIM_SCENARIO"))
local ok, err = xpcall(function()
  assert(scenarios[name], "no scenario " .. name)(t, tether)
end, debug.traceback)
if not ok then
  t.result.error = err
end
local st = t.state()
t.result.chat = t.chat()
t.result.stats = st and st.stats or nil
t.result.turns = st and st.turns or nil
t.result.status = { session = tether.status().session, attached = tether.status().attached }
local file = assert(io.open(result_path, "w"))
file:write(vim.json.encode(t.result))
file:close()
tether.stop()
vim.cmd(ok and "qall!" or "cquit! 1")
