import type { CaddyAdmin, CallOptions } from "./admin.js";

/** The line of Caddy's `/metrics` that says when it last loaded a config (see `lastLoad`). */
const LAST_LOAD = "caddy_config_last_reload_success_timestamp_seconds ";

/** A line longer than this cannot be the one looked for; only its tail is kept while reading. */
const LONGEST_LINE = 4096;

/**
 * When Caddy last loaded a config successfully, as its admin `/metrics` prints it (full precision, so two
 * loads never print the same value), or undefined when Caddy does not say.
 *
 * Caddy changes its config only by loading a new one, and sets this time inside the load, under the lock
 * every config read waits for, after the config has changed and before the change is answered (caddy.go,
 * `changeConfig` and `run`); a load that fails after setting it puts the previous config back. So a config
 * read after this value was read is at least as new as the value, and while Caddy still prints the same
 * value nothing it holds has changed: a copy read after the value is still Caddy's config.
 *
 * The metric families come sorted by name, and this one near the top: the answer is read only up to it,
 * however many HTTP metrics a Caddy with per-host metrics prints after it.
 */
export async function lastLoad(admin: CaddyAdmin, call: CallOptions = {}): Promise<string | undefined> {
  let res: Awaited<ReturnType<CaddyAdmin["stream"]>>;
  try {
    res = await admin.stream("/metrics", { ...call, attempts: 1 });
  } catch {
    return undefined;
  }
  if (res.status !== 200) {
    res.body.resume();
    return undefined;
  }
  let rest = "";
  try {
    for await (const chunk of res.body) {
      rest += (chunk as Buffer).toString("latin1");
      for (let nl = rest.indexOf("\n"); nl >= 0; nl = rest.indexOf("\n")) {
        const line = rest.slice(0, nl);
        rest = rest.slice(nl + 1);
        // Leaving the loop destroys the answer's stream: the rest is never read.
        if (line.startsWith(LAST_LOAD)) return line.slice(LAST_LOAD.length).trim() || undefined;
      }
      if (rest.length > LONGEST_LINE) rest = rest.slice(-LONGEST_LINE);
    }
  } catch {
    return undefined;
  }
  return undefined;
}

/**
 * A value computed from Caddy's config once per config Caddy loads (see `lastLoad`): computed again only
 * once Caddy has loaded another, shared by the callers that ask while it is computed, and computed every
 * time when Caddy does not say when it loaded. A computation that fails is not kept.
 */
export class PerLoad<T> {
  private held: { load: string; value: Promise<T> } | undefined;

  constructor(
    private readonly admin: CaddyAdmin,
    /** The options of the reads of Caddy's last load (a status reader's time-out, not counted). */
    private readonly call: CallOptions = {},
  ) {}

  async get(compute: () => Promise<T>): Promise<T> {
    // Read before `compute` reads the config, so the value is at least as new as the load it is kept for.
    const load = await lastLoad(this.admin, this.call);
    if (load === undefined) return compute();
    let held = this.held;
    if (held?.load !== load) {
      const value = compute();
      const mine = { load, value };
      held = this.held = mine;
      value.catch(() => {
        if (this.held === mine) this.held = undefined;
      });
    }
    return held.value;
  }
}
