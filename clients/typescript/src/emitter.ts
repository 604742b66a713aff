// A small typed event emitter that runs in Node and in browsers alike (no `node:events`).

type Listener<A extends unknown[]> = (...args: A) => void;
// Stored without their argument types; `on` and `emit` keep them paired by event name.
type AnyListener = (...args: unknown[]) => void;

/** Listeners by event name; `Events` maps each name to its arguments. */
export class Emitter<Events extends { [K in keyof Events]: unknown[] }> {
  #listeners = new Map<keyof Events, Set<AnyListener>>();

  /** Call `listener` on every `event`; returns a function that removes it. */
  on<K extends keyof Events>(event: K, listener: Listener<Events[K]>): () => void {
    let set = this.#listeners.get(event);
    if (set === undefined) {
      set = new Set();
      this.#listeners.set(event, set);
    }
    set.add(listener as unknown as AnyListener);
    return () => this.off(event, listener);
  }

  /** Call `listener` on the next `event` only. */
  once<K extends keyof Events>(event: K, listener: Listener<Events[K]>): () => void {
    const off = this.on(event, (...args: Events[K]) => {
      off();
      listener(...args);
    });
    return off;
  }

  off<K extends keyof Events>(event: K, listener: Listener<Events[K]>): void {
    this.#listeners.get(event)?.delete(listener as unknown as AnyListener);
  }

  /** Whether `listener` listens to `event`. */
  protected listens<K extends keyof Events>(event: K, listener: Listener<Events[K]>): boolean {
    return this.#listeners.get(event)?.has(listener as unknown as AnyListener) ?? false;
  }

  /** Call one listener as `emit` calls each. */
  protected tell<A extends unknown[]>(listener: Listener<A>, ...args: A): void {
    try {
      listener(...args);
    } catch (err) {
      reportListenerError(err);
    }
  }

  /**
   * Call the listeners of `event` in the order they were added. A listener that throws does
   * not stop the others or the caller: its error is reported with `reportError` (or logged).
   */
  protected emit<K extends keyof Events>(event: K, ...args: Events[K]): void {
    const set = this.#listeners.get(event);
    if (set === undefined) return;
    for (const listener of [...set]) this.tell(listener, ...(args as unknown[]));
  }
}

function reportListenerError(err: unknown): void {
  const report = (globalThis as { reportError?: (e: unknown) => void }).reportError;
  if (report !== undefined) report(err);
  else console.error(err);
}
