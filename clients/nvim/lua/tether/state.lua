-- A session as the plugin knows it: the attach snapshot with the session's events folded in,
-- by the rules of docs/clients.md ("Render from state"), and the cursor of the last event.
--
-- An event at or below the cursor (same epoch) is a duplicate and one above `seq + 1` a gap;
-- neither should happen (seq is gap-free and nothing is delivered twice). Merged deltas, which
-- a client that fell behind may get, stand for the events `firstSeq`..`seq`. Duplicates are
-- skipped, both are counted in `stats` so that a test can hold the daemon and the plugin to it.

local M = {}

function M.new(session_id)
  return {
    id = session_id,
    epoch = nil,
    seq = 0,
    info = nil,
    turns = {},
    approvals = {}, -- pending, in the order they were asked
    queued = {}, -- messages sent while a turn runs, waiting to join it: { id, text }
    stats = { events = 0, deltas = 0, duplicates = 0, gaps = 0 },
  }
end

local function find_turn(st, turn_id)
  for _, turn in ipairs(st.turns) do
    if turn.id == turn_id then
      return turn
    end
  end
  local turn = { id = turn_id, status = "running", items = {} }
  table.insert(st.turns, turn)
  return turn
end

local function put_item(turn, item)
  for i, existing in ipairs(turn.items) do
    if existing.id == item.id then
      turn.items[i] = item
      return
    end
  end
  table.insert(turn.items, item)
end

local function find_item(st, turn_id, item_id)
  for _, item in ipairs(find_turn(st, turn_id).items) do
    if item.id == item_id then
      return item
    end
  end
  return nil
end

function M.load_snapshot(st, snapshot)
  st.epoch = snapshot.epoch
  st.seq = snapshot.seq
  st.info = snapshot.session
  st.turns = {}
  for _, turn in ipairs(snapshot.turns or {}) do
    table.insert(st.turns, { id = turn.id, status = turn.status, items = turn.items or {}, error = turn.error })
  end
  st.approvals = {}
  for _, approval in ipairs(snapshot.pendingApprovals or {}) do
    table.insert(st.approvals, approval)
  end
  st.queued = {}
  for _, input in ipairs(snapshot.queuedInputs or {}) do
    table.insert(st.queued, { id = input.inputId, text = input.text })
  end
end

--- Whether a pending approval gates the tool call `item_id`.
function M.awaits_approval(st, item_id)
  for _, approval in ipairs(st.approvals) do
    if approval.itemId == item_id then
      return true
    end
  end
  return false
end

--- Take the queued message `input_id` off the queue; returns it, or nil.
local function unqueue(st, input_id)
  for i, input in ipairs(st.queued) do
    if input.id == input_id then
      return table.remove(st.queued, i)
    end
  end
  return nil
end

function M.approval(st, approval_id)
  for _, approval in ipairs(st.approvals) do
    if approval.id == approval_id then
      return approval
    end
  end
  return nil
end

local function drop_approval(st, approval_id)
  for i, approval in ipairs(st.approvals) do
    if approval.id == approval_id then
      table.remove(st.approvals, i)
      return
    end
  end
end

--- The running turn, if any.
function M.running_turn(st)
  for i = #st.turns, 1, -1 do
    if st.turns[i].status == "running" then
      return st.turns[i]
    end
  end
  return nil
end

--- Fold one `session/event`'s params in; returns the event, or nil when it was a duplicate.
function M.apply(st, params)
  if params.epoch == st.epoch and params.seq <= st.seq then
    st.stats.duplicates = st.stats.duplicates + 1
    return nil
  end
  local first = params.firstSeq or params.seq
  if params.epoch ~= st.epoch or first ~= st.seq + 1 then
    st.stats.gaps = st.stats.gaps + 1
  end
  st.epoch, st.seq = params.epoch, params.seq
  st.stats.events = st.stats.events + 1
  local event = params.event
  local kind = event.type
  if kind == "turn_started" then
    find_turn(st, event.turnId).status = "running"
  elseif kind == "item_started" or kind == "item_completed" then
    put_item(find_turn(st, event.turnId), event.item)
    unqueue(st, event.item.id) -- a queued message joined the turn
  elseif kind == "item_delta" then
    st.stats.deltas = st.stats.deltas + 1
    local item = find_item(st, event.turnId, event.itemId)
    if item ~= nil then
      if item.type == "tool_call" then
        item.output = (item.output or "") .. event.delta
      else
        item.text = (item.text or "") .. event.delta
      end
    end
  elseif kind == "turn_completed" then
    local turn = find_turn(st, event.turnId)
    turn.status = event.status
    turn.error = event.error
  elseif kind == "approval_requested" then
    drop_approval(st, event.approval.id)
    table.insert(st.approvals, event.approval)
  elseif kind == "approval_resolved" then
    drop_approval(st, event.approvalId)
  elseif kind == "input_queued" then
    unqueue(st, event.inputId)
    table.insert(st.queued, { id = event.inputId, text = event.text })
  elseif kind == "input_dropped" then
    -- Kept on the last turn (the one that ended without them), so the chat says so; the
    -- event carries the texts for whoever reacts to it.
    local turn = st.turns[#st.turns]
    event.dropped = {}
    for _, input_id in ipairs(event.inputIds or {}) do
      local input = unqueue(st, input_id)
      if input ~= nil then
        table.insert(event.dropped, input.text)
        if turn ~= nil then
          turn.dropped = turn.dropped or {}
          table.insert(turn.dropped, { text = input.text, reason = event.reason })
        end
      end
    end
  elseif kind == "session_renamed" and st.info ~= nil then
    st.info.title = event.title
  end
  -- Other kinds (todos, context, ones added later) do not change the chat.
  return event
end

return M
