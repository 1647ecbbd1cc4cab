import { type Static, Type } from "@sinclair/typebox";
import { NullableString } from "../util/typebox.js";
import type { Candidate } from "./candidates.js";
import type { LastCheck } from "./last-check.js";

const Nullable = <T extends ReturnType<typeof Type.Integer>>(t: T) => Type.Union([t, Type.Null()]);
const Time = (description: string) => NullableString(Type.String({ format: "date-time", description }));

export const ComplianceSchema = Type.Object(
  {
    checked_at: Time(
      "The last successful check for updates; null before the first. The figures below are as of it, less what applies installed since.",
    ),
    security_updates_pending: Type.Integer({ description: "Packages with a security update not installed." }),
    oldest_security_update_age_seconds: Nullable(
      Type.Integer({
        description: "Since the agent first saw the oldest of those updates; null when none is pending.",
      }),
    ),
    cves_pending: Type.Integer({
      description: "CVEs the advisories of the pending updates name (security updates' and regular ones').",
    }),
    oldest_cve_age_seconds: Nullable(
      Type.Integer({
        description:
          "Since the agent first saw a fix of the oldest of those CVEs; null when none is pending.",
      }),
    ),
    last_successful_apply_at: Time("When the last apply that succeeded finished; null when none has."),
    reboot_required: Type.Union([Type.Boolean(), Type.Null()], {
      description: "Whether the last check found a reboot required; null before the first check.",
    }),
    reboot_required_since: Time(
      "The first check that found the reboot required, while it still is; else null.",
    ),
  },
  { additionalProperties: false, $id: "Compliance", title: "Compliance" },
);
export type Compliance = Static<typeof ComplianceSchema>;

const ageSeconds = (since: number, now: number) => Math.max(0, Math.floor((now - since) / 1000));

/** The host's patch state from what the agent recorded: its last check, the candidates' first sightings, its applies. */
export function complianceOf(
  check: LastCheck | null,
  candidates: readonly Candidate[],
  lastSuccessfulApplyAt: string | null,
  now: number,
): Compliance {
  const security = candidates.filter((c) => c.security);
  const oldest = (list: readonly Candidate[]) =>
    list.length === 0 ? null : ageSeconds(Math.min(...list.map((c) => Date.parse(c.firstSeenAt))), now);
  // A CVE is pending while any candidate's advisories name it, a regular update's too.
  const fixing = candidates.filter((c) => c.cves.length > 0);
  const cves = new Set(fixing.flatMap((c) => c.cves));
  return {
    checked_at: check?.checked_at ?? null,
    security_updates_pending: new Set(security.map((c) => `${c.name}\u0000${c.arch}`)).size,
    oldest_security_update_age_seconds: oldest(security),
    cves_pending: cves.size,
    oldest_cve_age_seconds: oldest(fixing),
    last_successful_apply_at: lastSuccessfulApplyAt,
    reboot_required: check?.reboot_required ?? null,
    reboot_required_since: check?.reboot_required ? (check.reboot_required_since ?? null) : null,
  };
}
