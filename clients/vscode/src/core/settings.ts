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
