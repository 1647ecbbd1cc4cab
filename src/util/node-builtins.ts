/**
 * `node:fs` and `node:http` for the agent's own modules, loaded with `require()` rather than `import`. An ESM
 * import of a built-in module reads every one of its exports, and these two have exports Node loads only
 * when read: `http.WebSocket` (and `CloseEvent`, `MessageEvent`) loads the bundled fetch implementation
 * (undici), `fs.ReadStream` and `fs.promises` load file streams and readline. The agent uses none of them,
 * and an import of `node:http` alone made a bare Node's resident memory markedly larger. Types
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
