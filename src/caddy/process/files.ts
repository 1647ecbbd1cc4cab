import { join } from "node:path";

/** Where the embedded Caddy keeps its files: all under `<data dir>/caddy`, which nothing else writes. */
export interface EmbeddedCaddyFiles {
  dir: string;
  /** The admin endpoint, a unix socket: only the agent's user may reach it. */
  socket: string;
  /** Written by Caddy (`--pidfile`): how the next agent finds the Caddy it adopts. */
  pidFile: string;
  /** The config Caddy is started with; `--resume` replaces it with the autosaved one once there is one. */
  bootstrap: string;
  /** Caddy's own `XDG_CONFIG_HOME` and `XDG_DATA_HOME`. */
  configHome: string;
  dataHome: string;
  /** The config Caddy saves after each change and `--resume` loads. */
  autosave: string;
  /** Caddy's log, a file Caddy rolls itself. */
  log: string;
  /** Caddy's stderr: only what it writes before its log config is loaded, and the words of a crash. */
  stderr: string;
}

export function embeddedCaddyFiles(dataDir: string): EmbeddedCaddyFiles {
  const dir = join(dataDir, "caddy");
  return {
    dir,
    socket: join(dir, "admin.sock"),
    pidFile: join(dir, "caddy.pid"),
    bootstrap: join(dir, "bootstrap.json"),
    configHome: join(dir, "config"),
    dataHome: join(dir, "data"),
    autosave: join(dir, "config", "caddy", "autosave.json"),
    log: join(dir, "caddy.log"),
    stderr: join(dir, "caddy.stderr.log"),
  };
}
