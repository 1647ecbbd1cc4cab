import type { Logger } from "pino";
import { CaddyApiError, CaddyUnavailableError } from "../caddy/admin.js";
import type { RoutesState, RoutesStore } from "../caddy/routes/caddy-routes.js";
import { type LeadingRoute, leadPlan } from "../caddy/routes/leading-route.js";
import {
  type ChangeEnd,
  type ChangeOutcome,
  opId,
  type Plan,
  plan,
  type RouteJson,
} from "../caddy/routes/plan.js";
import { sameJson } from "../util/canonical-json.js";
import type { ChangeJournal, RecordedChange } from "./journal.js";

/** A queued change and how it is answered (see `RouteWriter.submit`). */
export interface Pending {
  change: RecordedChange;
  /** Records how the change ended and hands the answer to whoever submitted it; only the first call counts. */
  answer: (end: ChangeEnd) => void;
  /** How many changes went to Caddy in the write that last carried this one; 0 when none did. */
  batchSize: number;
  /** The state it replaces, as last planned. */
  previous: RouteJson | null;
  /** When the writer got it (performance.now()). */
  arrivedAt: number;
}

/** Changes taken to Caddy together, and whether an If-Match failure may still re-read and re-apply them. */
interface Step {
  changes: Pending[];
  mayRetry: boolean;
}

/**
 * Takes one batch of changes to Caddy and answers every change in it. The batch starts as one step; a step
 * that cannot answer its changes yet puts them back at the front: to plan them again on a fresh read (the
 * cached routes may be stale, or If-Match failed), or as two halves when Caddy refused them together, so
 * each half is answered before the next step starts. Every step plans its changes against what Caddy holds
 * and captures, through the journal, the state each applied change replaces before writing (see
 * `captureAll`); each change's answer records how it ended (see `Pending.answer`).
 */
export class WriteSteps {
  private wrote = false;
  /** Caddy's answer about each id asked for the batch under way or gathering: each is asked once per batch. */
  private readonly inUse = new Map<string, Promise<Set<string>>>();

  constructor(
    private readonly routes: RoutesStore,
    private readonly journal: Pick<ChangeJournal, "capture" | "together">,
    private readonly log: Logger,
    /** The route kept ahead of all others (the HTTPS redirect), made again when a change touches it. */
    private readonly lead?: LeadingRoute,
  ) {}

  /** Answers every change of `batch`; true when it wrote to Caddy (the routes' new ETag is then still to be known). */
  async run(batch: Pending[]): Promise<boolean> {
    this.wrote = false;
    try {
      const steps: Step[] = [{ changes: batch, mayRetry: true }];
      for (let step = steps.shift(); step !== undefined; step = steps.shift())
        steps.unshift(...(await this.step(step)));
      return this.wrote;
    } finally {
      this.inUse.clear();
    }
  }

  /**
   * Starts asking Caddy about the ids the creates among `changes` would take while their batch is still
   * gathering, so the answers are in by the time it is planned (see `elsewhere`).
   */
  lookUp(changes: readonly Pending[]): void {
    this.ask(createdIds(changes));
  }

  /** One step; returns the steps it leaves to do (none once its changes are answered). */
  private async step({ changes, mayRetry }: Step): Promise<Step[]> {
    let known: { state: RoutesState; cached: boolean };
    let elsewhere: Set<string>;
    try {
      known = await this.routes.current();
      elsewhere = await this.elsewhere(changes, known.state);
    } catch (err) {
      this.routes.forget();
      this.journal.together(() => {
        for (const p of changes) p.answer({ outcome: failureOf(err), previous: p.previous });
      });
      return [];
    }
    const { state } = known;
    const first = this.plan(state, changes, elsewhere);
    // A 404 or 409, or a change that changes nothing, never reaches Caddy, so no If-Match would catch a
    // stale cache: confirm it on a fresh read.
    if (known.cached && (first.outcomes.some((o) => o.outcome.kind !== "applied") || changesNothing(first))) {
      this.routes.forget();
      return [{ changes, mayRetry }];
    }
    const { live, p } = this.captureAll(changes, state, elsewhere, first);
    // Every reload closes idle keep-alive connections (and, without stream_close_delay, streams): a
    // change that leaves every route as Caddy holds it is answered without one.
    if (p.applied.length === 0 || changesNothing(p)) {
      this.journal.together(() => answerAll(live, p));
      return [];
    }
    return this.write(live, p, state, mayRetry);
  }

  /**
   * The ids the changes' creates would take that Caddy's config holds outside the routes `state` holds: ids
   * are global in Caddy, so one used by another server or app refuses the create (409). Caddy is asked about
   * each id once per batch, and only about ids the routes do not answer for.
   */
  private async elsewhere(changes: Pending[], state: RoutesState): Promise<Set<string>> {
    const unknown = createdIds(changes).filter((id) => !state.index.first.has(id));
    this.ask(unknown);
    const held = new Set<string>();
    for (const id of unknown) if ((await this.inUse.get(id))?.has(id)) held.add(id);
    return held;
  }

  /** Asks Caddy which of `ids` its config holds, for those not asked yet in this batch. */
  private ask(ids: readonly string[]): void {
    const fresh = [...new Set(ids)].filter((id) => !this.inUse.has(id));
    if (fresh.length === 0) return;
    const found = this.routes.idsInUse(fresh);
    // A failure is answered by the step that awaits it; one asked for a batch that never needs it is moot.
    found.catch(() => {});
    for (const id of fresh) this.inUse.set(id, found);
  }

