import type { Headers } from "./protocol.js";

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
  at: number;
}

/** How long a request id is remembered: a control plane sending it again after a reconnect within this gets the first answer. */
export const REPLAY_MS = 10 * 60_000;

/**
 * The changes (every method but GET and HEAD) each control plane sent, by its request ids, for REPLAY_MS:
 * a request sent again with an id already seen is answered from the first run, waiting for it if it is
 * still running, and is never run twice. Reads are not kept: running one again changes nothing.
 * Kept in memory: an agent that restarts has forgotten them (docs/connect.md).
 */
export class ReplayCache {
  private readonly entries = new Map<string, Entry>();

  constructor(private readonly now: () => number = Date.now) {}

  /** The first run's entry of `id` from `peer`, if it is still remembered. */
  find(peer: string, id: string): Entry | undefined {
    this.sweep();
    return this.entries.get(`${peer} ${id}`);
  }

  remember(peer: string, id: string, method: string, path: string, answer: Promise<KeptAnswer>): void {
    this.sweep();
    // A run that ended without an answer is kept so: its id is never run again either (only `forget` undoes it).
    answer.catch(() => {});
    this.entries.set(`${peer} ${id}`, { method, path, answer, at: this.now() });
  }

  /** Forgets a change that cannot have run (its body never all arrived), so the same id may be sent again. */
  forget(peer: string, id: string): void {
    this.entries.delete(`${peer} ${id}`);
  }

  get size(): number {
    return this.entries.size;
  }

  private sweep(): void {
    const oldest = this.now() - REPLAY_MS;
    // Insertion order is age order: stop at the first one still young.
    for (const [key, entry] of this.entries) {
      if (entry.at >= oldest) break;
      this.entries.delete(key);
    }
  }
}
