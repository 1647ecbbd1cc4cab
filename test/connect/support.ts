import type { KeyObject } from "node:crypto";
import type { IncomingMessage } from "node:http";
import WebSocket from "ws";
import {
  channelBinding,
  decodeFrame,
  encodeFrame,
  type Frame,
  newNonce,
  publicKeyBase64,
  SUBPROTOCOL,
  signTranscript,
  transcript,
} from "../../src/connect/protocol.js";

/**
 * A handshake made here, as an agent holding `key` would make it, on a new connection: the frames sent
 * (hello, auth) and the control plane's answer to the auth. With `replay`, those frames are sent instead
 * of fresh ones, whatever the control plane's challenge says (`replay[0]` undefined: a fresh hello).
 */
export async function handshakeAs(
  url: string,
  ca: string,
  key: KeyObject,
  replay?: (Buffer | undefined)[],
): Promise<{ sent: Buffer[]; answer: Frame }> {
  const ws = new WebSocket(url, SUBPROTOCOL, { ca });
  let binding = "";
  ws.once("upgrade", (res: IncomingMessage) => {
    binding = channelBinding(res.socket);
  });
  const frames: Frame[] = [];
  let wake: (() => void) | undefined;
  ws.on("message", (data) => {
    frames.push(decodeFrame(data as Buffer).header);
    wake?.();
  });
  ws.on("close", () => wake?.());
  const next = async (): Promise<Frame> => {
    while (frames.length === 0) {
      if (ws.readyState === ws.CLOSED) throw new Error("closed");
      await new Promise<void>((resolve) => {
        wake = resolve;
      });
    }
    return frames.shift() as Frame;
  };
  await new Promise<void>((resolve, reject) => {
    ws.once("open", () => resolve());
    ws.once("error", reject);
  });
  const publicKey = publicKeyBase64(key);
  const nonce = newNonce();
  const hello =
    replay?.[0] ?? encodeFrame({ t: "hello", v: 1, key: publicKey, nonce, binding, agent_version: "test" });
  ws.send(hello);
  const challenge = await next();
  if (challenge.t === "refused") {
    ws.terminate();
    return { sent: [hello], answer: challenge };
  }
  if (challenge.t !== "challenge") throw new Error(`expected a challenge, got ${challenge.t}`);
  const auth =
    replay?.[1] ??
    encodeFrame({
      t: "auth",
      sig: signTranscript(
        key,
        transcript("agent", {
          agentKey: publicKey,
          controlPlaneKey: challenge.key,
          agentNonce: nonce,
          controlPlaneNonce: challenge.nonce,
          binding,
        }),
      ),
    });
  ws.send(auth);
  const answer = await next();
  ws.terminate();
  return { sent: [hello, auth], answer };
}
