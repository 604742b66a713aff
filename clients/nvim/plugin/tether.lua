-- tether's commands; the plugin itself (lua/tether/) loads on the first one.
if vim.g.loaded_tether then
  return
end
vim.g.loaded_tether = true

local function tether()
  return require("tether")
end

local command = vim.api.nvim_create_user_command

command("Tether", function(o)
  tether().prompt(o.args, o.range > 0 and { o.line1, o.line2 } or nil)
end, { nargs = "*", range = true, desc = "tether: send a prompt (with a range: those lines as the selection)" })

command("TetherSessions", function()
  tether().sessions()
end, { desc = "tether: pick a session of the workspace (● running)" })

command("TetherAttach", function(o)
  tether().attach(o.args ~= "" and o.args or nil)
end, { nargs = "?", desc = "tether: show a session (id or prefix; default the latest)" })

command("TetherDetach", function()
  tether().detach()
end, { desc = "tether: stop following the session in view (its turns go on)" })

command("TetherCancel", function()
  tether().cancel()
end, { desc = "tether: cancel the running turn" })

command("TetherUndo", function()
  tether().undo()
end, { desc = "tether: restore the files the last turn that changed files changed" })

command("TetherApprove", function(o)
  tether().answer("allow", o.bang)
end, { bang = true, desc = "tether: allow the pending approval (!: always, for the session)" })

command("TetherDeny", function()
  tether().answer("deny", false)
end, { desc = "tether: deny the pending approval" })

vim.api.nvim_create_autocmd("VimLeavePre", {
  group = vim.api.nvim_create_augroup("tether", { clear = true }),
  callback = function()
    if package.loaded["tether"] then
      tether().stop()
    end
  end,
})
