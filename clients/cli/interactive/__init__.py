"""The CLI's interactive mode (`tether`, `tether chat`): an inline session in the terminal.

run         `run_chat`, the way in
chat        the session: events above the prompt, attaching, sending, leaving
prompt      the prompt as drawn: what is under way above it, the status line below
keys        what the keys do at the prompt
question    the approval question, asked in the prompt's place
actions     what each slash command does; slash: their table
channel     a client that threads share while a reader thread receives
output      the renderer's stream: whole lines to the scrollback, the partial one held
completion  slash commands, their arguments, `@path`
picker      an inline list to choose a session from
state       what is known of the session, and the status line

Only `commands/chat.py` imports this package: it brings prompt_toolkit and asyncio (`channel`
alone, which imports neither, also serves `tether acp`).
"""
