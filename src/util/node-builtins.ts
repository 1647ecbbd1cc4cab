/**
 * `node:fs` and `node:http` for the agent's own modules, loaded with `require()` rather than `import`. An ESM
 * import of a built-in module reads every one of its exports, and these two have exports Node loads only
 * when read: `http.WebSocket` (and `CloseEvent`, `MessageEvent`) loads the bundled fetch implementation
 * (undici), `fs.ReadStream` loads file streams and readline, `fs.promises` the promise API. The agent uses
 * none of the first two; the promise API only where it needs it, imported from `node:fs/promises` (the
 * operator's pipeline and artifact files, the OpenAPI document). An import of `node:http` alone made a bare
 * Node's resident memory markedly larger. Types
 * are exported here too (type exports leave nothing at run time); biome.json refuses any other import of either
 * module under src/.
 */
import { createRequire } from "node:module";

const load = createRequire(import.meta.url);

export const fs: typeof import("node:fs") = load("node:fs");
export const http: typeof import("node:http") = load("node:http");

export type { Dirent, FSWatcher, Stats } from "node:fs";
export type {
  Agent,
  ClientRequest,
  IncomingHttpHeaders,
  IncomingMessage,
  RequestListener,
  RequestOptions,
  Server,
  ServerResponse,
} from "node:http";
