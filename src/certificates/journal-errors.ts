import type { Logger } from "pino";
import { CHILD_ENV, childEnv, execChild } from "../util/child-env.js";
import type { ObtainError, ObtainErrorLog } from "./obtain-errors.js";

/** Lines of Caddy's journal read at most this often; lists in between answer what was read last. */
const EVERY_MS = 30_000;
/** The first read's lines (the journal's newest), and the most one read takes in. */
const FIRST_LINES = 20_000;
const MAX_BYTES = 32 * 1024 * 1024;
const CURSOR = /^-- cursor: (.+)$/m;

/**
 * Caddy's failures to get certificates, read from the systemd journal of its unit: the packaged Caddy logs
 * to stderr, which is its journal, and the agent leaves that log where the host's tools expect it. Each read
 * takes what the journal gained since the last one (`--after-cursor`), the first the newest FIRST_LINES,
 * and runs at most once every EVERY_MS, whoever asks; lines go to the same reader as a log file's.
 */
export class JournalErrors {
  private cursor: string | undefined;
  private lastRead = Number.NEGATIVE_INFINITY;
  private reading: Promise<void> | undefined;

  constructor(
    private readonly unit: string,
    private readonly errors: ObtainErrorLog,
    private readonly log: Logger,
    private readonly now: () => number = Date.now,
  ) {}

  async read(): Promise<ReadonlyMap<string, ObtainError>> {
    if (this.now() - this.lastRead >= EVERY_MS) {
      this.reading ??= this.readOnce().finally(() => {
        this.reading = undefined;
      });
      await this.reading;
    }
    return this.errors.current();
  }

  private readOnce(): Promise<void> {
    const args = ["-u", this.unit, "-o", "cat", "--no-pager", "--show-cursor"];
    args.push(...(this.cursor ? [`--after-cursor=${this.cursor}`] : ["-n", String(FIRST_LINES)]));
    return new Promise((resolve) => {
      execChild(
        "journalctl",
        args,
        { timeout: 10_000, maxBuffer: MAX_BYTES, env: childEnv(process.env, CHILD_ENV.journal) },
        (err, stdout) => {
          this.lastRead = this.now();
          if (err) {
            this.log.warn({ err, unit: this.unit }, "could not read Caddy's journal for certificate errors");
          } else {
            const cursor = CURSOR.exec(stdout);
            if (cursor) this.cursor = cursor[1];
            this.errors.readLines(stdout.split("\n").filter((l) => l.startsWith("{")));
          }
          resolve();
        },
      );
    });
  }
}
