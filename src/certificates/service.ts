import { join } from "node:path";
import type { Logger } from "pino";
import { CaddyApiError, CaddyUnavailableError } from "../caddy/admin.js";
import type { AutomationPolicy, CaddyTlsConfig, LoadFile } from "../caddy/tls-config.js";
import { ChangeRejectedError, ProxyUnavailableError } from "../proxy/errors.js";
import { retried } from "../util/retry.js";
import { SharedFolder, UnsafePathError } from "../util/shared-folder.js";
import { CaddyCopies, LOAD_FILES_TAG } from "./caddy-copies.js";
import {
  CaddyStorage,
  CertificateFiles,
  INTERNAL_ISSUER_KEY,
  type StorageList,
  storageKey,
} from "./caddy-storage.js";
import { type CustomCertificate, type CustomCertificateStore, customCertificate } from "./custom-store.js";
import {
  type CertificateEntry,
  certificateFields,
  customEntry,
  customFor,
  hostsOf,
  issuerKeysOf,
  policyFor,
  statusOf,
} from "./entries.js";
import {
  CertificateCoversOperatorDomainError,
  CertificateNotFoundError,
  CertificateStorageUnknownError,
} from "./errors.js";
import { JournalErrors } from "./journal-errors.js";
import { type ObtainError, ObtainErrorLog } from "./obtain-errors.js";
import { checkCustomCertificate } from "./pem.js";
import { nameCovering } from "./served-names.js";

export interface CertificateServiceOptions {
  tls: CaddyTlsConfig;
  store: CustomCertificateStore;
  /** The managed server's routes as Caddy's JSON text (the route writer's read). */
  routesText: () => Promise<string>;
  /** The hosts of wildcard routes allowed a certificate on demand (on-demand-store.ts), listed as hosts too. */
  onDemandHosts?: () => readonly string[];
  /** Where Caddy keeps its data (its XDG_DATA_HOME) when its config names no storage: known for the embedded one. */
  caddyDataDir: string | undefined;
  warningDays: number;
  /** The operator's domain (its route id), which no custom certificate may cover; undefined without one. */
  operatorDomain?: string | undefined;
  /** The systemd unit whose journal holds Caddy's log when that log is written to no file (the packaged Caddy). */
  caddyJournalUnit?: string | undefined;
  now: () => number;
  log: Logger;
}

/**
 * Runs requests to Caddy: Caddy unreachable is ProxyUnavailableError, an error answer too for a read and
 * ChangeRejectedError for a change (Caddy keeps its previous config).
 */
async function proxied<T>(run: () => Promise<T>, change = false): Promise<T> {
  try {
    return await run();
  } catch (err) {
    if (err instanceof CaddyUnavailableError) throw new ProxyUnavailableError(err.message);
    if (err instanceof CaddyApiError)
      throw change ? new ChangeRejectedError(err.message) : new ProxyUnavailableError(err.message);
    throw err;
  }
}

const ours = (e: LoadFile) => Array.isArray(e.tags) && e.tags.includes(LOAD_FILES_TAG);

/**
 * The certificates of the managed server's hosts, read from what Caddy stores and loads, and the custom
 * certificates: kept with the agent's secrets, copied where only Caddy's user reads them, and loaded into
 * Caddy through `apps.tls.certificates.load_files` (never inlined: Caddy's autosave and every read of its
 * config would hold the key). Changes to the custom certificates are made one at a time.
 */
export class CertificateService {
  private readonly storage = new CaddyStorage(new CertificateFiles());
  private readonly obtainErrors = new ObtainErrorLog();
  private readonly journal: JournalErrors | undefined;
  private queue: Promise<unknown> = Promise.resolve();
  private conforming: Promise<void> = Promise.resolve();

  constructor(private readonly o: CertificateServiceOptions) {
    this.journal =
      o.caddyJournalUnit === undefined
        ? undefined
        : new JournalErrors(o.caddyJournalUnit, this.obtainErrors, o.log, o.now);
  }

  private get warningMs(): number {
    return this.o.warningDays * 86_400_000;
  }

