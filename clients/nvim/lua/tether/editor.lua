-- The editor's side of a turn: the `editor` context sent with a prompt, and reloading the
-- buffers of files the agent (or an undo) changed on disk.

local M = {}

M.SELECTION_CAP = 6000 -- the daemon's cap on a selection; cut here the same way, head and tail

--- `path` absolute, with symlinks resolved when it exists (the daemon names files so).
local function real(path)
  local absolute = vim.fs.normalize(vim.fn.fnamemodify(path, ":p"))
  return vim.uv.fs_realpath(absolute) or absolute
end

local function is_file_buffer(buf)
  return vim.api.nvim_buf_is_loaded(buf)
    and vim.bo[buf].buftype == ""
    and vim.api.nvim_buf_get_name(buf) ~= ""
end

--- `path` relative to `root` when inside it (what the model sees), else absolute.
function M.relative(root, path)
  path = real(path)
  if root ~= nil then
    local prefix = vim.fs.normalize(root):gsub("/$", "") .. "/"
    if path:sub(1, #prefix) == prefix then
      return path:sub(#prefix + 1)
    end
  end
  return path
end

function M.cap_selection(text)
  if #text <= M.SELECTION_CAP then
    return text
  end
  local marker = "\n[… characters cut here …]\n"
  local keep = M.SELECTION_CAP - #marker
  local head = math.ceil(keep / 2)
  return text:sub(1, head) .. marker .. text:sub(#text - (keep - head) + 1)
end

--- The `editor` context of a prompt given in buffer `buf`: its file and cursor, with `range`
--- ({first, last}, 1-based lines) its lines as the selection, and the other files open. Nil
--- when `buf` is not a file (the chat buffer, a terminal).
function M.context(buf, range, root)
  if not is_file_buffer(buf) then
    return nil
  end
  local name = vim.api.nvim_buf_get_name(buf)
  local context = { openFile = M.relative(root, name) }
  if range ~= nil then
    context.cursor = { line = range[1], column = 1 }
    local lines = vim.api.nvim_buf_get_lines(buf, range[1] - 1, range[2], false)
    context.selection = M.cap_selection(table.concat(lines, "\n"))
  elseif buf == vim.api.nvim_get_current_buf() then
    local pos = vim.api.nvim_win_get_cursor(0)
    context.cursor = { line = pos[1], column = pos[2] + 1 }
  end
  local others = {}
  for _, other in ipairs(vim.api.nvim_list_bufs()) do
    if other ~= buf and vim.bo[other].buflisted and is_file_buffer(other) and #others < 20 then
      table.insert(others, M.relative(root, vim.api.nvim_buf_get_name(other)))
    end
  end
  if #others > 0 then
    context.openFiles = others
  end
  return context
end

--- Reload the unmodified buffers of `paths` (relative to `root`, or absolute) from disk; a
--- buffer with unsaved changes is left alone and named in a warning.
function M.reload(paths, root)
  local wanted = {}
  for _, path in ipairs(paths) do
    local absolute = path:sub(1, 1) == "/" and path or (root .. "/" .. path)
    wanted[real(absolute)] = true
  end
  local kept = {}
  for _, buf in ipairs(vim.api.nvim_list_bufs()) do
    if is_file_buffer(buf) then
      local name = real(vim.api.nvim_buf_get_name(buf))
      if wanted[name] then
        if vim.bo[buf].modified then
          table.insert(kept, vim.fn.fnamemodify(name, ":~:."))
        else
          M.reload_buffer(buf)
        end
      end
    end
  end
  if #kept > 0 then
    vim.notify(
      "tether: changed on disk, not reloaded (unsaved changes here): " .. table.concat(kept, ", "),
      vim.log.levels.WARN
    )
  end
end

function M.reload_buffer(buf)
  local views = {}
  for _, win in ipairs(vim.fn.win_findbuf(buf)) do
    views[win] = vim.api.nvim_win_call(win, vim.fn.winsaveview)
  end
  vim.api.nvim_buf_call(buf, function()
    vim.cmd("silent! edit")
  end)
  for win, view in pairs(views) do
    vim.api.nvim_win_call(win, function()
      vim.fn.winrestview(view)
    end)
  end
end

return M
