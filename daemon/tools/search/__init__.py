"""grep's engines: ripgrep (`ripgrep`) and the pure-Python search (`fallback`, guarded by
`regex_safety`), both filling one `Found` (`found`) that `formatting` turns into the text the
model reads. They read a `Query` (`query`), which the grep tool's params satisfy."""
