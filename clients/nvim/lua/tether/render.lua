-- What the chat buffer shows of a session (lines of Markdown), and `visible`, which writes the
-- characters an editor would not show as themselves in a form that can be seen.

local State = require("tether.state")

local M = {}

-- Control characters other than tab and newline, C1 controls, bidi controls, zero-width and
-- other invisible format characters, line/paragraph separators: what a person reads (above
-- all what they approve) must be what the daemon sent.
local INVISIBLE = {
  { "[%z\1-\8\11-\31\127]", function(c) return ("\\x%02x"):format(c:byte()) end },
  { "\194[\128-\159\173]", function(c) return ("\\u%04x"):format(c:byte(2)) end },
  { "\216\156", function() return "\\u061c" end },
  { "\226\128[\139-\143\168-\174]", function(c) return ("\\u20%02x"):format(c:byte(3) - 128) end },
  { "\226\129[\160-\164\166-\175]", function(c) return ("\\u20%02x"):format(c:byte(3) - 128 + 64) end },
  { "\239\187\191", function() return "\\ufeff" end },
}

--- `text` with invisible and control characters written visibly (`\x1b`, `\u202e`).
function M.visible(text)
  text = tostring(text or "")
  for _, rule in ipairs(INVISIBLE) do
    text = text:gsub(rule[1], rule[2])
  end
  return text
end

--- One line: `visible`, with newlines written as `\n`.
function M.one_line(text, limit)
  local line = M.visible(text):gsub("\n", "\\n")
  limit = limit or 100
  if #line > limit then
    line = line:sub(1, limit) .. "…"
  end
  return line
end

local function lines_of(out, text)
  for _, line in ipairs(vim.split(M.visible(text), "\n", { plain = true })) do
    table.insert(out, line)
  end
end

local SUBJECT = { "command", "path", "pattern", "url", "query", "description" }

--- What a tool call is about, from its JSON arguments: the command, the path, …
function M.tool_subject(tool, arguments)
  local ok, args = pcall(vim.json.decode, arguments or "", { luanil = { object = true } })
  if ok and type(args) == "table" then
    for _, key in ipairs(SUBJECT) do
      if type(args[key]) == "string" and args[key] ~= "" then
        return args[key]
      end
    end
  end
  return arguments or ""
end

local STATUS = {
  running = "running",
  completed = "done",
  failed = "failed",
  cancelled = "cancelled",
}

--- A tool call's line; `awaiting`: a pending approval gates it (it has not run yet).
function M.tool_line(item, awaiting)
  -- The wire omits a field at its default (docs/protocol.md): a running call has no status.
  local state = item.status or "running"
  local status = STATUS[state] or tostring(state)
  if state == "running" and awaiting then
    status = "awaiting approval"
  end
  if item.status == "completed" and item.exitCode ~= nil and item.exitCode ~= 0 then
    status = ("exit %d"):format(item.exitCode)
  end
  local subject = M.one_line(M.tool_subject(item.tool, item.arguments), 80)
  return ("- `%s` %s — %s"):format(M.one_line(item.tool, 40), subject, status)
end

M.TAIL_LINES = 5 -- of a command's output, as the CLI shows

