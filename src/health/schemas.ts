import { type Static, Type } from "@sinclair/typebox";
import { AgentUpdateStatusSchema } from "../agent-update/schemas.js";
import { ActiveInstanceSchema } from "../operator/schemas.js";
import { RefTo, StringEnum } from "../util/typebox.js";

const Nullable = <T extends ReturnType<typeof Type.String | typeof Type.Integer | typeof Type.Boolean>>(
  schema: T,
  description: string,
) => Type.Union([schema, Type.Null()], { description });

/** One readiness check. */
const check = (description: string) =>
  Type.Object(
    {
      status: StringEnum(["ok", "failing"]),
      detail: Type.String({ description: "What was found, in one sentence." }),
    },
    { additionalProperties: false, description },
  );

export const ReadinessSchema = Type.Object(
  {
    status: StringEnum(["ready", "not_ready"], {
      description: "`ready` when every check is `ok` (then `GET /readyz` answers 200, else 503).",
    }),
    checks: Type.Object(
      {
        database: check("The agent's database answers a query."),
        caddy_admin: check(
          "Caddy's admin API answers (within 1 s, tried again after a connection error). Caddy restarts it after every config change: when it does not answer but answered within the last 30 s and every TCP listen address of the managed server still accepts, Caddy's process is serving and the check is `ok`, its detail saying so.",
        ),
        listeners: check(
          "Every TCP listen address of the managed server accepts connections (within 1 s). Embedded Caddy: the server must exist; with `HOSTKEEPER_CADDY_ADMIN`, a server not created yet is ok (the first route creates it).",
        ),
      },
      { additionalProperties: false },
    ),
  },
  { additionalProperties: false, $id: "Readiness", title: "Readiness" },
);
export type Readiness = Static<typeof ReadinessSchema>;
export type Check = Readiness["checks"]["database"];

const ConnectionStatusSchema = Type.Object(
  {
    url: Type.String({ description: "`HOSTKEEPER_CONNECT_URL`." }),
    state: Type.Union(
      ["connecting", "connected", "waiting", "stopped"].map((s) => Type.Literal(s)),
      { description: "`waiting`: between a lost connection and the next dial (the back-off)." },
    ),
    since: Type.String({ format: "date-time", description: "When the connection entered its state." }),
    control_plane: Type.Union([Type.String(), Type.Null()], {
      description:
        "The fingerprint of the pinned key the control plane proved on this connection; null when not connected.",
    }),
    enrolled: Type.Boolean({ description: "Whether the control plane has accepted the agent's enrollment." }),
    last_error: Type.Union(
      [
        Type.Object(
          { message: Type.String(), at: Type.String({ format: "date-time" }) },
          { additionalProperties: false },
        ),
        Type.Null(),
      ],
      { description: "Why the last connection ended or failed (an unpinned key, a refusal, a time-out)." },
    ),
    reconnects: Type.Integer({ description: "Connections lost or failed since the agent started." }),
    frames_in: Type.Integer(),
    frames_out: Type.Integer(),
    bytes_in: Type.Integer(),
    bytes_out: Type.Integer(),
  },
  { additionalProperties: false },
);

