import type { Op, RouteJson } from "../caddy/routes/plan.js";
import type { BatchHooks } from "./writer.js";

/**
 * Several parts of Caddy's config that follow the routes (the access logs, on-demand issuance) as the
 * writer's one set of hooks: each is asked only about the ops it needs, each one's follow-up runs even when
 * another's failed (the first failure is thrown once all have run).
 */
export function allHooks(hooks: readonly BatchHooks[]): BatchHooks {
  return {
    needs: (op: Op) => hooks.some((h) => h.needs(op)),
    async before(ops: readonly Op[]): Promise<boolean> {
      let due = false;
      for (const h of hooks) {
        const needed = ops.filter((op) => h.needs(op));
        if (needed.length > 0 && (await h.before(needed))) due = true;
      }
      return due;
    },
    after: (changes: readonly { op: Op; previous: RouteJson | null }[]) =>
      hooks.map((h) => h.after(changes)).some(Boolean),
    async idle(): Promise<void> {
      const failures: unknown[] = [];
      for (const h of hooks) await h.idle().catch((err: unknown) => failures.push(err));
      if (failures.length > 0) throw failures[0];
    },
  };
}
