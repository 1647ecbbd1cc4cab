import type { TestContext } from "node:test";
import { type CaddyAdmin, CaddyUnavailableError } from "../../src/caddy/admin.js";
import { metricSample } from "../../support/prometheus.js";
import { buildTestApp } from "../helpers/app.js";
import { startCaddy } from "../helpers/caddy.js";
import { startUpstream } from "../helpers/http.js";

/** The agent on a real Caddy of its own, with one loopback upstream answering "u". */
export async function setup(t: TestContext) {
  const caddy = await startCaddy(t);
  const h = await buildTestApp(t, { HOSTKEEPER_CADDY_ADMIN: caddy.adminUrl });
  const up = await startUpstream(t, "u");
  return { caddy, ...h, up };
}

/** A route write request for `domain` with one loopback upstream. */
export const route = (domain: string, port: number, extra: Record<string, unknown> = {}) => ({
  domain,
  upstreams: [{ dial: `127.0.0.1:${port}` }],
  ...extra,
});

/**
 * Makes the agent's first admin write lose its answer after Caddy applied it (a connection breaking then
 * cannot be caused on demand): `afterFirst` runs before the break (another writer's change landing
 * meanwhile); with `failLater`, every later write breaks too, unsent. Returns how many writes were made.
 */
export function loseFirstWriteAnswer(
  t: TestContext,
  admin: CaddyAdmin,
  opts: { afterFirst?: () => Promise<unknown>; failLater?: boolean } = {},
): () => number {
  const realWrite = admin.write.bind(admin);
  let calls = 0;
  t.mock.method(admin, "write", async (...args: Parameters<CaddyAdmin["write"]>) => {
    calls++;
    if (calls > 1 && !opts.failLater) return realWrite(...args);
    if (calls === 1) {
      await realWrite(...args);
      await opts.afterFirst?.();
    }
    throw new CaddyUnavailableError("Caddy admin API broke off: socket hang up", {
      cause: Object.assign(new Error("socket hang up"), { code: "ECONNRESET" }),
    });
  });
  return () => calls;
}

/** Successful writes the agent made to Caddy's admin API: each is one config change (one reload). */
export async function writesToCaddy(call: Awaited<ReturnType<typeof buildTestApp>>["call"]): Promise<number> {
  const text = (await call({ method: "GET", url: "/metrics" })).body;
  let sum = 0;
  for (const method of ["POST", "PUT", "PATCH", "DELETE"]) {
    const n = metricSample(text, "hostkeeper_caddy_admin_request_duration_seconds_count", {
      method,
      outcome: "2xx",
    });
    if (!Number.isNaN(n)) sum += n;
  }
  return sum;
}
