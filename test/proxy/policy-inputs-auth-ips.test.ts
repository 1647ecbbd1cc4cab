import assert from "node:assert/strict";
import { after, describe, test } from "node:test";
import {
  assertAccepted,
  assertRefused,
  bcryptLike,
  type Expected,
  inDataDir,
  type Refusal,
  refuse,
  sharedAgent,
} from "./refusals.js";

/*
 * Every rule of `basic_auth` and `allow_ips` refused with a 400 naming the field, sent as a create and as a
 * replace of a route with policies, against a real Caddy, with nothing changed; and a plain password sent
 * as a hash is neither repeated in the answer, nor logged, nor stored.
 */

const agent = sharedAgent(after);
const many = <T>(n: number, f: (i: number) => T): T[] => Array.from({ length: n }, (_, i) => f(i));

const run = (cases: readonly Refusal[]) => {
  for (const c of cases)
    test(c.name, async () => {
      await refuse(await agent(), c);
    });
};

const user = (username: string, password_hash = bcryptLike()) => ({ username, password_hash });
const auth = (users: unknown[], realm?: unknown) => ({
  basic_auth: { ...(realm === undefined ? {} : { realm }), users },
});

describe("basic_auth users", () => {
  const hash = (i: number, h: string, message: RegExp): Refusal => ({
    name: `password_hash ${JSON.stringify(h.length > 30 ? `${h.slice(0, 30)}...` : h)}`,
    body: () => auth([...["ana", "bo"].slice(0, i).map((n) => user(n)), user("cy", h)]),
    errors: [[`body.basic_auth.users[${i}].password_hash`, message]],
  });
  const NOT_BCRYPT = /must be a bcrypt hash \(\$2a\$, \$2b\$ or \$2y\$\); plain passwords are refused/;
  const COST = /must have a bcrypt cost of 4 to 14/;
  const name = (username: string, message: RegExp): Refusal => ({
    name: `username ${JSON.stringify(username.length > 30 ? `${username.slice(0, 30)}...` : username)}`,
    body: () => auth([user("ana"), user(username)]),
    errors: [["body.basic_auth.users[1].username", message]],
  });
  run([
    { name: "no users", body: () => auth([]), errors: [["body.basic_auth.users", /at least 1 item/]] },
    {
      name: "101 users",
      body: () => auth(many(101, (i) => user(`u${i}`))),
      errors: [["body.basic_auth.users", /at most 100 items/]],
    },
    {
      name: "no users field",
      body: () => ({ basic_auth: { realm: "r" } }),
      errors: [["body.basic_auth.users", /is required/]],
    },
    hash(2, "$2x$10$aaaaaaaaaaaaaaaaaaaaaaBBBBBBBBBBBBBBBBBBBBBBBBBBBBBBB", NOT_BCRYPT),
    hash(2, bcryptLike("10", "$2$"), NOT_BCRYPT),
    hash(2, bcryptLike("10", "$1$"), NOT_BCRYPT),
    hash(0, bcryptLike("03"), COST),
    hash(1, bcryptLike("15"), COST),
    hash(0, bcryptLike("00"), COST),
    hash(0, bcryptLike("99"), COST),
    hash(0, bcryptLike("4"), NOT_BCRYPT),
    hash(0, bcryptLike("10").slice(0, -1), NOT_BCRYPT),
    hash(0, `${bcryptLike("10")}a`, NOT_BCRYPT),
    hash(0, bcryptLike("10").replace("aaaa", "a+aa"), NOT_BCRYPT),
    hash(0, "", /at least 1 character/),
    hash(0, `$2b$10$${"a".repeat(200)}`, /at most 128 characters/),
    name("a:b", /must not contain :/),
    name(":", /must not contain :/),
    name("a\u0007b", /must not contain control characters/),
    name("a\nb", /must not contain control characters/),
    name("a\u007fb", /must not contain control characters/),
    name("a\u0085b", /must not contain control characters/),
    name("", /at least 1 character/),
    name("u".repeat(129), /at most 128 characters/),
    {
      name: "users of two costs (the one of more cost would be told from the others, and from no user)",
      body: () => auth([user("ana", bcryptLike("10")), user("bo", bcryptLike("12", "$2a$"))]),
      errors: [
        [
          "body.basic_auth.users[1].password_hash",
          /has bcrypt cost 12; every user of a route must have the same cost \(basic_auth\.users\[0\] has 10\)/,
        ],
      ],
    },
    {
      name: "a username twice",
      body: () => auth([user("ana"), user("bo"), user("ana")]),
      errors: [["body.basic_auth.users[2].username", /is the username of basic_auth\.users\[0\] too/]],
    },
    {
      name: "an unknown field in a user",
      body: () => auth([{ ...user("ana"), password: "x" }]),
      errors: [["body.basic_auth.users[0].password", /is not a known field/]],
    },
  ]);
});

