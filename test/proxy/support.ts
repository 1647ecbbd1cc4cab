import type { TestContext } from "node:test";
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
