import { BlockList, isIP } from "node:net";

/**
 * A list of address ranges (`10.0.0.0/8`, `fd00::/8`; a bare address is the range of itself). Throws on an
 * entry that is not one, naming it.
 */
export function parseCidrs(list: readonly string[]): string[] {
  return list.map((c) => {
    const [ip = "", bits] = c.split("/");
    const family = isIP(ip);
    const max = family === 4 ? 32 : 128;
    const n = bits === undefined ? max : Number(bits);
    if (!family || !/^\d*$/.test(bits ?? "") || !Number.isInteger(n) || n < 0 || n > max)
      throw new Error(`"${c}" is not an address range`);
    return `${ip}/${n}`;
  });
}

/** Membership of addresses in ranges, with IPv4-mapped IPv6 addresses (`::ffff:a.b.c.d`) judged as IPv4. */
export class AddressSet {
  private readonly list = new BlockList();

  constructor(readonly cidrs: readonly string[]) {
    for (const c of parseCidrs(cidrs)) {
      const [ip = "", bits = ""] = c.split("/");
      this.list.addSubnet(ip, Number(bits), isIP(ip) === 6 ? "ipv6" : "ipv4");
    }
  }

  has(address: string): boolean {
    const family = isIP(address);
    if (family === 0) return false;
    if (family === 6) {
      // An IPv4-mapped IPv6 address (::ffff:169.254.169.254) is that IPv4 host.
      const mapped = /^::ffff:(\d+\.\d+\.\d+\.\d+)$/i.exec(address);
      if (mapped?.[1]) return this.list.check(mapped[1], "ipv4") || this.list.check(address, "ipv6");
      return this.list.check(address, "ipv6");
    }
    return this.list.check(address, "ipv4");
  }
}

/** This host only: 127.0.0.0/8 and `::1` (IPv4-mapped forms included). */
export const LOOPBACK = new AddressSet(["127.0.0.0/8", "::1/128"]);