  /** Runs `fn` after every change queued before it. */
  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const run = this.queue.then(fn, fn);
    this.queue = run.catch(() => undefined);
    return run;
  }

  /** Where Caddy stores its certificates: the root of its `file_system` storage. */
  private async storageRoot(): Promise<string> {
    const storage = await proxied(() => this.o.tls.storage());
    if (storage?.module === "file_system" && typeof storage.root === "string" && storage.root !== "")
      return storage.root;
    if (storage !== undefined && storage.module !== "file_system")
      throw new CertificateStorageUnknownError(
        `Caddy stores its certificates in a ${String(storage.module)} storage, which the agent cannot read`,
      );
    if (this.o.caddyDataDir === undefined)
      throw new CertificateStorageUnknownError(
        "Caddy's config names no storage and HOSTKEEPER_CADDY_DATA_DIR is not set: the agent does not know where this Caddy keeps its certificates",
      );
    return join(this.o.caddyDataDir, "caddy");
  }

  /**
   * One entry per host the managed server's routes serve (the certificate a TLS client gets for it; for a
   * wildcard route, its own host and each host it allowed on demand), then one per custom certificate. Other work gets the event loop every few hundred hosts: the first list at a
   * large host parses a certificate for every host.
   */
  async list(): Promise<CertificateEntry[]> {
    const [routesText, root, logFile, policies] = await proxied(() =>
      Promise.all([
        this.o.routesText(),
        this.storageRoot(),
        this.o.tls.defaultLogFile(),
        this.o.tls.policies(),
      ]),
    );
    const caddyUser = await this.warned(() => this.caddyUser());
    const errors = await this.obtainErrorsOf(logFile, caddyUser);
    const storage = await this.warned(() => this.storage.open(root, caddyUser));
    let entries: CertificateEntry[];
    try {
      entries = await this.warned(() => this.hostEntries(routesText, storage, policies, errors));
    } finally {
      storage.close();
    }
    for (const c of this.o.store.all()) entries.push(customEntry(c, this.o.now(), this.warningMs));
    return entries;
  }

  /**
   * Caddy's last failures to get certificates, from its journal or its log file. A log file that fails
   * SharedFolder's checks is left unread, with a warning: the list goes on without the errors.
   */
  private async obtainErrorsOf(
    logFile: string | undefined,
    caddyUser: number | undefined,
  ): Promise<ReadonlyMap<string, ObtainError>> {
    if (logFile === undefined && this.journal) return this.journal.read();
    try {
      return await this.warned(() => this.obtainErrors.read(logFile, caddyUser));
    } catch (err) {
      if (err instanceof UnsafePathError) return new Map();
      throw err;
    }
  }

  /** The entries of the hosts the managed server's routes serve (see `list`). */
  private async hostEntries(
    routesText: string,
    storage: StorageList,
    policies: readonly AutomationPolicy[],
    errors: ReadonlyMap<string, ObtainError>,
  ): Promise<CertificateEntry[]> {
    const customs = this.o.store.all();
    const stored = storage.issuerKeys();
    // The storage folders a policy's issuers use, worked out once per policy rather than per host.
    const folders = new Map<AutomationPolicy | undefined, string[]>();
    const foldersOf = (policy: AutomationPolicy | undefined) => {
      let f = folders.get(policy);
      if (f === undefined) {
        const keys = issuerKeysOf(policy)?.map(storageKey);
        f = keys === undefined ? stored : stored.filter((k) => keys.includes(k));
        folders.set(policy, f);
      }
      return f;
    };
    const entries: CertificateEntry[] = [];
    let n = 0;
    const onDemand = this.o.onDemandHosts?.() ?? [];
    const hosts =
      onDemand.length === 0
        ? hostsOf(routesText)
        : [...new Set([...hostsOf(routesText), ...onDemand])].sort();
    for (const host of hosts) {
      if (++n % 500 === 0) await new Promise((r) => setImmediate(r));
      const now = this.o.now();
      const custom = customFor(host, customs);
      if (custom) {
        entries.push({ ...customEntry(custom, now, this.warningMs), host });
        continue;
      }
      const found = storage.managed(host, foldersOf(policyFor(host, policies)));
      const status = found ? statusOf(found.facts, now, this.warningMs) : "missing";
      entries.push({
        host,
        name: null,
        ...(found
          ? certificateFields(found.facts)
          : { names: [], issuer: null, serial: null, not_before: null, not_after: null }),
        source: found ? (found.issuerKey === INTERNAL_ISSUER_KEY ? "internal" : "acme") : null,
        status,
        error: status === "valid" ? null : (errors.get(host) ?? null),
      });
    }
    return entries;
  }

  /**
   * Caddy's user, when the agent knows it: the owner of HOSTKEEPER_CADDY_DATA_DIR (or of the embedded
   * Caddy's folder). Caddy's storage and log must then be that user's; otherwise their owner is taken as it is.
   */
  private caddyUser(): number | undefined {
    return this.o.caddyDataDir === undefined ? undefined : SharedFolder.ownerOf(this.o.caddyDataDir);
  }

  private async copies(): Promise<CaddyCopies> {
    return new CaddyCopies(await this.storageRoot(), this.caddyUser());
  }

  /** Runs `fn`; a folder or file of Caddy's user that fails SharedFolder's checks is also a warning in the log. */
  private async warned<T>(fn: () => T | Promise<T>): Promise<T> {
    try {
      return await fn();
    } catch (err) {
      if (err instanceof UnsafePathError)
        this.o.log.warn({ path: err.path, reason: err.reason }, `refused ${err.path}: it ${err.reason}`);
      throw err;
    }
  }

  /** The entry of the custom certificate `name`. */
  get(name: string): CertificateEntry {
    const c = this.o.store.get(name);
    if (!c) throw new CertificateNotFoundError(name);
    return customEntry(c, this.o.now(), this.warningMs);
  }

  /**
   * Puts the custom certificate `name` (replacing one of that name in the same config change): checked,
   * copied for Caddy, loaded, and only then stored; the copies of what it replaced go last.
   */
  async put(
    name: string,
    certificatePem: string,
    keyPem: string,
  ): Promise<{ created: boolean; entry: CertificateEntry }> {
    const checked = checkCustomCertificate(certificatePem, keyPem, new Date(this.o.now()));
    // Caddy prefers a loaded certificate to the one it manages: one covering the operator's domain would
    // be served for it, and the operator's route is not the API's to change.
    const operator = this.o.operatorDomain;
    const covering = operator === undefined ? undefined : nameCovering(checked.certificatePem, operator);
    if (operator !== undefined && covering !== undefined)
      throw new CertificateCoversOperatorDomainError(operator, covering);
    const cert = customCertificate(name, checked.certificatePem, checked.keyPem);
    return this.serial(() =>
      this.warned(async () => {
        const copies = await this.copies();
        const previous = this.o.store.get(name);
        const others = this.o.store.all().filter((c) => c.name !== name);
        // Every copy Caddy is to load, not only the new one: Caddy refuses a config naming a missing file.
        copies.write([...others, cert]);
        try {
          await this.load(copies, [...others, cert]);
        } catch (err) {
          // Caddy refused and keeps its config: the new copies go. Without an answer Caddy may have taken
          // them, so they stay until the next change or start tidies up.
          if (err instanceof ChangeRejectedError)
            copies.removeAllBut(previous ? [...others, previous] : others);
          throw err;
        }
        this.o.store.put(cert);
        copies.removeAllBut(this.o.store.all());
        this.o.log.info(
          { certificate: name, names: cert.facts.names, replaced: previous !== undefined },
          "loaded a custom certificate into Caddy",
        );
        return { created: previous === undefined, entry: customEntry(cert, this.o.now(), this.warningMs) };
      }),
    );
  }

  /** Removes the custom certificate `name`: unloaded from Caddy first (its hosts go back to issuance). */
  async delete(name: string): Promise<void> {
    return this.serial(() =>
      this.warned(async () => {
        if (!this.o.store.get(name)) throw new CertificateNotFoundError(name);
        const copies = await this.copies();
        const kept = this.o.store.all().filter((c) => c.name !== name);
        copies.write(kept);
        await this.load(copies, kept);
        this.o.store.remove(name);
        // Only once Caddy no longer names them: Caddy refuses every config change while a loaded file is gone.
        copies.removeAllBut(kept);
        this.o.log.info({ certificate: name }, "removed a custom certificate from Caddy");
      }),
    );
  }

  private load(copies: CaddyCopies, certs: readonly CustomCertificate[]): Promise<boolean> {
    return proxied(
      () =>
        this.o.tls.setLoadFiles(
          certs.map((c) => copies.loadFile(c)),
          ours,
        ),
      true,
    );
  }

  /**
   * Brings Caddy in line with the stored custom certificates at start: copies written where missing, and
   * `load_files` set when it differs (one config change, none when in line). A failure is logged and the
   * agent starts anyway; the next PUT or DELETE brings Caddy in line again.
   */
  conform(): Promise<void> {
    this.conforming = this.serial(async () => {
      try {
        // A write that meets the reload of another change at start (the routes' own conformance) sees its
        // connection reset: tried again a moment later, a bounded number of times.
        await retried(() => this.conformOnce(), {
          attempts: 3,
          delayMs: () => 1000,
          retryable: (err) => err instanceof ProxyUnavailableError,
        });
      } catch (err) {
        const level = this.o.store.all().length > 0 || err instanceof UnsafePathError ? "warn" : "debug";
        this.o.log[level]({ err }, "could not bring Caddy's custom certificates in line at start");
      }
    });
    return this.conforming;
  }

  private async conformOnce(): Promise<void> {
    const certs = this.o.store.all();
    this.warnOperatorCovered(certs);
    const copies = await this.copies();
    copies.write(certs);
    const changed = await this.load(copies, certs);
    copies.removeAllBut(certs);
    if (changed)
      this.o.log.info(
        { certificates: certs.map((c) => c.name) },
        "loaded the custom certificates into Caddy",
      );
  }

  /**
   * A custom certificate put before the operator's domain was set (or before the agent refused such) and
   * covering it is still loaded: the agent keeps what it holds, and says so at every start.
   */
  private warnOperatorCovered(certs: readonly CustomCertificate[]): void {
    const operator = this.o.operatorDomain;
    if (operator === undefined) return;
    for (const c of certs) {
      const covering = nameCovering(c.certificatePem, operator);
      if (covering !== undefined)
        this.o.log.warn(
          { certificate: c.name, name: covering, operator_domain: operator },
          "a custom certificate covers the operator's domain and is served for it: delete it",
        );
    }
  }

  /** Resolves once the start's conformance is done. */
  whenConformed(): Promise<void> {
    return this.conforming;
  }
}
