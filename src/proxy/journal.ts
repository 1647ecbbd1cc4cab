import type { ChangeEnd, ChangeOutcome, Op, RouteJson } from "../caddy/routes/plan.js";
import type { Outbox } from "../events/outbox.js";
import { canonicalJson } from "../util/canonical-json.js";
import { withoutPaths } from "../util/without-paths.js";
import { hostTakenText } from "./errors.js";
import type { ChangeOperation } from "./schemas.js";
import type { RouteChangeStore, SettledOutcome } from "./store.js";

/** Who made a change and what it is about: recorded with it, sent in its events, named in its log line. */
export interface ChangeAbout {
  operation: ChangeOperation;
  route_id: string;
  /** For a restore: the change whose captured state it puts back. */
  restored_from?: number;
  /** The caller's `x-request-id`, else the agent's id for the request; null for the agent's own changes. */
  request_id: string | null;
}

/**
 * One change on its way from the service through the writer and back: what was asked, and its record once
 * the journal has written one. The writer reads `op`; the journal fills in the rest as the change goes.
 */
export class RecordedChange {
  /** The record's id, once the change was first captured; a change Caddy never got to may have none. */
  id: number | undefined;
  /** Canonical JSON of the state last captured: a change planned again on the same state is not recaptured. */
  capturedWith: string | undefined;
  /** The first delivery attempts of the change's events, started as the events are written. */
  readonly deliveries: Promise<boolean>[] = [];

  constructor(
    readonly op: Op,
    readonly about: ChangeAbout,
    readonly callbackUrl: string | undefined,
  ) {}

  /** The ordering key of the route's events to this receiver (see routeEventKey). */
  get orderingKey(): string | undefined {
    return this.callbackUrl === undefined ? undefined : routeEventKey(this.about.route_id, this.callbackUrl);
  }
}

/**
 * The ordering key of a route's events to one receiver: its route_backup and route_change events are
 * delivered one at a time in the order written, so the receiver sees a change's backup before its outcome.
 * Per receiver too, so a receiver that is down holds up no other receiver of the route's events.
 */
const routeEventKey = (routeId: string, url: string) => `route:${routeId} ${url}`;

const RECORDED: Record<ChangeOutcome["kind"], SettledOutcome> = {
  applied: "applied",
  exists: "refused",
  not_found: "refused",
  host_taken: "refused",
  unavailable: "failed",
  rejected: "failed",
  capture_failed: "failed",
  rolled_back: "rolled_back",
  rollback_failed: "rollback_failed",
};

/** How a change's history records its outcome (and its log line and metric name it). */
export const recorded = (outcome: ChangeOutcome): SettledOutcome => RECORDED[outcome.kind];

/** The failure's own words, or its kind when it has none (a 404/409 refusal); null when it applied. */
export function outcomeText(outcome: ChangeOutcome): string | null {
  if (outcome.kind === "applied") return null;
  if (outcome.kind === "host_taken") return hostTakenText(outcome.host, outcome.owner);
  return "message" in outcome ? outcome.message : outcome.kind;
}

/**
 * The route as Caddy holds it once a change ended: the new one when it applied (null after a removal), the
 * previous one when Caddy kept or got it back (null when there was none), null when the rollback failed
 * and what Caddy holds is not known.
 */
function routeAfter({ outcome, previous }: ChangeEnd): RouteJson | null {
  if (outcome.kind === "applied") return outcome.route;
  return outcome.kind === "rollback_failed" ? null : previous;
}

export interface JournalOptions {
  store: RouteChangeStore;
  outbox: Outbox;
  /** How long a change's answer waits for each first delivery attempt of its events. */
  firstAttemptTimeoutMs: number;
}

/** A record written in `record`'s transaction and what follows once it is committed; see `ChangeJournal.together`. */
interface Entry {
  /** Writes the record; returns what follows its commit. Writes nothing else, so it can be run again. */
  write: () => () => void;
  /** Called instead of what follows when the record could not be written. */
  failed: (err: unknown) => void;
  /** What follows, run after the commit of the `together` it was written in. */
  follow: () => void;
}

/** What `fn` of `together` threw, told apart from a failed commit. */
class ThrownInside {
  constructor(readonly err: unknown) {}
}

/**
 * The record of every route change and the events it sends: the state it replaces and its `route_backup`,
 * written in one transaction before Caddy is touched (`capture`); its outcome and `route_change`, in one
 * transaction once it ended (`settle`); the writer calls both, a batch's inside `together`. Both events
 * carry the route's ordering key for the receiver, so the outbox delivers the backup first.
 */
export class ChangeJournal {
  /** Changes of this process not yet settled: a pending record not here was cut short by a stop of the agent. */
  private readonly inFlight = new Set<number>();
  /** The records written inside the `together` under way, whose follow-ups wait for its commit. */
  private batch: Entry[] | undefined;

  constructor(private readonly o: JournalOptions) {}

