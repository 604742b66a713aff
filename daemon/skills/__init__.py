"""Skills: folders holding a `SKILL.md` (YAML front matter, a Markdown body) that the agent
loads in stages: a catalog line per skill in the system prompt, the body when the model asks
for it with the `skill` tool, a bundled file of the skill's folder when it asks for that.

`parse` reads one `SKILL.md`; `library` finds them in their sources and keeps them current
with a stat-based check; `catalog` writes the system prompt's section; `resources` resolves a
bundled file inside its skill's folder; `trust` remembers that the user trusted a workspace's
skills. This part imports only the daemon's leaves.
"""
