// Settings that name a program the extension runs are the user's alone: a workspace's
// .vscode/settings.json must not pick the interpreter that starts the daemon.

/** The part of `WorkspaceConfiguration.inspect()`'s answer that is the user's own. */
export interface SettingValues<T> {
  readonly defaultValue?: T;
  readonly globalValue?: T;
  readonly workspaceValue?: T;
  readonly workspaceFolderValue?: T;
}

/** The Python that runs tether as the user set it (user settings only; workspace and folder
 * values are ignored), or undefined when unset or empty. */
export function userPython(values: SettingValues<string> | undefined): string | undefined {
  const value = values?.globalValue;
  return typeof value === "string" && value.trim() !== "" ? value : undefined;
}

/**
 * A failure to find or start the daemon, in words that say what to change: when the Python
 * cannot be run, is too old, or lacks tether, the `tether.python` setting is named. Other
 * failures are returned as they are.
 */
export function explainConnectFailure(err: unknown): Error {
  const error = err instanceof Error ? err : new Error(String(err));
  const code = (error as { code?: unknown }).code;
  if (error.name !== "DiscoveryError") return error;
  const lacksTether = /No module named '?tether\b/.test(error.message);
  if (code !== "NO_PYTHON" && !(code === "UNAVAILABLE" && (lacksTether || /older than Python/.test(error.message)))) return error;
  const what = lacksTether ? "The Python tether runs does not have tether installed" : "tether cannot run its Python";
  return new Error(
    `${what} (${error.message}). Set "tether.python" in your user settings to a Python that has tether installed ` +
      "(or $TETHER_PYTHON before starting VS Code), then send again.",
    { cause: error },
  );
}
