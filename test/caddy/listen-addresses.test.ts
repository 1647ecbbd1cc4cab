import assert from "node:assert/strict";
import { once } from "node:events";
import { createServer } from "node:net";
import { test } from "node:test";
import {
  accepts,
  listeningInodes,
  socketHolders,
  tcpAddresses,
  tryBind,
} from "../../src/caddy/process/listen-addresses.js";
import { freePort } from "../../support/loopback.js";

test("Caddy listen entries as TCP addresses: wildcards, brackets, networks, ranges; other networks left out", () => {
  assert.deepEqual(
    tcpAddresses([
      ":80",
      "127.0.0.1:8080",
      "[::1]:443",
      "tcp4/:81",
      "tcp6/[::]:82",
      "unix//run/x.sock",
      "udp/:443",
    ]),
    [
      { text: ":80", host: "", port: 80, family: "any" },
      { text: "127.0.0.1:8080", host: "127.0.0.1", port: 8080, family: "any" },
      { text: "[::1]:443", host: "::1", port: 443, family: "any" },
      { text: "tcp4/:81", host: "", port: 81, family: "ipv4" },
      { text: "tcp6/[::]:82", host: "::", port: 82, family: "ipv6" },
    ],
  );
  assert.deepEqual(
    tcpAddresses(["localhost:9000-9002"]).map((a) => `${a.host}:${a.port}`),
    ["localhost:9000", "localhost:9001", "localhost:9002"],
  );
  assert.equal(tcpAddresses([":1-60000"]).length, 32, "a wide range is checked at its first ports only");
});

test("a held address: the bind fails, its listening socket is found, and so is its holder", async (t) => {
  const port = await freePort();
  const a = tcpAddresses([`127.0.0.1:${port}`])[0] as NonNullable<ReturnType<typeof tcpAddresses>[0]>;
  assert.equal(await tryBind(a), undefined, "free");
  assert.deepEqual(listeningInodes(a), new Set());
  assert.equal((await accepts(a, 1000)).ok, false);

  const holder = createServer();
  holder.listen(port, "127.0.0.1");
  await once(holder, "listening");
  t.after(() => holder.close());
  assert.equal((await tryBind(a))?.code, "EADDRINUSE");
  // A wildcard address overlaps it too: Caddy on `:port` could not bind either.
  const wildcard = tcpAddresses([`:${port}`])[0] as NonNullable<ReturnType<typeof tcpAddresses>[0]>;
  assert.equal((await tryBind(wildcard))?.code, "EADDRINUSE");
  assert.equal(listeningInodes(a).size, 1);
  const { holders, unattributed } = socketHolders(a);
  assert.deepEqual(
    holders.map((h) => h.pid),
    [process.pid],
  );
  assert.equal(unattributed, 0);
  assert.equal((await accepts(a, 1000)).ok, true);
  assert.equal((await accepts(wildcard, 1000)).ok, true, "a wildcard is tried on loopback");
  // Another address on the same port does not overlap.
  const other = tcpAddresses([`127.0.0.2:${port}`])[0] as NonNullable<ReturnType<typeof tcpAddresses>[0]>;
  assert.equal(listeningInodes(other).size, 0);
});
