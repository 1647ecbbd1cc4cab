/** A start-up problem of the embedded Caddy, said in one line for the person starting the agent. */
export class EmbeddedCaddyError extends Error {
  constructor(message: string) {
    super(message);
    this.name = "EmbeddedCaddyError";
  }
}
