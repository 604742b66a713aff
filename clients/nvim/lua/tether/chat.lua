-- The chat buffer: one scratch buffer (filetype markdown) showing the session in view, redrawn
-- whole from the session's state, at most once per batch of messages; and the prompt area, a
-- small buffer under it to write the next message in.
--
-- Keys (buffer-local, normal mode). Chat: `q` closes its window, `ga` / `gA` / `gr` answer the
-- oldest pending approval (allow once, allow always, deny), `i` / `<CR>` open the prompt area.
-- Prompt area: `<CR>` (normal) or `<C-s>` (normal and insert) sends it, `q` closes it.

local render = require("tether.render")

local M = { buf = nil, prompt_buf = nil, origin = nil, scheduled = false }

local function tether()
  return require("tether")
end

local function map(buf, modes, lhs, fn, desc)
  vim.keymap.set(modes, lhs, fn, { buffer = buf, nowait = true, silent = true, desc = "tether: " .. desc })
end

--- Close window `win`; when it is the last one, show another buffer in it instead.
local function close(win)
  if #vim.api.nvim_tabpage_list_wins(0) > 1 or #vim.api.nvim_list_tabpages() > 1 then
    vim.api.nvim_win_close(win, false)
  else
    pcall(vim.cmd, "buffer #")
  end
end

--- The buffer of the window the person came from (`wincmd p`), when it shows a file: its
--- file and cursor go with a message sent from the prompt area.
local function previous_file_buffer()
  local win = vim.fn.win_getid(vim.fn.winnr("#"))
  if win == 0 then
    return nil
  end
  local buf = vim.api.nvim_win_get_buf(win)
  return vim.bo[buf].buftype == "" and buf or nil
end

function M.buffer()
  if M.buf == nil or not vim.api.nvim_buf_is_valid(M.buf) then
    M.buf = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(M.buf, "tether://chat")
    vim.bo[M.buf].filetype = "markdown"
    vim.bo[M.buf].bufhidden = "hide"
    vim.bo[M.buf].modifiable = false
    map(M.buf, "n", "q", function()
      close(vim.api.nvim_get_current_win())
    end, "close the chat window")
    map(M.buf, "n", "ga", function()
      tether().answer("allow", false)
    end, "allow the pending approval once")
    map(M.buf, "n", "gA", function()
      tether().answer("allow", true)
    end, "allow the pending approval always")
    map(M.buf, "n", "gr", function()
      tether().answer("deny", false)
    end, "deny the pending approval")
    map(M.buf, "n", "i", M.open_prompt, "write a message")
    map(M.buf, "n", "<CR>", M.open_prompt, "write a message")
  end
  return M.buf
end

local function send_prompt()
  local buf = M.prompt_buf
  local text = vim.trim(table.concat(vim.api.nvim_buf_get_lines(buf, 0, -1, false), "\n"))
  if text == "" then
    return
  end
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, {})
  vim.cmd("stopinsert")
  tether().prompt(text, nil, nil, M.origin)
end

function M.prompt_buffer()
  if M.prompt_buf == nil or not vim.api.nvim_buf_is_valid(M.prompt_buf) then
    local buf = vim.api.nvim_create_buf(false, true)
    M.prompt_buf = buf
    vim.api.nvim_buf_set_name(buf, "tether://prompt")
    vim.bo[buf].filetype = "markdown"
    vim.bo[buf].bufhidden = "hide"
    map(buf, "n", "<CR>", send_prompt, "send the message")
    map(buf, { "n", "i" }, "<C-s>", send_prompt, "send the message")
    map(buf, "n", "q", function()
      close(vim.api.nvim_get_current_win())
    end, "close the prompt area")
  end
  return M.prompt_buf
end

--- Open the prompt area under the chat window (or go to it), in insert mode.
function M.open_prompt()
  local from = vim.api.nvim_get_current_win()
  if vim.api.nvim_win_get_buf(from) == M.buf then
    M.origin = previous_file_buffer()
  elseif vim.bo[vim.api.nvim_win_get_buf(from)].buftype == "" then
    M.origin = vim.api.nvim_win_get_buf(from)
  end
  local buf = M.prompt_buffer()
  local shown = vim.fn.win_findbuf(buf)
  if #shown > 0 then
    vim.api.nvim_set_current_win(shown[1])
  else
    local chat = vim.fn.win_findbuf(M.buffer())[1]
    if chat ~= nil then
      vim.api.nvim_set_current_win(chat)
    end
    vim.cmd("belowright 6split")
    vim.api.nvim_win_set_buf(0, buf)
    vim.wo.winfixheight = true
  end
  vim.cmd("startinsert")
end

--- Show the chat buffer in a window (`split`: "vsplit", "split", "tab" or "none").
function M.show(split)
  local buf = M.buffer()
  if split == "none" or #vim.fn.win_findbuf(buf) > 0 then
    return
  end
  local current = vim.api.nvim_get_current_win()
  if split == "tab" then
    vim.cmd("tab sbuffer " .. buf)
  else
    vim.cmd((split == "split" and "botright sbuffer " or "botright vertical sbuffer ") .. buf)
  end
  vim.wo.wrap = true
  vim.wo.linebreak = true
  vim.api.nvim_set_current_win(current)
end

function M.lines()
  return vim.api.nvim_buf_get_lines(M.buffer(), 0, -1, false)
end

--- Redraw from `get()` ({state, status} or nil) once the messages being handled are done.
function M.schedule(get)
  if M.scheduled then
    return
  end
  M.scheduled = true
  vim.schedule(function()
    M.scheduled = false
    local st, status = get()
    if st ~= nil then
      M.draw(st, status)
    end
  end)
end

function M.draw(st, status)
  local buf = M.buffer()
  local lines = render.lines(st, status)
  local followed = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    -- Windows at the end keep following the stream; others keep their place.
    followed[win] = vim.api.nvim_win_get_cursor(win)[1] >= vim.api.nvim_buf_line_count(buf)
  end
  vim.bo[buf].modifiable = true
  vim.api.nvim_buf_set_lines(buf, 0, -1, false, lines)
  vim.bo[buf].modifiable = false
  vim.bo[buf].modified = false
  for win, follow in pairs(followed) do
    if follow then
      vim.api.nvim_win_set_cursor(win, { #lines, 0 })
      -- The last line at the window's bottom, the window full of what came before it.
      vim.api.nvim_win_call(win, function()
        vim.cmd("normal! zb")
      end)
    end
  end
end

return M
