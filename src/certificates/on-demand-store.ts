import type { Db, Migration } from "../store/db.js";

export const onDemandMigrations: Migration[] = [
  {
    name: "certificates.001_on_demand_hosts",
    sql: `CREATE TABLE on_demand_hosts (
      route_id TEXT NOT NULL,
      host TEXT NOT NULL,
      allowed_at TEXT NOT NULL,
      PRIMARY KEY (route_id, host)
    );`,
  },
];

/** The hosts of wildcard routes allowed a certificate of their own, by route: what the per-route limit counts. */
export class OnDemandHosts {
  constructor(private readonly db: Db) {}

  has(routeId: string, host: string): boolean {
    return (
      this.db.prepare("SELECT 1 FROM on_demand_hosts WHERE route_id = ? AND host = ?").get(routeId, host) !==
      undefined
    );
  }

  count(routeId: string): number {
    const row = this.db
      .prepare("SELECT COUNT(*) AS n FROM on_demand_hosts WHERE route_id = ?")
      .get(routeId) as {
      n: number;
    };
    return row.n;
  }

  add(routeId: string, host: string, at: Date): void {
    this.db
      .prepare("INSERT OR IGNORE INTO on_demand_hosts (route_id, host, allowed_at) VALUES (?, ?, ?)")
      .run(routeId, host, at.toISOString());
  }

  /** Every host allowed, of any route. */
  all(): string[] {
    return (this.db.prepare("SELECT DISTINCT host FROM on_demand_hosts").all() as { host: string }[]).map(
      (r) => r.host,
    );
  }

  /** Forgets the hosts of every route but `routeIds` (those deleted start from none when created again). */
  keepOnly(routeIds: ReadonlySet<string>): number {
    const held = this.db.prepare("SELECT DISTINCT route_id FROM on_demand_hosts").all() as {
      route_id: string;
    }[];
    const gone = held.map((r) => r.route_id).filter((id) => !routeIds.has(id));
    const del = this.db.prepare("DELETE FROM on_demand_hosts WHERE route_id = ?");
    for (const id of gone) del.run(id);
    return gone.length;
  }
}
