import type { RouteJson } from "../../caddy/routes/plan.js";
import {
  bcryptCost,
  DECOY_PREFIX,
  DECOY_USER,
  decoyAccount,
  decoyRoute,
  isDecoyRoute,
} from "./basic-auth.js";
import { unliteral } from "./policies.js";
import { writtenRequest } from "./written-request.js";

/*
 * Routes with `basic_auth` that an earlier version of the agent wrote have no decoy (basic-auth.ts): Caddy
 * tells their unknown users by time. At start the agent gives each the decoy it would write today, when
 * that makes exactly the route a write request makes (the agent's own route, its users of one cost);
 * any other route, hand-written or of users of several costs, is left as it is.
 */

type Json = Record<string, unknown>;
type Account = { username: string; password: string };

/** The route with the decoy the agent writes today, or the route itself when it has one or cannot get one. */
export function withDecoy<R extends RouteJson>(route: R): R {
  const handle = route.handle ?? [];
  const at = handle.findIndex((h) => h.handler === "subroute");
  const sub = handle[at] as Json | undefined;
  const routes = sub?.routes as RouteJson[] | undefined;
  if (!sub || !Array.isArray(routes) || routes.some(isDecoyRoute)) return route;
  const i = routes.findIndex((r) => (r.handle?.[0] as Json | undefined)?.handler === "authentication");
  const auth = routes[i]?.handle?.[0] as Json | undefined;
  const basic = (auth?.providers as Json | undefined)?.http_basic as Json | undefined;
  const accounts = basic?.accounts as Account[] | undefined;
  if (!auth || !basic || !Array.isArray(accounts) || accounts.some((a) => a.username === DECOY_USER))
    return route;
  const cost = bcryptCost(accounts[0]?.password ?? "");
  if (cost === undefined) return route;
  const authorized = { ...routes[i], handle: [...(routes[i]?.handle ?? [])] };
  authorized.handle[0] = {
    ...auth,
    providers: {
      ...(auth.providers as Json),
      http_basic: { ...basic, accounts: [...accounts, decoyAccount(cost)] },
    },
  };
  const decoy = decoyRoute(accounts.map((a) => unliteral(a.username)));
  const nextRoutes = [...routes.slice(0, i), decoy, authorized, ...routes.slice(i + 1)];
  const nextHandle = [...handle];
  nextHandle[at] = { ...sub, routes: nextRoutes };
  const upgraded = { ...route, handle: nextHandle };
  return writtenRequest(upgraded) === undefined ? route : upgraded;
}

/**
 * Whether Caddy's JSON text of routes surely has no route the agent would give a decoy: as many decoy
 * header rewrites as `http_basic` providers. False means "parse and look" (as a hand-written one makes).
 */
export function decoysInPlace(text: string): boolean {
  const count = (needle: string) => text.split(needle).length - 1;
  return count('"http_basic"') === count(`"replace":"${DECOY_PREFIX}"`);
}
