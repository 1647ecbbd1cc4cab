import { type CaddyAdmin, CaddyApiError, caddyErrorText } from "../caddy/admin.js";
import { canonicalJson } from "../util/canonical-json.js";

/** One entry of `apps.tls.certificates.load_files`: a certificate Caddy reads from files at each load. */
export interface LoadFile {
  certificate: string;
  key: string;
  format: "pem";
  tags: string[];
}

/** An automation policy of Caddy's TLS app, as far as the list needs it: which names, which issuers. */
export interface AutomationPolicy {
  subjects?: string[];
  issuers?: { module?: string; ca?: string }[];
}

/** The path the agent owns in Caddy's config; the automation policies and the PKI app are not its. */
const CERTIFICATES = ["apps", "tls", "certificates"];
const ATTEMPTS = 3;

/**
 * The parts of Caddy's config the certificates need, each a small read: where Caddy stores certificates
 * (`storage`), where its default log goes, its automation policies; and the one part they write,
 * `apps.tls.certificates` (the agent's `load_files`), with If-Match so no other writer's change is lost.
 */
export class CaddyTlsConfig {
  constructor(private readonly admin: CaddyAdmin) {}

  /** The value at a config path; undefined when it (or a part of the path above it) is not there. */
  private async value<T>(path: string): Promise<T | undefined> {
    const r = await this.admin.read(path);
    // A missing intermediate object is 400 on a read: nothing there either.
    if (r.status === 400) return undefined;
    if (r.status !== 200) throw new CaddyApiError(r.status, caddyErrorText(r));
    return (JSON.parse(r.text) as T | null) ?? undefined;
  }

  /** Caddy's top-level `storage`; undefined when Caddy uses its default (a file system under its data dir). */
  storage(): Promise<{ module?: string; root?: string } | undefined> {
    return this.value("/config/storage");
  }

  /** The file Caddy's default log is written to; undefined when it goes elsewhere (stderr: the journal). */
  async defaultLogFile(): Promise<string | undefined> {
    const w = await this.value<{ output?: string; filename?: string }>("/config/logging/logs/default/writer");
    return w?.output === "file" && typeof w.filename === "string" ? w.filename : undefined;
  }

  async policies(): Promise<AutomationPolicy[]> {
    return (await this.value<AutomationPolicy[]>("/config/apps/tls/automation/policies")) ?? [];
  }

  /**
   * Sets the agent's entries of `apps.tls.certificates.load_files` (those `ours` recognises) to `wanted`,
   * keeping every other entry and every other key of `apps.tls.certificates`, as one config change made only
   * when it differs (the key is removed when nothing is left in it). Creates what is missing above it (the
   * TLS app itself on a Caddy that has none). True when Caddy's config changed.
   */
  async setLoadFiles(wanted: LoadFile[], ours: (entry: LoadFile) => boolean): Promise<boolean> {
    for (let attempt = 1; ; attempt++) {
      try {
        return await this.writeLoadFiles(wanted, ours);
      } catch (err) {
        // Another writer changed the same part meanwhile (If-Match failed, or it created the key first).
        const raced = err instanceof CaddyApiError && (err.status === 412 || err.status === 409);
        if (!raced || attempt >= ATTEMPTS) throw err;
      }
    }
  }

  private async writeLoadFiles(ourFiles: LoadFile[], ours: (entry: LoadFile) => boolean): Promise<boolean> {
    // The deepest part of the path that exists is read, and written with If-Match of that read.
    for (let depth = CERTIFICATES.length; depth >= 1; depth--) {
      const path = `/config/${CERTIFICATES.slice(0, depth).join("/")}`;
      const r = await this.admin.read(path);
      if (r.status === 400) continue;
      if (r.status !== 200) throw new CaddyApiError(r.status, caddyErrorText(r));
      const current = JSON.parse(r.text) as Record<string, unknown> | null;
      if (current === null) {
        if (ourFiles.length === 0) return false;
        let body: unknown = { load_files: ourFiles };
        for (const key of CERTIFICATES.slice(depth).reverse()) body = { [key]: body };
        await this.admin.write("PUT", path, body, r.etag);
        return true;
      }
      // A parent that exists while the path below it did not a moment ago: another writer is at work.
      if (depth < CERTIFICATES.length) throw new CaddyApiError(409, `${path} appeared meanwhile`);
      const { load_files: present, ...others } = current;
      const foreign = Array.isArray(present) ? (present as LoadFile[]).filter((e) => !ours(e)) : [];
      const wanted = [...foreign, ...ourFiles];
      const next = wanted.length === 0 ? others : { ...others, load_files: wanted };
      if (canonicalJson(next) === canonicalJson(current)) return false;
      await this.admin.write("PATCH", path, next, r.etag);
      return true;
    }
    throw new CaddyApiError(400, "Caddy's config has no apps object to put the TLS app in");
  }
}
