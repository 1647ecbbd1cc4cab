import type { Logger } from "pino";
import type { RouteService } from "../proxy/service.js";
import { Periodic } from "../util/periodic.js";
import { writeAtomically } from "./artifacts/files.js";
import type { OperatorStore } from "./store.js";

export interface RouteSyncOptions {
  routes: RouteService;
  store: OperatorStore;
  /** The file Caddy reads the route's upstream from, on every request. */
  upstreamFile: string;
  /** How often a sync that has not succeeded yet is tried again in the background. */
  retryIntervalMs: number;
  log: Logger;
}

/**
 * Points the operator's route at the active slot. The route itself stays the same while there is an active
 * instance: it dials `{file.<upstream file>}`, which Caddy reads per request, so the switch is an atomic
 * replacement of that file. Putting the unchanged route again is not even sent to Caddy; only creating it
 * (first install) or turning it into a 503 answer (nothing to serve) reloads Caddy's config, which resets
 * a few connections arriving at that moment.
 *
 * Whoever changes the active slot calls `sync`, which runs whether or not the background is paused. Once
 * started, and while a slot is active, the background syncs until one succeeds, and again after any that
 * fails: the route may have been changed while the agent was down, or a sync may have failed with nobody left
 * to retry it. An update pauses the background from its switch to its end, so its own syncs are the only ones.
 */
export class RouteSync {
  private readonly background: Periodic;
  /** The last sync, which the next one waits for. */
  private last: Promise<void> = Promise.resolve();
  private inSync = false;

  constructor(private readonly o: RouteSyncOptions) {
    this.background = new Periodic({
      intervalMs: o.retryIntervalMs,
      round: () => this.retry(),
      what: "pointing the operator's route at the active slot",
      log: o.log,
    });
  }

  start(): void {
    this.background.start();
  }

  /** No background sync starts until `resume`; resolves once the one under way, if any, has ended. */
  pause(): Promise<void> {
    return this.background.pause();
  }

  resume(): void {
    this.background.resume();
  }

  /** No background sync starts again; resolves once the one under way, if any, has ended. */
  stop(): Promise<void> {
    return this.background.stop();
  }

  /** Points the route at the slot that is active when this sync's turn comes. */
  sync(): Promise<void> {
    // One sync at a time, each reading the active slot when its turn comes, whoever calls: a sync that read
    // the slot before a switch must not write it after the switch's own. An update's pause keeps the background
    // out of its switch as well, but this does not rely on it.
    const run = this.last.then(() => this.syncNow());
    this.last = run.catch(() => undefined);
    return run;
  }

  private async retry(): Promise<void> {
    // Without an active instance the route is left alone: an install creates it, and a first install that
    // fails turns it into a 503 answer itself.
    if (this.inSync || !this.o.store.active()?.version) return;
    await this.sync();
  }

  private async syncNow(): Promise<void> {
    const id = this.o.routes.operatorRouteId;
    if (id === undefined) throw new Error("no operator domain is configured, so there is no route to point");
    const active = this.o.store.active();
    if (active?.port != null) await writeAtomically(this.o.upstreamFile, `127.0.0.1:${active.port}`);
    const handle: Record<string, unknown> =
      active?.port != null
        ? { handler: "reverse_proxy", upstreams: [{ dial: `{file.${this.o.upstreamFile}}` }] }
        : { handler: "static_response", status_code: 503, body: "operator unavailable" };
    this.inSync = false;
    await this.o.routes.put({ "@id": id, match: [{ host: [id] }], handle: [handle], terminal: true });
    this.inSync = true;
  }
}