describe("basic_auth realm", () => {
  const realm = (r: unknown, ...messages: RegExp[]): Refusal => ({
    name: `realm ${JSON.stringify(typeof r === "string" && r.length > 30 ? `${r.slice(0, 30)}...` : r)}`,
    body: () => auth([user("ana")], r),
    errors: messages.map((m) => ["body.basic_auth.realm", m]),
  });
  const FORM = /has characters or a form the field does not allow/;
  run([
    realm('say "hi"', FORM),
    realm("back\\slash", FORM),
    realm("r".repeat(129), /at most 128 characters/),
    realm("", /at least 1 character/, FORM),
    realm("Zoë", FORM),
    realm("tab\there", FORM),
    realm("line\nbreak", FORM),
    realm("\u007f", FORM),
    realm(5, /must be a string/),
  ]);
});

test("a plain password given as a hash is refused, and not in the answer, the log or the data folder", async () => {
  const a = await agent();
  const secret = "correct-horse-battery-staple-7431";
  const long = `long-plain-password-${"z".repeat(130)}`;
  const from = a.logLines.length;
  const bodies = await assertRefused(
    a,
    () => auth([user("ana"), user("bo", secret), user("cy", long)], "Staff"),
    [["body.basic_auth.users[2].password_hash", /at most 128 characters/]],
  );
  // The schema refuses the long one first; alone, the short one reaches the domain rule.
  bodies.push(
    ...(await assertRefused(a, () => auth([user("ana"), user("bo", secret)]), [
      ["body.basic_auth.users[1].password_hash", /plain passwords are refused/],
    ])),
  );
  const logged = a.logLines.slice(from);
  assert.ok(logged.length > 0, "the agent logged nothing: the log is not the one captured");
  for (const text of [secret, long]) {
    for (const body of bodies) assert.equal(body.includes(text), false, body);
    assert.deepEqual(
      logged.filter((l) => l.includes(text)),
      [],
    );
    assert.deepEqual(inDataDir(a, text), []);
  }
});

describe("allow_ips", () => {
  const ip = (entry: unknown, message: RegExp): Refusal => ({
    name: `entry ${JSON.stringify(entry)}`,
    body: () => ({ allow_ips: ["10.0.0.0/8", "::1", entry] }),
    errors: [["body.allow_ips[2]", message]],
  });
  const NOT_IP = /must be an IPv4 or IPv6 address, or a CIDR range/;
  run([
    {
      name: "an empty list",
      body: () => ({ allow_ips: [] }),
      errors: [["body.allow_ips", /at least 1 item/]],
    },
    {
      name: "257 entries",
      body: () => ({ allow_ips: many(257, (i) => `10.0.${i >> 8}.${i & 255}`) }),
      errors: [["body.allow_ips", /at most 256 items/]],
    },
    ...[
      "10.0.0.0/33",
      "::/129",
      "1.2.3",
      "1.2.3.4.5",
      "256.0.0.1",
      "01.2.3.4",
      "localhost",
      "example.com",
      "10.0.0.1/08",
      "10.0.0.0/8/8",
      "10.0.0.0/",
      "10.0.0.0/-1",
      "10.0.0.0/+8",
      "10.0.0.0/ 8",
      " 10.0.0.1",
      "[::1]",
      "::1/0128",
      "1.2.3.4:80",
      "**",
    ].map((e) => ip(e, NOT_IP)),
    // Caddy compares an IPv4 client with IPv4 ranges only: a mapped entry would never match (measured: 403).
    ...["::ffff:127.0.0.1", "::FFFF:7f00:1", "0:0:0:0:0:ffff:7f00:1", "::ffff:10.0.0.0/104"].map((e) =>
      ip(e, /is an IPv4-mapped IPv6 address; write the IPv4 address/),
    ),
    ip("1", /at least 2 characters/),
    ip(`::${"0:".repeat(31)}1`, /at most 64 characters/),
    ip(7, /must be a string/),
  ]);
  test("every bad entry is named", async () => {
    const errors: Expected[] = [1, 3].map((i) => [`body.allow_ips[${i}]`, NOT_IP]);
    await assertRefused(
      await agent(),
      () => ({ allow_ips: ["10.0.0.0/8", "10.0.0.0/33", "::1", "nope"] }),
      errors,
    );
  });
});

test("at the limits, basic_auth and allow_ips are accepted and read back as sent", async () => {
  const printable = many(95, (i) => String.fromCharCode(32 + i)).filter((c) => c !== '"' && c !== "\\");
  const request = {
    basic_auth: {
      realm: [...printable, ...printable].join("").slice(0, 128),
      users: [
        user("{env.USER}", bcryptLike("14", "$2a$")),
        user("ü".repeat(128), bcryptLike("14", "$2y$")),
        user("a\\{b} c", bcryptLike("14")),
        ...many(97, (i) => user(`u${i}`, bcryptLike("14"))),
      ],
    },
    allow_ips: [
      "0.0.0.0/0",
      "::/0",
      "2001:db8::1/128",
      "10.0.0.1/32",
      "127.0.0.1",
      ...many(251, (i) => `10.1.${i >> 8}.${i & 255}`),
    ],
  };
  const read = await assertAccepted(await agent(), request);
  assert.deepEqual(read.basic_auth, request.basic_auth);
  assert.deepEqual(read.allow_ips, request.allow_ips);
});
