-- Asking about pending approvals with `vim.ui.select`, one at a time, in the order they came.
--
-- An approval answered elsewhere before its turn to be shown is never shown; one answered
-- elsewhere while its picker is open is answered "already answered" by the daemon (-32021)
-- when the person picks, and said so. Dismissing the picker leaves the approval pending
-- (`:TetherApprove` / `:TetherDeny` answer it later; another client may too).

local render = require("tether.render")

local M = { queue = {}, showing = nil, respond = nil }

M.ALREADY_RESOLVED = -32021

--- The picker's question: the tool, what it would run or change, and the diff if any.
function M.question(approval)
  local subject = approval.command ~= "" and approval.command or approval.path or ""
  local lines = {
    ("tether: %s — allow `%s` %s?"):format(
      render.one_line(approval.reason, 120),
      render.one_line(approval.tool, 40),
      render.one_line(subject, 400)
    ),
  }
  if approval.preview and approval.preview ~= "" then
    local preview = vim.split(render.visible(approval.preview), "\n", { plain = true })
    for i = 1, math.min(#preview, 40) do
      table.insert(lines, preview[i])
    end
    if #preview > 40 then
      table.insert(lines, ("… %d more lines in the chat buffer"):format(#preview - 40))
    end
  end
  return table.concat(lines, "\n")
end

function M.choices(approval)
  local choices = { { label = "Allow once", decision = "allow", scope = "once" } }
  if approval.alwaysRule and approval.alwaysRule ~= "" then
    table.insert(choices, {
      label = "Allow always: " .. render.one_line(approval.alwaysRule, 80),
      decision = "allow",
      scope = "always",
    })
  end
  table.insert(choices, { label = "Deny", decision = "deny", scope = "once" })
  return choices
end

--- Queue `approval` (of session `session_id`) to be asked about.
function M.enqueue(session_id, approval)
  if M.showing ~= nil and M.showing.approval.id == approval.id then
    return
  end
  for _, queued in ipairs(M.queue) do
    if queued.approval.id == approval.id then
      return
    end
  end
  table.insert(M.queue, { session_id = session_id, approval = approval })
  M.next()
end

--- `approval_id` was answered (here or elsewhere): never ask about it.
function M.resolved(approval_id)
  for i, queued in ipairs(M.queue) do
    if queued.approval.id == approval_id then
      table.remove(M.queue, i)
      return
    end
  end
end

--- Forget everything queued (the session is no longer in view).
function M.clear()
  M.queue = {}
end

function M.next()
  if M.showing ~= nil or #M.queue == 0 then
    return
  end
  local entry = table.remove(M.queue, 1)
  M.showing = entry
  vim.ui.select(M.choices(entry.approval), {
    prompt = M.question(entry.approval),
    kind = "tether.approval",
    format_item = function(choice)
      return choice.label
    end,
  }, function(choice)
    vim.schedule(function()
      M.showing = nil
      if choice ~= nil then
        M.respond(entry.session_id, entry.approval.id, choice.decision, choice.scope)
      end
      M.next()
    end)
  end)
end

return M
