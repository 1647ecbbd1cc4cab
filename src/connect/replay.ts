import type { Headers } from "./protocol.js";
import type { ReplayStore } from "./replay-store.js";

/** A change's whole answer, kept to answer the same request id again. */
export interface KeptAnswer {
  status: number;
  headers: Headers;
  body: Buffer;
}

interface Entry {
  method: string;
  path: string;
  /** Settles with the answer once the change has run. */
  answer: Promise<KeptAnswer>;
}

/** How long a request id is remembered: a control plane sending it again after a reconnect within this gets the first answer. */
export const REPLAY_MS = 10 * 60_000;

/**
 * The changes (every method but GET and HEAD) each control plane sent, by its request ids, for REPLAY_MS:
 * a request sent again with an id already seen is answered from the first run, waiting for it if it is
 * still running, and is never run twice. Runs in progress are held here; each one's answer, once it has
 * one, is kept in the agent's database (ReplayStore), so that an agent restarted meanwhile answers from it
 * too. Reads are not kept: running one again changes nothing.
 */
export class ReplayCache {
  private readonly running = new Map<string, Entry>();

  constructor(
    private readonly store: ReplayStore,
    private readonly now: () => number = Date.now,
  ) {}

  /** The first run's entry of `id` from `peer`, if it is running or still remembered. */
  find(peer: string, id: string): Entry | undefined {
    const running = this.running.get(`${peer} ${id}`);
    if (running !== undefined) return running;
    const row = this.store.get(peer, id);
    if (row === undefined || row.at < this.now() - REPLAY_MS) return undefined;
    const answer =
      row.status === null
        ? Promise.reject(
            new Error(
              "the first run of this request ended without an answer (the agent stopped during it); look at what it was to change, and send a new request with a new id",
            ),
          )
        : Promise.resolve({
            status: row.status,
            headers: row.headers ?? {},
            body: row.body ?? Buffer.alloc(0),
          });
    answer.catch(() => {});
    return { method: row.method, path: row.path, answer };
  }

  remember(peer: string, id: string, method: string, path: string, answer: Promise<KeptAnswer>): void {
    const key = `${peer} ${id}`;
    const entry: Entry = { method, path, answer };
    this.running.set(key, entry);
    const at = this.now();
    this.store.pruneBefore(at - REPLAY_MS);
    // Recorded as begun before it runs: an agent that stops in the middle (a crash) finds it begun and
    // without an answer, and does not run it again.
    this.store.put(peer, id, { method, path, status: null, headers: null, body: null, at });
    const kept = (k: KeptAnswer | undefined) => {
      // Forgotten meanwhile (its body never all came): nothing to keep.
      if (this.running.get(key) !== entry) return;
      this.running.delete(key);
      // A run that ended without an answer is kept so: its id is never run again either.
      this.store.put(peer, id, {
        method,
        path,
        status: k?.status ?? null,
        headers: k?.headers ?? null,
        body: k?.body ?? null,
        at,
      });
    };
    answer.then(kept, () => kept(undefined));
  }

  /** Forgets a change that cannot have run (its body never all arrived), so the same id may be sent again. */
  forget(peer: string, id: string): void {
    this.running.delete(`${peer} ${id}`);
    this.store.delete(peer, id);
  }
}
