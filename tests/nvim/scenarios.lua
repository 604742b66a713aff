-- The scenarios tests/e2e/test_nvim.py runs (see run.lua for `t`). Each drives the plugin as a
-- person would, through its commands, and leaves what it saw in `t.result`.

local S = {}

--- A prompt on two selected lines of a file streams into the chat buffer.
function S.stream(t, tether)
  vim.cmd("edit " .. t.workspace .. "/src/app.py")
  vim.cmd("edit " .. t.workspace .. "/README.md")
  vim.cmd("buffer " .. vim.fn.bufnr(t.workspace .. "/src/app.py"))
  vim.cmd("1,2Tether explain this")
  -- The answer comes in 4 pieces 60 ms apart: the buffer shows its start while it streams.
  t.wait(function()
    return vim.tbl_contains(t.chat(), "It greets")
  end, "the start of the answer in the buffer")
  t.result.while_streaming = t.chat()
  t.result.running_then = require("tether.state").running_turn(t.state()) ~= nil
  t.wait_turns(1)
  t.result.chat_window = #vim.fn.win_findbuf(require("tether.chat").buffer())
  vim.cmd("checkhealth tether")
  t.result.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
end

--- Attach to a session whose turn waits for an approval; allow it from the picker.
function S.approve(t, tether)
  t.answer_selects(function(items)
    return items[1] -- "Allow once"
  end)
  vim.cmd("TetherAttach " .. os.getenv("TETHER_NVIM_SESSION"))
  t.wait(function()
    return #t.result.selects > 0
  end, "the approval picker")
  t.result.chat_asking = t.chat()
  t.wait_turns(1)
end

--- A turn, :TetherDetach, a turn run meanwhile by the CLI, :TetherAttach: each shown once.
function S.reattach(t, tether)
  vim.cmd("Tether first")
  t.wait_turns(1)
  vim.cmd("TetherDetach")
  t.wait(function()
    return not tether.status().attached
  end, "detached")
  local session = tether.status().session
  local cmd = vim.list_extend(vim.deepcopy(tether.config.cmd), { "run", "-s", session, "second" })
  local done = vim.system(cmd, { cwd = t.workspace, text = true }):wait(30000)
  t.result.cli = { code = done.code, stdout = done.stdout, stderr = done.stderr }
  t.result.chat_detached = t.chat()
  vim.cmd("TetherAttach " .. session)
  t.wait_turns(2)
end

--- An open buffer follows the agent's edit, and the undo of its turn.
function S.reload(t, tether)
  vim.cmd("edit " .. t.workspace .. "/" .. os.getenv("TETHER_NVIM_FILE"))
  local buf = vim.api.nvim_get_current_buf()
  t.result.before = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  vim.cmd("Tether say howdy")
  t.wait(function()
    return vim.api.nvim_buf_get_lines(buf, 1, 2, false)[1]:find("howdy") ~= nil
  end, "the buffer reloaded after the edit")
  t.result.edited = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  t.wait_turns(1)
  vim.cmd("TetherUndo")
  t.wait(function()
    return vim.api.nvim_buf_get_lines(buf, 1, 2, false)[1]:find("hello") ~= nil
  end, "the buffer reloaded after the undo")
  t.result.undone = vim.api.nvim_buf_get_lines(buf, 0, -1, false)
  t.result.modified = vim.bo[buf].modified
end

--- No daemon runs: the first command starts one. It stops; the next command reconnects
--- (starting another) and attaches again with the kept cursor.
function S.restart(t, tether)
  vim.cmd("Tether first")
  t.wait_turns(1)
  local stop = vim.list_extend(vim.deepcopy(tether.config.cmd), { "daemon", "stop", "-w", t.workspace })
  t.result.stop = vim.system(stop, { text = true }):wait(30000).code
  t.wait(function()
    return tether.status().connection == "disconnected"
  end, "bridge/disconnected")
  t.result.chat_disconnected = t.chat()
  vim.cmd("Tether second")
  t.wait_turns(2)
  t.result.connection = tether.status().connection
end

