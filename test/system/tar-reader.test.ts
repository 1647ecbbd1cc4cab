import assert from "node:assert/strict";
import { test } from "node:test";
import { TarReader } from "../../src/system/packages/tar-reader.js";

const BLOCK = 512;

/** A ustar header: name, size (octal), type flag and prefix where tar puts them; no checksum (not read). */
function header(name: string, size: number, type: string, prefix = ""): Buffer {
  const h = Buffer.alloc(BLOCK);
  h.write(name, 0, 100, "utf8");
  h.write(`${size.toString(8).padStart(11, "0")}\0`, 124, 12, "utf8");
  h.write(type, 156, 1, "utf8");
  h.write("ustar\0", 257, 6, "utf8");
  h.write("00", 263, 2, "utf8");
  h.write(prefix, 345, 155, "utf8");
  return h;
}

const padded = (data: Buffer) => Buffer.concat([data, Buffer.alloc((BLOCK - (data.length % BLOCK)) % BLOCK)]);
const entry = (name: string, data: Buffer | string, type = "0", prefix = "") => {
  const bytes = Buffer.from(data);
  return Buffer.concat([header(name, bytes.length, type, prefix), padded(bytes)]);
};

/** A pax extended header naming the next entry: each record is `<length> <key>=<value>\n`, length included. */
function paxPath(path: string): Buffer {
  const body = ` path=${path}\n`;
  let length = body.length + 1;
  while (`${length}${body}`.length !== length) length++;
  return entry("./PaxHeaders/0", `${length}${body}`, "x");
}

const LONG = `usr/share/doc/${"l".repeat(120)}/changelog.Debian.gz`;
const WANTED = new Set([
  "usr/share/doc/plain/changelog.gz",
  "usr/share/doc/prefixed/changelog.gz",
  LONG,
  "usr/share/doc/pax/changelog.gz",
  "usr/share/doc/empty/changelog.gz",
  "usr/share/doc/big/changelog.gz",
]);

const members = [
  entry("./usr/share/doc/", "", "5"),
  entry("./usr/lib/skipped/data", "s".repeat(3000)),
  entry("./usr/share/doc/plain/changelog.gz", "plain data"),
  entry("prefixed/changelog.gz", "p".repeat(700), "0", "usr/share/doc"),
  entry("././@LongLink", `${LONG}\0`, "L"),
  entry(LONG.slice(0, 99), "long data"),
  paxPath("usr/share/doc/pax/changelog.gz"),
  entry("./PaxHeaders-truncated-name", "pax data"),
  entry("./usr/share/doc/empty/changelog.gz", ""),
  entry("./usr/share/doc/big/changelog.gz", "b".repeat(2000)),
  entry("/usr/share/doc/plain/not-wanted", "n"),
];
const archive = Buffer.concat([...members, Buffer.alloc(2 * BLOCK)]);

const EXPECTED = [
  ["usr/share/doc/plain/changelog.gz", "plain data"],
  ["usr/share/doc/prefixed/changelog.gz", "p".repeat(700)],
  [LONG, "long data"],
  ["usr/share/doc/pax/changelog.gz", "pax data"],
  ["usr/share/doc/empty/changelog.gz", ""],
];

/** Reads `archive` in chunks of `size` bytes; the members as [name, text], in order. */
function readInChunks(size: number): string[][] {
  const reader = new TarReader((name, bytes) => WANTED.has(name) && bytes <= 1000);
  const out: string[][] = [];
  for (let at = 0; at < archive.length; at += size)
    for (const m of reader.push(archive.subarray(at, at + size))) out.push([m.name, m.data.toString("utf8")]);
  return out;
}

test("the tar reader keeps the members asked for, by plain, ustar-prefixed, GNU long and pax names, whatever the chunks", () => {
  for (const size of [archive.length, BLOCK, 1, 7, 511, 513, 4096])
    assert.deepEqual(readInChunks(size), EXPECTED, `chunks of ${size} bytes`);
});

test("the tar reader hands a member back with the chunk that completes it, so the stream can stop there", () => {
  const reader = new TarReader((name) => name === "usr/share/doc/plain/changelog.gz");
  // The archive up to the plain changelog's last data block: its header and one block of data.
  const upTo = members.slice(0, 3).reduce((n, m) => n + m.length, 0);
  assert.deepEqual(reader.push(archive.subarray(0, upTo - 1)), []);
  assert.deepEqual(
    reader.push(archive.subarray(upTo - 1, upTo)).map((m) => [m.name, m.data.toString("utf8")]),
    [["usr/share/doc/plain/changelog.gz", "plain data"]],
  );
});
