-- :checkhealth tether
local M = {}

function M.check()
  local health = vim.health
  local tether = require("tether")
  health.start("tether")
  if vim.fn.has("nvim-0.10") == 1 then
    health.ok("Neovim " .. tostring(vim.version()))
  else
    health.error("Neovim 0.10 or later is needed (vim.system)")
  end
  local cmd = tether.config.cmd
  if vim.fn.executable(cmd[1]) ~= 1 then
    health.error(
      ("`%s` is not executable"):format(cmd[1]),
      {
        "install tether from a checkout: `uv tool install /path/to/tether` (or `pipx install /path/to/tether`)",
        "or name it: require('tether').setup({ cmd = { '/path/to/tether' } })",
      }
    )
    return
  end
  local ok, done = pcall(function()
    return vim.system(vim.list_extend(vim.deepcopy(cmd), { "--version" }), { text = true }):wait(10000)
  end)
  if not ok or done.code ~= 0 then
    health.error(("`%s --version` failed: %s"):format(table.concat(cmd, " "), ok and (done.stderr or "") or done))
    return
  end
  health.ok(("%s (%s)"):format(vim.trim(done.stdout), table.concat(cmd, " ")))
  local status = tether.status()
  if status.ready then
    health.ok(("connected to the daemon of %s"):format(status.workspace))
  else
    health.info(("%s: the first :Tether command starts `tether bridge` (and the daemon)"):format(status.connection))
  end
  if status.session ~= nil then
    health.info(("session in view: %s (%s)"):format(status.session, status.attached and "attached" or "detached"))
  end
end

return M
