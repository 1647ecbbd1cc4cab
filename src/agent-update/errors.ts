/**
 * Why the agent-update area refused a request. They know nothing of HTTP: `problems.ts` turns them into the
 * API's problems. (Why an update itself failed is recorded in its status, not thrown at a caller.)
 */

/** Self-update needs the agent installed from its package and run by systemd. */
export class AgentUpdateUnsupportedError extends Error {
  constructor(why: string) {
    super(`self-update needs the packaged service (hostkeeper.service from the .deb or .rpm): ${why}`);
    this.name = "AgentUpdateUnsupportedError";
  }
}

/** Without trusted keys, no package is installed. */
export class AgentUpdateNotConfiguredError extends Error {
  constructor() {
    super(
      "no key is trusted for the agent's packages (HOSTKEEPER_AGENT_UPDATE_KEYS is not set), so self-update is refused; docs/install.md, Self-update, says how to set it up",
    );
    this.name = "AgentUpdateNotConfiguredError";
  }
}

export class AgentUpdateNotFoundError extends Error {
  constructor(readonly updateId: string) {
    super(`no agent update with id ${updateId}`);
    this.name = "AgentUpdateNotFoundError";
  }
}

/** One update at a time. */
export class AgentUpdateInProgressError extends Error {
  constructor(readonly runningId: string) {
    super(`agent update ${runningId} is under way; try again when it ends`);
    this.name = "AgentUpdateInProgressError";
  }
}