  /** Writes a captured plan and answers its changes, or says what is left to do. */
  private async write(live: Pending[], p: Plan, state: RoutesState, mayRetry: boolean): Promise<Step[]> {
    // The submitted changes the write carries (not the leading route a plan may add, index -1).
    const carried = p.applied.filter((a) => a.index >= 0).length;
    for (const a of p.applied) {
      const pending = live[a.index];
      if (pending) pending.batchSize = carried;
    }
    const written = await this.routes.write(state, p);
    switch (written.kind) {
      case "stale":
        if (mayRetry) return [{ changes: live, mayRetry: false }];
        this.failApplied(live, p, {
          kind: "unavailable",
          message: "Caddy's config kept changing under the agent (If-Match failed twice)",
        });
        return [];
      case "rejected":
        if (p.applied.length > 1) return halves(live, p).map((h) => ({ changes: h, mayRetry: true }));
        this.failApplied(live, p, written);
        return [];
      case "unavailable":
        this.failApplied(live, p, written);
        return [];
      case "uncertain":
        this.failApplied(
          live,
          p,
          await this.restore(state, `the change did not complete: ${written.message}`),
        );
        return [];
      case "written":
        this.wrote = true;
        this.journal.together(() => answerAll(live, p));
        return [];
    }
  }

  /**
   * Captures, through the journal, the state every change of plan `first` that will apply replaces; plans
   * again without the changes whose capture failed, until none fails. A change planned anew in a later step
   * (a fresh read, an If-Match failure, a refused batch split in two) is captured again: the journal records
   * a new backup, and sends it as a new `route_backup`, only when the state it replaces differs from the
   * one it captured before; its outcome and `route_change` follow once it is answered, whatever step that is.
   */
  private captureAll(
    changes: Pending[],
    state: RoutesState,
    elsewhere: Set<string>,
    first: Plan,
  ): { live: Pending[]; p: Plan } {
    let live = changes;
    for (let p = first; ; ) {
      const dropped: Pending[] = [];
      this.journal.together(() =>
        live.forEach((pending, i) => {
          const end = p.outcomes[i];
          pending.previous = end?.previous ?? null;
          if (end?.outcome.kind !== "applied") return;
          this.journal.capture(pending.change, end.previous, (err) => {
            dropped.push(pending);
            pending.answer({
              outcome: { kind: "capture_failed", message: (err as Error).message },
              previous: end.previous,
            });
          });
        }),
      );
      if (dropped.length === 0) return { live, p };
      live = live.filter((x) => !dropped.includes(x));
      p = this.plan(state, live, elsewhere);
    }
  }

  /** The changes planned over `state`, the leading route made again where they touch it. */
  private plan(state: RoutesState, changes: readonly Pending[], elsewhere: ReadonlySet<string>): Plan {
    const p = plan(
      state.routes,
      changes.map((x) => x.change.op),
      elsewhere,
      state.index,
    );
    if (this.lead) leadPlan(p, this.lead);
    return p;
  }

  /** The applied changes end in `failure`; the others keep their planned 404/409. */
  private failApplied(live: Pending[], p: Plan, failure: ChangeOutcome): void {
    this.journal.together(() =>
      live.forEach((pending, i) => {
        const end = p.outcomes[i];
        if (end)
          pending.answer(end.outcome.kind === "applied" ? { outcome: failure, previous: end.previous } : end);
      }),
    );
  }

  /** Puts the captured routes back after a change failed; the failure says whether that worked. */
  private async restore(before: RoutesState, why: string): Promise<ChangeOutcome> {
    this.log.warn({ why }, "route change failed; restoring the captured state");
    try {
      await this.routes.restore(before);
      return { kind: "rolled_back", message: `${why}; the previous routes were restored` };
    } catch (err) {
      this.log.error({ err, why }, "restoring the captured routes failed");
      return {
        kind: "rollback_failed",
        message: `${why}; restoring the previous routes failed too: ${(err as Error).message}`,
      };
    }
  }
}

/** The ids the creates among `changes` would take. */
const createdIds = (changes: readonly Pending[]): string[] =>
  changes.flatMap(({ change: { op } }) => (op.kind === "create" ? [opId(op)] : []));

/** Every change gets its planned end. */
function answerAll(live: Pending[], p: Plan): void {
  live.forEach((pending, i) => {
    const end = p.outcomes[i];
    if (end) pending.answer(end);
  });
}

/**
 * Splits a batch Caddy refused in two, so only the changes it refuses on their own fail. Changes that did
 * not apply (404/409) are re-planned with their neighbours: the cut falls between applied ones.
 */
function halves(live: Pending[], p: Plan): [Pending[], Pending[]] {
  const appliedIdx = new Set(p.applied.map((a) => a.index));
  const positions = live.map((_, i) => i).filter((i) => appliedIdx.has(i));
  const cut = positions[Math.floor(positions.length / 2)] ?? Math.ceil(live.length / 2);
  return [live.slice(0, cut), live.slice(cut)];
}

/** Whether every applied change of the plan puts back a route exactly as Caddy holds it. */
function changesNothing(p: Plan): boolean {
  return (
    p.applied.length > 0 &&
    p.applied.every(({ index, op }) => {
      const o = p.outcomes[index];
      return (
        op.kind !== "delete" &&
        o?.outcome.kind === "applied" &&
        o.previous !== null &&
        sameJson(o.previous, o.outcome.route)
      );
    })
  );
}

/** A read that failed before anything was written: Caddy unreachable, or answering with an error. */
function failureOf(err: unknown): ChangeOutcome {
  if (err instanceof CaddyUnavailableError) return { kind: "unavailable", message: err.message };
  if (err instanceof CaddyApiError)
    return { kind: "unavailable", message: `Caddy answered ${err.status}: ${err.message}` };
  return { kind: "unavailable", message: (err as Error).message };
}
