import type { Logger } from "pino";
import { Periodic } from "../../util/periodic.js";
import { processStartTime } from "../../util/processes.js";
import { doubling } from "../../util/retry.js";
import { settledWithin } from "../../util/timers.js";
import type { RunningCaddy } from "./launch.js";

/** What the agent knows of the Caddy it runs, for the status endpoint. */
export interface CaddyProcessStatus {
  /** PID of the running Caddy; null while it is down. */
  pid: number | null;
  /** `running`; `restarting` between an exit and the next Caddy answering; `stopped` once the agent stops. */
  state: "running" | "restarting" | "stopped";
  /** The running Caddy was found running when the agent started (watched by its PID), not started by it. */
  adopted: boolean;
  /** How many times the agent has started Caddy again after it exited, since the agent started. */
  restarts: number;
  lastExitAt: string | null;
  lastRestartAt: string | null;
}

export interface CaddySupervisorOptions {
  /**
   * Delay before the first restart after an exit; it doubles per further exit, up to 64 times this, and
   * starts over once a Caddy has stayed up 64 times this.
   */
  restartBackoffMs: number;
  /** How often an adopted Caddy's PID is looked at. */
  pollMs: number;
  /** How long `close` waits at most for a restart under way. */
  closeTimeoutMs: number;
  log: Logger;
  /** Starts a new Caddy and resolves once it answers; its exits must reach `exited`. */
  relaunch: () => Promise<RunningCaddy>;
  /** Puts back what the config of a Caddy started again lacks; it logs its own failures and never throws. */
  repair: () => Promise<void>;
}

/**
 * Keeps the embedded Caddy running while the agent runs.
 *
 * - An exit is noticed two ways. A Caddy the agent started is its child: the child's `exit` event reaches
 *   `exited` (see `launchCaddy`). An adopted Caddy, found running at start, is not a child and cannot be
 *   waited on: its PID is polled every `pollMs`, with its kernel start time, as PIDs are reused.
 * - An exit makes the state `restarting` and schedules a new Caddy after a back-off: `restartBackoffMs`
 *   doubled for each exit in a row, at most 64 times it. An exit is one in a row unless the Caddy before it
 *   stayed up 64 times `restartBackoffMs`. A restart that fails (an address held, no answer in time) counts
 *   as one more exit in a row and is scheduled the same way: the loop never stops while the agent runs, and
 *   never spins.
 * - The new Caddy runs with `--resume`, so with the routes it had; `repair` only puts back what its config
 *   lost (the managed server, its log). A repair that fails leaves Caddy running (another Caddy would not
 *   fix it) and shows in /readyz.
 * - `close` ends supervision, not Caddy: Caddy outlives the agent, so restarting or upgrading the agent
 *   never interrupts traffic. A restart under way is waited for, within `closeTimeoutMs`.
 */
export class CaddySupervisor {
  private current: RunningCaddy | undefined;
  private state: CaddyProcessStatus["state"] = "stopped";
  private adopted = false;
  private restarts = 0;
  /** Exits in a row, each without the Caddy before it staying up long enough: the backoff's exponent. */
  private exitsInARow = 0;
  private lastExitAt: string | null = null;
  private lastRestartAt: string | null = null;
  /** The restart due after an exit. */
  private timer: NodeJS.Timeout | undefined;
  /** The poll of an adopted Caddy's PID. */
  private poll: Periodic | undefined;
  private restarting: Promise<void> | undefined;
  private closed = false;

  constructor(private readonly o: CaddySupervisorOptions) {}

  /** PID of the running Caddy; undefined while none runs (or an adopted one could not be identified). */
  get pid(): number | undefined {
    return this.current?.pid;
  }

  /** A Caddy the agent started, answering: its exit comes as an event. */
  launched(caddy: RunningCaddy): void {
    this.current = caddy;
  }

  /** A Caddy found running, not the agent's child: its PID is polled. Undefined: nothing to watch. */
  adopt(caddy: RunningCaddy | undefined): void {
    this.adopted = true;
    if (!caddy) return;
    this.current = caddy;
    const poll = new Periodic({
      intervalMs: this.o.pollMs,
      round: () => {
        if (processStartTime(caddy.pid) === caddy.procStart) return;
        void poll.stop();
        this.exited(caddy.pid, "is gone");
      },
      what: "looking at the adopted Caddy's PID",
      log: this.o.log,
    });
    this.poll = poll;
    poll.start();
  }

  /** Caddy runs as configured: the agent's start is done. */
  markRunning(): void {
    this.state = "running";
  }

  /** A Caddy being stopped on purpose: its exit is not one to restart from. */
  forget(pid: number): void {
    if (this.current?.pid === pid) this.current = undefined;
  }

  /** The Caddy `pid` has exited (`how`, in words): a restart is due after the backoff delay. */
  exited(pid: number, how: string): void {
    const was = this.current;
    if (was?.pid !== pid) return;
    this.current = undefined;
    this.lastExitAt = new Date().toISOString();
    if (this.closed) return;
    if (Date.now() - was.startedAt >= this.o.restartBackoffMs * 64) this.exitsInARow = 0;
    this.scheduleRestart({ caddyPid: pid }, `the embedded Caddy (pid ${pid}) ${how}`);
  }

  /** Stops supervising (no restart from now on); Caddy keeps running. Waits for a restart under way. */
  async close(): Promise<void> {
    this.closed = true;
    clearTimeout(this.timer);
    void this.poll?.stop();
    if (this.restarting) await settledWithin(this.restarting, this.o.closeTimeoutMs);
    this.state = "stopped";
  }

  status(): CaddyProcessStatus {
    return {
      pid: this.current?.pid ?? null,
      state: this.state,
      adopted: this.adopted,
      restarts: this.restarts,
      lastExitAt: this.lastExitAt,
      lastRestartAt: this.lastRestartAt,
    };
  }

  private scheduleRestart(fields: Record<string, unknown>, why: string): void {
    const base = this.o.restartBackoffMs;
    const delayMs = doubling(base, base * 64)(this.exitsInARow);
    this.exitsInARow++;
    this.state = "restarting";
    this.o.log.warn(
      { ...fields, restartInMs: delayMs, restarts: this.restarts },
      `${why}; starting it again in ${delayMs} ms`,
    );
    this.timer = setTimeout(() => {
      this.restarting = this.restart().finally(() => {
        this.restarting = undefined;
      });
    }, delayMs);
    this.timer.unref();
  }

  private async restart(): Promise<void> {
    if (this.closed) return;
    this.restarts++;
    this.lastRestartAt = new Date().toISOString();
    this.adopted = false;
    try {
      this.current = await this.o.relaunch();
    } catch (err) {
      if (!this.closed) this.scheduleRestart({ err }, "starting the embedded Caddy again failed");
      return;
    }
    this.state = "running";
    this.o.log.warn(
      { caddyPid: this.current.pid, restarts: this.restarts },
      "started the embedded Caddy again",
    );
    await this.o.repair();
  }
}