export const AgentStatusSchema = Type.Object(
  {
    versions: Type.Object(
      {
        agent: Type.String({ description: "Hostkeeper's version (package.json)." }),
        node: Type.String({ description: "The Node.js version running the agent." }),
        caddy: Nullable(
          Type.String(),
          "`caddy version` of the embedded Caddy's executable; null with `HOSTKEEPER_CADDY_ADMIN` (another's Caddy: its admin API does not say) or while it is down.",
        ),
        package_manager: Type.Object(
          {
            name: StringEnum(["apt", "dnf", "none"]),
            version: Nullable(Type.String(), "Null when the program could not say."),
          },
          { additionalProperties: false },
        ),
      },
      { additionalProperties: false },
    ),
    started_at: Type.String({ format: "date-time", description: "When the agent's process started." }),
    uptime_seconds: Type.Integer(),
    caddy: Type.Object(
      {
        mode: StringEnum(["embedded", "external"], {
          description: "`embedded`: the agent's own Caddy, supervised; `external`: `HOSTKEEPER_CADDY_ADMIN`.",
        }),
        state: StringEnum(["running", "restarting", "unreachable", "stopped"], {
          description:
            "`running`: the admin API answers; `restarting`: the embedded Caddy exited and is being started again; `unreachable`: the admin API does not answer; `stopped`: the agent is stopping.",
        }),
        pid: Nullable(
          Type.Integer(),
          "PID of the embedded Caddy; null while it is down, and with `external`.",
        ),
        adopted: Type.Boolean({
          description:
            "The embedded Caddy was already running when the agent started (it is watched by its PID).",
        }),
        restarts: Type.Integer({
          description:
            "How many times the agent started the embedded Caddy again after it exited, since the agent started.",
        }),
        last_exit_at: Nullable(Type.String({ format: "date-time" }), "When the embedded Caddy last exited."),
        last_restart_at: Nullable(
          Type.String({ format: "date-time" }),
          "When the agent last started it again.",
        ),
      },
      { additionalProperties: false },
    ),
    routes: Type.Object(
      {
        count: Nullable(Type.Integer(), "Routes of the managed server; null when Caddy could not be read."),
      },
      { additionalProperties: false },
    ),
    outbox: Type.Object(
      {
        pending: Type.Integer({ description: "Callbacks waiting for their next delivery attempt." }),
        dead: Type.Integer({ description: "Callbacks that exhausted their retries (dead letters)." }),
      },
      { additionalProperties: false },
    ),
    updates: Type.Object(
      {
        last_check_at: Nullable(
          Type.String({ format: "date-time" }),
          "When check-updates last succeeded (kept across restarts); null before the first.",
        ),
        security_updates: Nullable(Type.Integer(), "What that check found."),
        regular_updates: Nullable(Type.Integer(), "What that check found."),
        reboot_required: Nullable(Type.Boolean(), "What that check found."),
      },
      { additionalProperties: false },
    ),
    boot: Type.Object(
      {
        boot_id: Nullable(
          Type.String(),
          "The host's boot id (`HOSTKEEPER_BOOT_ID_FILE`); null when it cannot be read (reboots are then not tracked).",
        ),
        booted_at: Nullable(Type.String({ format: "date-time" }), "When the host booted (from its uptime)."),
        kernel: Nullable(Type.String(), "The running kernel's release (`uname -r`)."),
        last_reboot: Type.Union(
          [
            Type.Object(
              {
                previous_boot_id: Type.String(),
                detected_at: Type.String({
                  format: "date-time",
                  description: "When the agent first ran in the new boot.",
                }),
                planned: Type.Boolean({
                  description:
                    "Whether it was the reboot an apply scheduled (`auto_reboot`); false: unplanned.",
                }),
                apply_id: Nullable(Type.Integer(), "The apply whose reboot it was."),
              },
              { additionalProperties: false },
            ),
            Type.Null(),
          ],
          { description: "The latest reboot the agent noticed; null before any." },
        ),
      },
      { additionalProperties: false },
    ),
    operator: Type.Object(
      {
        active_instance: Type.Union([RefTo(ActiveInstanceSchema), Type.Null()], {
          description: "Null when no operator is installed.",
        }),
      },
      { additionalProperties: false },
    ),
    agent_update: Type.Union([RefTo(AgentUpdateStatusSchema), Type.Null()], {
      description: "The agent's newest self-update (`POST /v1/agent/update`); null before the first.",
    }),
    connect: Type.Object(
      {
        public_key: Type.String({
          description: "The agent's Ed25519 public key, base64 of its 32 bytes, made at its first start.",
        }),
        fingerprint: Type.String({
          description: "`SHA256:` and the unpadded base64 of the SHA-256 of the public key's 32 bytes.",
        }),
        connection: Type.Union([ConnectionStatusSchema, Type.Null()], {
          description: "The connection to the control plane; null without `HOSTKEEPER_CONNECT_URL`.",
        }),
      },
      {
        additionalProperties: false,
        description:
          "The agent's key pair and its outbound connection to the control plane (docs/connect.md).",
      },
    ),
    readiness: RefTo(ReadinessSchema),
  },
  {
    additionalProperties: false,
    $id: "AgentStatus",
    title: "AgentStatus",
    description: "The agent at a glance; `readiness` holds the checks of `GET /readyz`.",
  },
);
export type AgentStatus = Static<typeof AgentStatusSchema>;

export const healthSharedSchemas = [ReadinessSchema, AgentStatusSchema];
