import { Writable } from "node:stream";
import pino from "pino";

/** A logger at `level` whose lines (JSON, one per entry) the test reads. */
export function capturedLogger(level: pino.Level): { log: pino.Logger; lines: string[] } {
  const lines: string[] = [];
  const stream = new Writable({
    write(chunk: Buffer, _enc, done) {
      lines.push(...chunk.toString().split("\n").filter(Boolean));
      done();
    },
  });
  return { log: pino({ level }, stream), lines };
}
