/**
 * A full garbage collection once the agent has been idle a while after work that left large garbage (reads of
 * thousands of routes: megabytes of text and parsed objects each). V8 collects only when code allocates, so
 * an agent that goes quiet keeps whatever garbage its heap held at the last collection, which grows with the
 * routes it read, for as long as it stays quiet. Node exposes the collector only with `--expose-gc` (in the
 * agent's flags, packaging/agent.env); without it this does nothing.
 */
const gc = (
  globalThis as {
    gc?: (options: { type: "major"; execution: "sync"; flavor: "last-resort" }) => void;
  }
).gc;

/** Quiet time after the last call before the collection runs. */
const IDLE_MS = 5_000;

let timer: NodeJS.Timeout | undefined;

/**
 * Asks for a collection once the agent has been quiet for IDLE_MS: no other call and no request
 * (`postponeIdleCollection`). A collection of this kind stops everything for a while at a large host, so it
 * waits for a pause rather than landing among requests.
 */
export function collectWhenIdle(): void {
  if (gc === undefined) return;
  if (timer) timer.refresh();
  else
    timer = setTimeout(() => {
      timer = undefined;
      // "last-resort": collections until nothing more is freed, and the freed pages go back to the system;
      // a plain major collection frees them into V8's page pool, where they stay resident.
      gc({ type: "major", execution: "sync", flavor: "last-resort" });
    }, IDLE_MS).unref();
}

/**
 * Every request the agent serves: a collection asked for waits until IDLE_MS pass without one. Under many
 * clients, gaps of IDLE_MS between large exchanges with Caddy are common while requests never stop, and
 * without this the collection's pauses kept landing among them.
 */
export function postponeIdleCollection(): void {
  timer?.refresh();
}
