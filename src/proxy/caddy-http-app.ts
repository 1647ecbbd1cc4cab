import { type CaddyAdmin, CaddyApiError, caddyErrorText } from "../caddy/admin.js";
import { canonicalJson } from "../util/canonical-json.js";

/** Fields of Caddy's HTTP app (`grace_period`), read and set through the admin API. */
export class CaddyHttpApp {
  constructor(private readonly admin: CaddyAdmin) {}

  /**
   * Whether `key` of Caddy's HTTP app holds another value than `value`; false when there is no HTTP app (the
   * agent creates it with the value when it creates the managed server).
   */
  async fieldDiffers(key: string, value: unknown): Promise<boolean> {
    return (await this.readField(key, value)) !== undefined;
  }

  /** Sets `key` of Caddy's HTTP app to `value` when it holds another (see `fieldDiffers`); true when it did. */
  async setField(key: string, value: unknown): Promise<boolean> {
    const etag = await this.readField(key, value);
    if (etag === undefined) return false;
    // POST sets an object's key whether or not it exists; If-Match keeps it off a concurrent change.
    await this.admin.write("POST", `/config/apps/http/${key}`, value, etag);
    return true;
  }

  /** The ETag to write `key` of the HTTP app with when it differs from `value`; undefined when it need not be. */
  private async readField(key: string, value: unknown): Promise<string | undefined> {
    const now = await this.admin.read(`/config/apps/http/${key}`);
    if (now.status === 400 || now.status === 404) return undefined;
    if (now.status !== 200) throw new CaddyApiError(now.status, caddyErrorText(now));
    if (canonicalJson(JSON.parse(now.text)) === canonicalJson(value)) return undefined;
    return now.etag ?? "";
  }
}
