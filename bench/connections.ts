/**
 * The connection benchmarks beside the API one: `npm run bench -- --keepalive` (failed requests of one
 * route's keep-alive clients while other routes change) and `npm run bench -- --streams` (what
 * `stream_close_delay` costs Caddy's memory). Resolves with the exit code, or undefined when neither flag
 * was given.
 */
import { fileDialCost, keepAliveBench, keepAliveTable } from "./keepalive.js";
import { streamsBench, streamsTable } from "./streams.js";

export async function connectionBenches(argv: readonly string[]): Promise<number | undefined> {
  const keepalive = argv.includes("--keepalive");
  const streams = argv.includes("--streams");
  if (!keepalive && !streams) return undefined;
  if (keepalive) {
    console.log(`${keepAliveTable(await keepAliveBench())}\n`);
    const cost = await fileDialCost();
    console.log(
      `upstream read from a file: ${cost.fileUs.toFixed(0)} us per request, against ${cost.literalUs.toFixed(0)} us with the address in the config (4 keep-alive clients, median of 5 rounds)\n`,
    );
  }
  if (streams) console.log(streamsTable(await streamsBench()));
  return 0;
}