  /**
   * Runs `fn`, whose captures and settles become savepoints of one transaction: a batch of changes costs
   * one commit, not one each. What follows each record (setting its change's id, starting its event's first
   * attempt, answering it) runs after the commit. When the commit fails, each record is written again in a
   * transaction of its own, so one that cannot be written fails alone and the others are not lost.
   */
  together(fn: () => void): void {
    if (this.batch) {
      fn();
      return;
    }
    const batch: Entry[] = [];
    this.batch = batch;
    try {
      this.o.store.transaction(() => {
        try {
          fn();
        } catch (err) {
          throw new ThrownInside(err);
        }
      });
    } catch (err) {
      this.batch = undefined;
      for (const entry of batch) this.record(entry.write, entry.failed);
      if (err instanceof ThrownInside) throw err.err;
      return;
    } finally {
      this.batch = undefined;
    }
    for (const entry of batch) entry.follow();
  }

  /**
   * Records the state `change` replaces and, with a callback, writes its `route_backup`. A change captured
   * before (planned again on a fresh read) gets its record's previous state and a new backup only when that
   * state differs. The backup's first attempt starts at once but is not awaited: the writer holds every
   * queued change meanwhile, so one slow receiver would hold up the changes of every other request.
   * `failed` is called, in place of all that, when it could not be recorded.
   */
  capture(change: RecordedChange, previous: RouteJson | null, failed: (err: unknown) => void): void {
    const seen = canonicalJson(previous);
    if (change.capturedWith === seen) return;
    const prev = previous === null ? null : JSON.stringify(previous);
    this.record(() => {
      const now = new Date().toISOString();
      const id = change.id ?? this.insert(change, prev, now);
      if (change.id !== undefined) this.o.store.setPrevious(id, prev);
      let ev: string | undefined;
      if (change.callbackUrl !== undefined) {
        ev = this.o.outbox.add({
          type: "route_backup",
          url: change.callbackUrl,
          orderingKey: change.orderingKey,
          data: { ...change.about, change_id: id, previous_route: previous, captured_at: now },
        });
        this.o.store.setBackupEventId(id, ev);
      }
      return () => {
        change.id = id;
        change.capturedWith = seen;
        this.inFlight.add(id);
        if (ev) change.deliveries.push(this.o.outbox.deliverNow(ev, this.o.firstAttemptTimeoutMs));
      };
    }, failed);
  }

  /**
   * Records how a captured change ended, with its `route_change` when it has a callback, starts that
   * event's first attempt once the backup's attempts have ended (the ordering key would hold it until then
   * anyway), then calls `done`; with the error instead when it could not be recorded. A change never
   * captured (Caddy unreachable, a 404/409) has no record to finish.
   */
  settle(change: RecordedChange, end: ChangeEnd, done: (err?: unknown) => void): void {
    const id = change.id;
    if (id === undefined) {
      done();
      return;
    }
    const outcome = recorded(end.outcome);
    const error = outcomeText(end.outcome);
    this.record(
      () => {
        const ev = this.finish(change, id, end, outcome, error);
        return () => {
          this.inFlight.delete(id);
          if (ev !== null) {
            const backups = Promise.all(change.deliveries);
            change.deliveries.push(
              backups.then(() => this.o.outbox.deliverNow(ev, this.o.firstAttemptTimeoutMs)),
            );
          }
          done();
        };
      },
      (err) => {
        this.inFlight.delete(id);
        done(err);
      },
    );
  }

  /**
   * Resolves once the change's own first attempts have ended (each bounded by the attempt's time-out), so
   * a receiver that answers in time has the backup and the outcome by the time the caller learns it.
   */
  async delivered(change: RecordedChange): Promise<void> {
    await Promise.all(change.deliveries);
  }

  /** Whether change `id` is being applied by this process now. */
  isInFlight(id: number): boolean {
    return this.inFlight.has(id);
  }

  /** Writes a change's outcome and, with a callback, its `route_change`; returns that event's id. */
  private finish(
    change: RecordedChange,
    id: number,
    end: ChangeEnd,
    outcome: SettledOutcome,
    error: string | null,
  ): string | null {
    const finishedAt = new Date().toISOString();
    this.o.store.finish(id, outcome, error, finishedAt);
    if (change.callbackUrl === undefined) return null;
    const ev = this.o.outbox.add({
      type: "route_change",
      url: change.callbackUrl,
      orderingKey: change.orderingKey,
      data: {
        ...change.about,
        change_id: id,
        // A route_change receiver learns only whether the change happened: a refusal is a failure to it.
        outcome: outcome === "refused" ? "failed" : outcome,
        route: routeAfter(end),
        error: error === null ? null : withoutPaths(error),
        finished_at: finishedAt,
      },
    });
    this.o.store.setChangeEventId(id, ev);
    return ev;
  }

  /**
   * Writes a record in a transaction of its own, or in a savepoint of the `together` under way, whose
   * commit its follow-up then waits for.
   */
  private record(write: () => () => void, failed: (err: unknown) => void): void {
    let follow: () => void;
    try {
      follow = this.o.store.transaction(write);
    } catch (err) {
      failed(err);
      return;
    }
    if (this.batch) this.batch.push({ write, failed, follow });
    else follow();
  }

  private insert(change: RecordedChange, previous: string | null, now: string): number {
    return this.o.store.insert({
      operation: change.about.operation,
      route_id: change.about.route_id,
      previous,
      requested: change.op.kind === "delete" ? null : JSON.stringify(change.op.route),
      requested_at: now,
      request_id: change.about.request_id,
      restored_from: change.about.restored_from ?? null,
    });
  }
}
