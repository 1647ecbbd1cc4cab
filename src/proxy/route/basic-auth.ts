/*
 * Basic auth that does not tell which usernames exist (docs/decisions/basic-auth-decoy.md). Caddy's
 * `http_basic` checks an unknown user's password against a bcrypt hash of its own, of cost 14 (a second of
 * CPU), whatever the route's users' cost; and its hash cache keys that check by the password alone, so
 * after one unknown user every other with the same password answers at once. So Caddy never sees an
 * unknown user: a request whose `Authorization` names none of the route's users (matched on the base64
 * text, which fixes the bytes of `<username>:`) has it rewritten first to name a decoy account, with
 * the whole original `<username>:<password>` as the password (the base64 of `<decoy>:`, a multiple of 3
 * bytes, put before the original text). The decoy's hash has the users' cost and no password: an unknown
 * user costs one hash of that cost, cached per username and password as a known user's wrong password is.
 */

type Handler = Record<string, unknown>;

/** The cost of a bcrypt hash (`$2a$`, `$2b$`, `$2y$`), undefined for anything else. */
export function bcryptCost(hash: string): number | undefined {
  const m = /^\$2[aby]\$(\d\d)\$[./A-Za-z0-9]{53}$/.exec(hash);
  return m ? Number(m[1]) : undefined;
}

const BASE64 = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
/** Go's `Request.BasicAuth` takes the scheme in any case, followed by exactly one space. */
const SCHEME = "^[Bb][Aa][Ss][Ii][Cc] ";
/**
 * 9 bytes with the `:`, so its base64 ends on a group boundary and the original text decodes unchanged
 * after it; a control character, which no user's name may hold, so it is no one's.
 */
export const DECOY_USER = "\u0000hkdecoy";
/** What a request naming no user gets before its base64 text, so that it names the decoy. */
export const DECOY_PREFIX = `Basic ${Buffer.from(`${DECOY_USER}:`).toString("base64")}`;
/** Salt and digest of no password: nothing was hashed to make them, so no password matches. */
const DECOY_TAIL = "IoaA/aUPU.8fO2HNVESaEWv7w8iVdkhBHqZfY17bqMDm86jAJpBOl";
/** The placeholder of every `Authorization` value of the request, joined with `,`. */
const AUTHORIZATION = "{http.request.header.Authorization}";

const char = (i: number): string => {
  const c = BASE64[i] ?? "";
  return c === "+" || c === "/" ? `\\${c}` : c;
};
const chars = (from: number, count: number): string =>
  `[${Array.from({ length: count }, (_, x) => char(from + x)).join("")}]`;

/**
 * What the base64 text of `<username>:<anything>` starts with: the groups of three bytes exactly, then
 * the one or two bytes left, whose last character also holds bits of what follows (or, at the end, bits
 * Go's decoder ignores), so it is any character with the right leading bits.
 */
function usernamePattern(username: string): string {
  const bytes = Buffer.from(`${username}:`, "utf8");
  const whole = bytes.length - (bytes.length % 3);
  let out = bytes.subarray(0, whole).toString("base64").replace(/[+/]/g, "\\$&");
  const [a = 0, b = 0] = bytes.subarray(whole);
  if (bytes.length - whole === 1) out += char(a >> 2) + chars((a & 3) << 4, 16);
  if (bytes.length - whole === 2)
    out += char(a >> 2) + char(((a & 3) << 4) | (b >> 4)) + chars((b & 15) << 2, 4);
  return out;
}

/**
 * An `Authorization` placeholder value that names one of `usernames`: one header only (a second value
 * brings a `,`, which base64 does not hold), the Basic scheme, base64 text.
 */
export const knownUsersPattern = (usernames: readonly string[]): string =>
  `${SCHEME}(?:${usernames.map(usernamePattern).join("|")})[A-Za-z0-9+/]*=?=?$`;

/** The decoy's account, for the route's `http_basic` beside its users: a hash of `cost` that no password has. */
export const decoyAccount = (cost: number) => ({
  username: DECOY_USER,
  password: `$2b$${String(cost).padStart(2, "0")}$${DECOY_TAIL}`,
});

/**
 * The subroute that makes every request whose credentials name none of `usernames` name the decoy, before
 * the route's `authentication` handler. A request without credentials is left as it is: Caddy answers it
 * without a check.
 */
export function decoyRoute(usernames: readonly string[]) {
  return {
    match: [{ not: [{ vars_regexp: { [AUTHORIZATION]: { pattern: knownUsersPattern(usernames) } } }] }],
    handle: [
      {
        handler: "headers",
        request: {
          replace: {
            Authorization: [{ search_regexp: SCHEME, replace: DECOY_PREFIX }],
          },
        },
      },
    ],
  };
}

/** Whether a subroute is a decoy route (written by `decoyRoute`). */
export function isDecoyRoute(sub: { match?: Record<string, unknown>[] }): boolean {
  const not = sub.match?.[0]?.not;
  return Array.isArray(not) && (not[0] as Handler | undefined)?.vars_regexp !== undefined;
}
