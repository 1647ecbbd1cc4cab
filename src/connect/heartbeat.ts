import type WebSocket from "ws";
import { DEAD_AFTER_MS, HEARTBEAT_MS } from "./protocol.js";

/**
 * Either side's heartbeat: a ping every `everyMs`; a peer from whom nothing (a message, a ping, a pong) came
 * for `deadAfterMs` is dead, and its connection is ended after `onDead`. Stops with the connection.
 */
export function keepAlive(
  ws: WebSocket,
  timing: { everyMs?: number | undefined; deadAfterMs?: number | undefined } = {},
  onDead: () => void = () => {},
): void {
  let lastHeard = Date.now();
  const heard = () => {
    lastHeard = Date.now();
  };
  for (const event of ["message", "ping", "pong"] as const) ws.on(event, heard);
  const deadAfter = timing.deadAfterMs ?? DEAD_AFTER_MS;
  const beat = setInterval(() => {
    if (Date.now() - lastHeard <= deadAfter) {
      ws.ping();
      return;
    }
    onDead();
    ws.terminate();
  }, timing.everyMs ?? HEARTBEAT_MS);
  beat.unref();
  ws.once("close", () => clearInterval(beat));
}