--- The last lines of a command's output (a progress bar's redraws collapsed): what it has
--- streamed while it runs, the result's body (without its `exit code` header) once done.
function M.output_tail(item)
  if item.tool ~= "run_command" then
    return {}
  end
  local text = item.output or ""
  if item.status == "completed" and item.exitCode ~= nil then
    text = text:match("^[^\n]*\n(.*)$") or ""
    if text == "(no output)" then
      return {}
    end
  elseif item.status ~= nil and item.status ~= "running" then
    return {}
  end
  text = text:gsub("[\r\n]+$", "")
  if vim.trim(text) == "" then
    return {}
  end
  local lines = {}
  for _, line in ipairs(vim.split(text, "\n", { plain = true })) do
    table.insert(lines, line:match("([^\r]*)$"))
  end
  local tail = {}
  for i = math.max(1, #lines - M.TAIL_LINES + 1), #lines do
    table.insert(tail, "  │ " .. M.visible(lines[i]))
  end
  return tail
end

local function size_text(size)
  if size < 1024 then
    return ("%d B"):format(size)
  elseif size < 1024 * 1024 then
    return ("%d KB"):format(math.floor(size / 1024 + 0.5))
  end
  return ("%.1f MB"):format(size / (1024 * 1024))
end

--- One line for an image sent with a message: `[image shot.png 1280×720, 210 KB]`.
function M.image_line(image)
  local line = ("[image %s %d×%d, %s"):format(
    M.one_line(image.name, 80),
    image.width,
    image.height,
    size_text(image.size)
  )
  if (image.originalSize or 0) > 0 then
    line = line
      .. (", downscaled from %d×%d %s"):format(
        image.originalWidth or 0,
        image.originalHeight or 0,
        size_text(image.originalSize)
      )
  end
  return line .. "]"
end

local function summary_line(item)
  local parts = { item.stopReason or "ended" }
  local files = item.filesChanged or {}
  if #files > 0 then
    table.insert(parts, ("%d file%s changed"):format(#files, #files == 1 and "" or "s"))
  end
  if item.durationSeconds then
    table.insert(parts, ("%.1f s"):format(item.durationSeconds))
  end
  return "_" .. table.concat(parts, " · ") .. "_"
end

local function approval_lines(out, approval)
  table.insert(out, "")
  local subject = approval.command ~= "" and approval.command or approval.path or ""
  table.insert(
    out,
    ("**Approval needed** (%s): `%s` %s"):format(
      M.one_line(approval.reason, 80),
      M.one_line(approval.tool, 40),
      M.one_line(subject, 200)
    )
  )
  if approval.preview and approval.preview ~= "" then
    table.insert(out, "```diff")
    lines_of(out, approval.preview)
    table.insert(out, "```")
  end
  table.insert(out, "`ga` allow · `gA` allow always · `gr` deny (or `:TetherApprove` · `:TetherDeny`)")
end

local function agent_heading(out, speaker)
  if speaker ~= "agent" then
    vim.list_extend(out, { "", "## tether", "" })
  end
  return "agent"
end

--- The chat buffer's lines for session state `st`; `status` is the connection's word for
--- it (attached, detached, disconnected).
function M.lines(st, status)
  local title = st.info and st.info.title ~= "" and st.info.title or st.id
  local out = { ("# tether · %s"):format(M.one_line(title, 80)), ("_%s · %s_"):format(st.id, status) }
  for _, turn in ipairs(st.turns) do
    local speaker = nil
    for _, item in ipairs(turn.items) do
      if item.type == "user_message" then
        vim.list_extend(out, { "", "## You", "" })
        lines_of(out, item.text)
        for _, image in ipairs(item.images or {}) do
          table.insert(out, "")
          table.insert(out, M.image_line(image))
        end
        speaker = "user"
      elseif item.type == "agent_message" and not item.superseded and (item.text or "") ~= "" then
        if speaker == "agent" then
          table.insert(out, "")
        end
        speaker = agent_heading(out, speaker)
        lines_of(out, item.text)
      elseif item.type == "reasoning" and not item.superseded and vim.trim(item.text or "") ~= "" then
        speaker = agent_heading(out, speaker)
        table.insert(out, "> ✻ _reasoning_")
        for _, line in ipairs(vim.split(M.visible(vim.trim(item.text)), "\n", { plain = true })) do
          table.insert(out, line == "" and ">" or ("> " .. line))
        end
        table.insert(out, "")
      elseif item.type == "tool_call" then
        speaker = agent_heading(out, speaker)
        table.insert(out, M.tool_line(item, State.awaits_approval(st, item.id)))
        vim.list_extend(out, M.output_tail(item))
        for _, image in ipairs(item.images or {}) do
          table.insert(out, "  " .. M.image_line(image))
        end
      elseif item.type == "notice" then
        vim.list_extend(out, { "", ("> %s: %s"):format(item.level or "info", M.one_line(item.message, 300)) })
      elseif item.type == "turn_summary" then
        vim.list_extend(out, { "", summary_line(item) })
      end
    end
    if turn.status ~= "running" and turn.error ~= nil then
      vim.list_extend(out, { "", ("> error: %s"):format(M.one_line(turn.error.message, 300)) })
    end
    for _, dropped in ipairs(turn.dropped or {}) do
      vim.list_extend(out, {
        "",
        ("> not sent, %s: %s"):format(M.one_line(dropped.reason, 80), M.one_line(dropped.text, 200)),
      })
    end
  end
  for _, input in ipairs(st.queued or {}) do
    vim.list_extend(out, { "", "## You (queued: joins the running turn at its next step)", "" })
    lines_of(out, input.text)
  end
  for _, approval in ipairs(st.approvals) do
    approval_lines(out, approval)
  end
  return out
end

return M
