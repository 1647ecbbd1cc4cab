import { CaddyApiError } from "./admin.js";
import type { CaddyConfig } from "./config.js";

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

/**
 * The parts of Caddy's config the certificates need, each a small read: where Caddy stores certificates
 * (`storage`), where its default log goes, its automation policies; and the one part they write,
 * `apps.tls.certificates` (the agent's `load_files`), as a change of CaddyConfig (If-Match, so no other
 * writer's change is lost).
 */
export class CaddyTlsConfig {
  constructor(private readonly config: CaddyConfig) {}

  /** Caddy's top-level `storage`; undefined when Caddy uses its default (a file system under its data dir). */
  storage(): Promise<{ module?: string; root?: string } | undefined> {
    return this.config.value(["storage"]);
  }

  /** The file Caddy's default log is written to; undefined when it goes elsewhere (stderr: the journal). */
  async defaultLogFile(): Promise<string | undefined> {
    const w = await this.config.value<{ output?: string; filename?: string }>([
      "logging",
      "logs",
      "default",
      "writer",
    ]);
    return w?.output === "file" && typeof w.filename === "string" ? w.filename : undefined;
  }

  async policies(): Promise<AutomationPolicy[]> {
    return (await this.config.value<AutomationPolicy[]>(["apps", "tls", "automation", "policies"])) ?? [];
  }

  /**
   * Sets the agent's entries of `apps.tls.certificates.load_files` (those `ours` recognises) to `wanted`,
   * keeping every other entry and every other key of `apps.tls.certificates`, as one config change made only
   * when it differs (the key is removed when nothing is left in it). Creates what is missing above it (the
   * TLS app itself on a Caddy that has none). True when Caddy's config changed.
   */
  async setLoadFiles(wanted: LoadFile[], ours: (entry: LoadFile) => boolean): Promise<boolean> {
    const done = await this.config.update(CERTIFICATES, (current) => withLoadFiles(current, wanted, ours));
    if (done.missing) throw new CaddyApiError(400, "Caddy's config has no apps object to put the TLS app in");
    return done.written;
  }
}

/** `apps.tls.certificates` (undefined: none) holding `ourFiles` as the agent's entries of `load_files`. */
function withLoadFiles(current: unknown, ourFiles: LoadFile[], ours: (entry: LoadFile) => boolean): unknown {
  if (current === undefined) return ourFiles.length === 0 ? undefined : { load_files: ourFiles };
  const { load_files: present, ...others } = current as Record<string, unknown>;
  const foreign = Array.isArray(present) ? (present as LoadFile[]).filter((e) => !ours(e)) : [];
  const wanted = [...foreign, ...ourFiles];
  return wanted.length === 0 ? others : { ...others, load_files: wanted };
}