--- Attach to a session whose turn ran elsewhere: the chat window shows a page that ends with
--- the turn's last line.
function S.view(t, tether)
  vim.cmd("TetherAttach " .. os.getenv("TETHER_NVIM_SESSION"))
  t.wait_turns(1)
  t.wait(function()
    return #t.chat() > 60
  end, "the turn drawn")
  vim.cmd("redraw")
  local win = vim.fn.win_findbuf(require("tether.chat").buffer())[1]
  t.result.view = {
    height = vim.api.nvim_win_get_height(win),
    top = vim.fn.line("w0", win),
    bottom = vim.fn.line("w$", win),
    cursor = vim.api.nvim_win_get_cursor(win)[1],
    lines = vim.api.nvim_buf_line_count(require("tether.chat").buffer()),
  }
end

--- The chat buffer's keys: an approval left pending by the picker is answered with `ga`; a
--- message written in the prompt area (`i`) is sent with <CR>; `q` closes both.
function S.keys(t, tether)
  t.answer_selects(function(items, opts)
    return nil -- dismissed: the approval stays pending, the picker chooses nothing
  end)
  vim.cmd("edit " .. t.workspace .. "/src/app.py")
  vim.cmd("Tether run it")
  t.wait(function()
    local st = t.state()
    return st ~= nil and #st.approvals > 0 and #t.result.selects > 0
  end, "the approval")
  t.wait(function()
    return vim.iter(t.chat()):any(function(line)
      return line:find("**Approval needed**", 1, true) ~= nil
    end)
  end, "the approval in the chat")
  t.result.chat_asking = t.chat()
  local chat = require("tether.chat")
  local win = vim.fn.win_findbuf(chat.buffer())[1]
  vim.api.nvim_set_current_win(win)
  vim.cmd("normal ga")
  t.wait_turns(1)
  t.wait(function()
    return vim.tbl_contains(t.chat(), "it ran")
  end, "the first answer")
  t.result.chat_first = t.chat()
  vim.api.nvim_set_current_win(win)
  vim.cmd("normal i")
  t.result.prompt_window = vim.api.nvim_buf_get_name(0)
  vim.api.nvim_buf_set_lines(0, 0, -1, false, { "and again", "please" })
  vim.cmd("execute \"normal \\<CR>\"")
  t.wait_turns(2)
  t.result.prompt_after = vim.api.nvim_buf_get_lines(0, 0, -1, false)
  vim.cmd("normal q")
  t.result.prompt_windows = #vim.fn.win_findbuf(chat.prompt_buffer())
  vim.api.nvim_set_current_win(vim.fn.win_findbuf(chat.buffer())[1])
  vim.cmd("normal q")
  t.result.chat_windows = #vim.fn.win_findbuf(chat.buffer())
end

--- The session picker lists a session whose turn ended.
function S.picker(t, tether)
  t.answer_selects(function()
    return nil
  end)
  vim.cmd("Tether hello")
  t.wait_turns(1)
  vim.cmd("TetherSessions")
  t.wait(function()
    return #t.result.selects > 0
  end, "the session picker")
end

--- A message sent while a turn runs is queued (and said so); the turn is cancelled before it
--- joins: the chat and a notification say it was not sent.
function S.queue(t, tether)
  t.result.notes = {}
  vim.notify = function(message, level)
    table.insert(t.result.notes, message)
  end
  vim.cmd("Tether first")
  t.wait(function()
    return vim.iter(t.chat()):any(function(line)
      return line:find("partial", 1, true) ~= nil
    end)
  end, "the start of the answer")
  vim.cmd("Tether also this")
  t.wait(function()
    return #t.state().queued > 0 and vim.tbl_contains(t.chat(), "also this")
  end, "the message queued")
  t.result.chat_queued = t.chat()
  vim.cmd("TetherCancel")
  t.wait_turns(1)
  t.wait(function()
    return #t.state().queued == 0
  end, "the queued message dropped")
end

--- `:checkhealth tether` when the tether command is missing.
function S.health_missing(t, tether)
  tether.setup({ cmd = { t.workspace .. "/no-such-tether" } })
  vim.cmd("checkhealth tether")
  t.result.health = vim.api.nvim_buf_get_lines(0, 0, -1, false)
end

--- Answer an approval another client answered first: the plugin says who did.
function S.late_answer(t, tether)
  t.result.notes = {}
  vim.notify = function(message)
    table.insert(t.result.notes, message)
  end
  vim.cmd("TetherAttach " .. os.getenv("TETHER_NVIM_SESSION"))
  t.wait(function()
    return tether.status().attached
  end, "attached")
  t.call(tether.respond, os.getenv("TETHER_NVIM_SESSION"), os.getenv("TETHER_NVIM_APPROVAL"), "allow", "once")
end

return S
