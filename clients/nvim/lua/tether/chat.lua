-- The chat buffer: one scratch buffer (filetype markdown) showing the session in view, redrawn
-- whole from the session's state, at most once per batch of messages.

local render = require("tether.render")

local M = { buf = nil, scheduled = false }

function M.buffer()
  if M.buf == nil or not vim.api.nvim_buf_is_valid(M.buf) then
    M.buf = vim.api.nvim_create_buf(true, true)
    vim.api.nvim_buf_set_name(M.buf, "tether://chat")
    vim.bo[M.buf].filetype = "markdown"
    vim.bo[M.buf].bufhidden = "hide"
    vim.bo[M.buf].modifiable = false
  end
  return M.buf
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
    end
  end
end

return M
